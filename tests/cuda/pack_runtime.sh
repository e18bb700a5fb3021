#!/usr/bin/env bash
# Packs the CUDA runtime built on the compiling machine (nvcc is here; only the GPU is missing) for a device
# call, so that the call builds nothing (tests/cuda/lib.sh's gpu_build unpacks it instead):
#   tests/cuda/pack_runtime.sh [BUILD_DIR] [TARGET...]
# BUILD_DIR defaults to build/; the targets to zrun and the GPU test binaries gpu_round.sh runs. They are built
# (ninja), stripped, and packed with libzrt into .gpu-bin/runtime.tar.xz (git-ignored); carry .gpu-bin. The device
# machine has the same CUDA major, OpenMPI and OpenBLAS (session 9's calls ran binaries packed this way). The carry
# limit is 64 MiB for the working tree and all carried paths together: the size is printed, and more than 48 MiB
# fails, leaving room for the plans. xz -9e: its 64 MiB dictionary finds what the binaries' kernels repeat (session
# 11: zrun and two kernel test binaries, 94 MB stripped, 36.6 MiB at -6 and 15.1 MiB at -9e, a minute on 2 cores).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$top/build}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(zrun zplan_cuda_kernels_test zplan_cuda_train_kernels_test
  zplan_cuda_generate_kernels_test zplan_cuda_sample_test zplan_cuda_rotary_test zplan_cuda_backend_test
  zplan_cuda_train_backend_test zplan_cuda_nccl_test zplan_cuda_attention_bench)
ninja -C "$build" "${targets[@]}" > /dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for t in "${targets[@]}"; do cp "$build/bin/$t" "$stage/"; done
lib=$(readlink -f "$build/lib/libzrt.so.0")
cp "$lib" "$stage/"
ln -s "$(basename "$lib")" "$stage/libzrt.so.0"
strip "$stage"/* 2>/dev/null || true
mkdir -p "$top/.gpu-bin"
tar cf - -C "$stage" . | xz -T0 -9e > "$top/.gpu-bin/runtime.tar.xz"
# Which tree the binaries were built from, for the call's log (gpu_build prints it).
echo "$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet HEAD -- . ':!tests/models' || echo ' with uncommitted changes')" \
  > "$top/.gpu-bin/runtime.commit"
bytes=$(stat -c %s "$top/.gpu-bin/runtime.tar.xz")
echo "pack_runtime: ${#targets[@]} binaries and $(basename "$lib"), $((bytes / 1048576)) MiB in .gpu-bin/runtime.tar.xz"
if [[ $bytes -gt $((48 << 20)) ]]; then
  echo "pack_runtime: over 48 MiB: pack fewer targets (name them)" >&2
  rm -f "$top/.gpu-bin/runtime.tar.xz"
  exit 1
fi
