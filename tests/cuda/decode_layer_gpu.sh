#!/usr/bin/env bash
# One device call for the persistent decode layer (kernels/cuda/decode_layer.cu; docs/generation.md,
# "Persistent decode layer kernel: written, not yet run"), on nvidia-h200. On the compiling machine first:
#   ninja -C build zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test &&
#   tests/cuda/pack_runtime.sh build zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test
# then the call, carrying .gpu-bin:  bash tests/cuda/decode_layer_gpu.sh
#   -> CudaDecodeLayer.RefusesAGridThatCannotBeResident and .MatchesCpuReference (the kernel against the CPU
#      reference kernels, phase by phase; a hung grid barrier ends at the step's timeout, rc 124)
#   -> CudaDecodeLayer.ChainTimingAgainstSixKernels (four llama-1b layers: decode_layer against the six kernels)
#   -> CudaSkinnyStream.NormLayerChainTiming (the four streaming products alone, session 10's reference figure)
# Logs travel back as $OUT/decode-layer-logs.tgz, the summary as $OUT/summary.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
step_width=22
logs_to /tmp/zplan-decode-layer decode-layer-logs.tgz summary.txt
cd "$top" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
gpu_env
gpu_build zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test
show() { grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|Expected|Which is|decode layer|six kernels|decode_layer|norm chain|sync word|phase" "$out/$1.log" | head -${2:-40}; }
step correctness env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_decode_layer_test" \
  --gtest_filter='CudaDecodeLayer.RefusesAGridThatCannotBeResident:CudaDecodeLayer.MatchesCpuReference'
show correctness 60
step timing env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_decode_layer_test" \
  --gtest_filter='CudaDecodeLayer.ChainTimingAgainstSixKernels'
show timing
step stream_chain env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_generate_kernels_test" \
  --gtest_filter='CudaSkinnyStream.NormLayerChainTiming'
show stream_chain
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
