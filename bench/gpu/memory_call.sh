#!/usr/bin/env bash
# bench/gpu/memory_call.sh - one GPU call for the memory-bound kernels of the llama forwards (norms, the gated
# product, rotary): build (compiler off) while PyTorch's peers of the same ops run (bench/gpu/elementwise_peers.py:
# eager and torch.compile, with the copy rate), then the kernels' tests against the CPU reference (tests/cuda:
# CudaElementwise, CudaRows, CudaRotary; the backend test later, time allowing), the test models' plans against PyTorch's
# outputs (tests/cuda/check_models.sh), `zplan_cuda_kernel_bench --memory` (each kernel's time, rate and share
# of the copy rate measured in the same binary) and, while the call's time lasts, llama2-7b batch 4's forward:
# a ZRT_CUDA_PROFILE breakdown (the time of each op kind) and CUDA-graph medians of 10.
#   bench/gpu/memory_call.sh [PLANDIR]
# PLANDIR (default .gpu-plans) holds the plans of bench/gpu/make_memory_plans.sh, compiled on the compiling
# machine; FlatBuffers and GoogleTest come from .gpu-deps (scripts/gpu-deps.sh). MEMORY_CALL_DEADLINE_S
# (default 225) is the second after which no further step starts. Logs go to $OUT/memory-logs.tgz, with summary.txt, kbench.log and peers.log beside it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/cuda/lib.sh"
plans=${1:-.gpu-plans}
deadline=${MEMORY_CALL_DEADLINE_S:-225}
logs_to /tmp/memory-call memory-logs.tgz summary.txt kbench.log peers.log profile.txt
cd "$top"
gpu_env
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  | tee "$out/summary.txt"
# Each note also copies the main logs to $OUT as they stand, so that they come back even if the call is cut
# off before the exit trap packs the rest.
note() {
  echo "[+${SECONDS}s] $*" | tee -a "$out/summary.txt"
  [[ -n ${OUT:-} ]] && for f in summary.txt kbench.log peers.log profile.txt; do cp -f "$out/$f" "$OUT/" 2>/dev/null; done
  return 0
}
# left: seconds before the deadline, at least 5 (a step's timeout).
left() { local l=$((deadline - SECONDS)); echo $((l > 5 ? l : 5)); }

# The build runs niced beside the peers (their timings are GPU events; the build only takes host cores).
(
  cmake -S "$top" -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" \
    > "$out/configure.log" 2>&1 &&
    nice -n 10 ninja -C "$b" -j"$(($(nproc) - 2))" zplan_cuda_kernels_test zplan_cuda_rotary_test \
      zplan_cuda_backend_test zplan_cuda_kernel_bench zrun > "$out/build.log" 2>&1
  echo $? > "$out/build.rc"
) &
PYTHONUNBUFFERED=1 timeout 140 python3 bench/gpu/elementwise_peers.py > "$out/peers.log" 2>&1
note "PyTorch peers rc $?"
wait
note "build rc $(cat "$out/build.rc")"
if [[ $(cat "$out/build.rc") != 0 ]]; then
  tail -5 "$out/configure.log"
  grep -B2 -A12 -E "error|FAILED" "$out/build.log" | head -60
  exit 1
fi

tests() {  # NAME BINARY [ARGS...]: a gtest binary, its verdict into the summary
  local name=$1
  shift
  timeout "$(left)" "$@" > "$out/$name.log" 2>&1
  note "$name rc $? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$out/$name.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|Failure" "$out/$name.log" | head -10
}
tests kernels "$b/bin/zplan_cuda_kernels_test" --gtest_filter='CudaElementwise.*:CudaRows.*'
tests rotary "$b/bin/zplan_cuda_rotary_test"
# The comparison forms the kernel bench times must be right too.
ZK_NORM_ROW_BLOCKS=1 tests kernels-row-blocks "$b/bin/zplan_cuda_kernels_test" --gtest_filter='CudaRows.*'
ZK_ROTARY_ROWS=1 tests rotary-one-row "$b/bin/zplan_cuda_rotary_test"
timeout "$(left)" tests/cuda/check_models.sh "$b/bin/zrun" "$plans" > "$out/models.log" 2>&1
note "check_models rc $?"
grep -E "^(ok|FAIL)" "$out/models.log" | tee -a "$out/summary.txt"

timeout "$(left)" "$b/bin/zplan_cuda_kernel_bench" --memory > "$out/kbench.log" 2>&1
note "kernel bench rc $?"

# llama2-7b batch 4: the profile of the plan as compiled by default, then the CUDA-graph medians of it and of
# the plan with the rotary fold (--fold-rotary on: q and k rotated sequence-major, no head split transposes).
# zrun draws the 6.7 B random weights on the host first, so each run starts only with time left for it.
p7=$plans/llama2-7b-tp1.zplan
if [[ -f $p7 ]] && ((SECONDS < deadline - 40)); then
  ZRT_CUDA_PROFILE=1 ZRT_CUDA_PROFILE_TOP=25 timeout "$(left)" "$b/bin/zrun" "$p7" --backend cuda \
    --init random --random-inputs --repeat 3 > "$out/profile.txt" 2>&1
  note "llama2-7b profile rc $?"
fi
((SECONDS < deadline - 20)) && tests backend "$b/bin/zplan_cuda_backend_test"
for plan in llama2-7b-tp1 llama2-7b-fold; do
  [[ -f $plans/$plan.zplan ]] && ((SECONDS < deadline - 30)) || continue
  ZRT_CUDA_REPORT=1 ZRT_CUDA_GRAPH=1 timeout "$(left)" "$b/bin/zrun" "$plans/$plan.zplan" \
    --backend cuda --init random --random-inputs --warmup 3 --repeat 10 > "$out/$plan.log" 2>&1
  note "$plan graph rc $? $(grep -o 'median [0-9.]* ms' "$out/$plan.log" | tail -1)"
done
cat "$out/summary.txt"
