#!/usr/bin/env bash
# bench/gpu/memory_call.sh - one GPU call for the memory-bound kernels of the llama forwards (norms, the gated
# product, rotary) and the one-GPU forwards they serve: build (compiler off) while a PyTorch peer runs
# (MEMORY_CALL_PEERS: "elementwise", bench/gpu/elementwise_peers.py, eager and torch.compile of the same ops
# with the copy rate; "torch", bench/gpu/torch_baseline.py's torch.compile of the models in
# MEMORY_CALL_TORCH_MODELS, default llama2-7b at batch 4; "none"), then the kernels' tests against the CPU
# reference (tests/cuda: CudaElementwise, CudaRows, CudaLinear, CudaRotary), the one-GPU forwards of PLANDIR/manifest-one.txt
# under tests/cuda/plan_memory.sh (medians of 10 CUDA-graph replays; once more under MEMORY_CALL_OLD_ENV, the
# environment of a comparison form, where set), `zplan_cuda_kernel_bench --memory` (each kernel's time, rate
# and share of the copy rate) and `--gemm` (the products' algorithms), a ZRT_CUDA_PROFILE breakdown of
# llama2-7b batch 4 (the time of each op kind, graphs off), and the test models' plans against PyTorch's
# outputs (tests/cuda/check_models.sh), each step only while the call's time lasts.
#   bench/gpu/memory_call.sh [PLANDIR]
# PLANDIR (default .gpu-plans) holds the plans of bench/gpu/make_memory_plans.sh, compiled on the compiling
# machine, and manifest-one.txt (plan_memory.sh's manifest: NAME 1 PLAN); FlatBuffers and GoogleTest come from
# .gpu-deps (scripts/gpu-deps.sh). MEMORY_CALL_DEADLINE_S (default 225) is the second after which no further
# step starts. Logs go to $OUT/memory-logs.tgz, with summary.txt, kbench.log, gemm.log and profile.txt beside it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/cuda/lib.sh"
plans=${1:-.gpu-plans}
deadline=${MEMORY_CALL_DEADLINE_S:-225}
peers=${MEMORY_CALL_PEERS:-elementwise}
logs_to /tmp/memory-call memory-logs.tgz summary.txt kbench.log gemm.log peers.log profile.txt
cd "$top"
gpu_env
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  | tee "$out/summary.txt"
# Each note also copies the main logs to $OUT as they stand, so that they come back even if the call is cut
# off before the exit trap packs the rest.
note() {
  echo "[+${SECONDS}s] $*" | tee -a "$out/summary.txt"
  [[ -n ${OUT:-} ]] && for f in summary.txt kbench.log gemm.log peers.log profile.txt; do cp -f "$out/$f" "$OUT/" 2>/dev/null; done
  return 0
}
# left: seconds before the deadline, at least 5 (a step's timeout).
left() { local l=$((deadline - SECONDS)); echo $((l > 5 ? l : 5)); }

# The build runs niced beside the peers (their timings are GPU events; the build only takes host cores).
(
  cmake -S "$top" -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" \
    > "$out/configure.log" 2>&1 &&
    nice -n 10 ninja -C "$b" -j"$(nproc)" zplan_cuda_kernels_test zplan_cuda_rotary_test \
      zplan_cuda_kernel_bench zrun > "$out/build.log" 2>&1
  echo $? > "$out/build.rc"
) &
case $peers in
  elementwise) PYTHONUNBUFFERED=1 timeout 140 python3 bench/gpu/elementwise_peers.py > "$out/peers.log" 2>&1 ;;
  torch)
    read -ra tm <<< "${MEMORY_CALL_TORCH_MODELS:-llama2-7b}"
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu/torch_baseline.py --models "${tm[@]}" --modes compile \
      --batch-of llama2-7b=4 > "$out/peers.log" 2>&1 ;;
  *) true ;;
esac
note "PyTorch peers ($peers) rc $? $(grep -o '"model": "[^"]*"\|"ms": [0-9.]*\|"first_call_s": [0-9.]*' "$out/peers.log" | tr '\n' ' ')"
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
tests kernels "$b/bin/zplan_cuda_kernels_test" --gtest_filter='CudaElementwise.*:CudaRows.*:CudaLinear.*'
tests rotary "$b/bin/zplan_cuda_rotary_test"

# The one-GPU forwards: this code, then (where MEMORY_CALL_OLD_ENV is set) the comparison form in the same
# binary, and this code once more at the end if time is left, so that a drift of the machine shows as a
# difference between the two runs of one form.
forwards() {  # LABEL [VAR=VALUE...]
  local label=$1
  shift
  [[ -f $plans/manifest-one.txt ]] && ((SECONDS < deadline - 30)) || return 0
  env "$@" timeout "$(left)" tests/cuda/plan_memory.sh "$b/bin/zrun" "$plans/manifest-one.txt" "$out/mem-$label" \
    > "$out/forwards-$label.log" 2>&1
  note "forwards $label ($*) rc $? $(grep -o '"plan": "[^"]*"\|"median_ms": [0-9.]*\|"ok": [a-z]*' "$out/forwards-$label.log" | tr '\n' ' ')"
}
read -ra old_env <<< "${MEMORY_CALL_OLD_ENV:-}"
forwards new
((${#old_env[@]})) && forwards old "${old_env[@]}"

((SECONDS < deadline - 25)) && { timeout "$(left)" "$b/bin/zplan_cuda_kernel_bench" --memory > "$out/kbench.log" 2>&1; note "kernel bench rc $?"; }

# llama2-7b batch 4: where its time goes, per op kind (events around every step; no graph).
p7=$plans/llama2-7b-tp1.zplan
if [[ -f $p7 ]] && ((SECONDS < deadline - 35)); then
  ZRT_CUDA_PROFILE=1 ZRT_CUDA_PROFILE_TOP=25 timeout "$(left)" "$b/bin/zrun" "$p7" --backend cuda \
    --init random --random-inputs --repeat 3 > "$out/profile.txt" 2>&1
  note "llama2-7b profile rc $?"
fi
((SECONDS < deadline - 20)) && { timeout "$(left)" "$b/bin/zplan_cuda_kernel_bench" --gemm > "$out/gemm.log" 2>&1; note "gemm bench rc $?"; }
((${#old_env[@]})) && forwards new2
if ((SECONDS < deadline - 15)); then
  timeout "$(left)" tests/cuda/check_models.sh "$b/bin/zrun" "$plans" > "$out/models.log" 2>&1
  note "check_models rc $?"
  grep -E "^(ok|FAIL)" "$out/models.log" | tee -a "$out/summary.txt"
fi
grep -E 'profile' "$out/profile.txt" 2>/dev/null | head -30
grep -E 'best|beta|lin\)' "$out/gemm.log" 2>/dev/null
cat "$out/summary.txt"
