#!/usr/bin/env bash
# bench/gpu/attention_call.sh - one call on a one-GPU machine for the forward attention kernels
# (docs/gpu-plan-runs.md, "Attention forward kernels"): builds the kernel tests, the attention timing tool and
# zrun (compiler off; FlatBuffers and GoogleTest from ./.gpu-deps, scripts/gpu-deps.sh), runs PyTorch's SDPA
# peers (bench/gpu/sdpa_bench.py, flash and cuDNN) while it builds, then
#   1. the attention kernels against the CPU reference, each group in a process of its own so that a fault in
#      one cannot hide the others: the warp-specialised wgmma kernels (CudaAttentionWgmma.WarpSpecialised*),
#      the register kernels (CudaAttention.*), the other wgmma kernels (the rest of CudaAttentionWgmma.*);
#   2. zplan_cuda_attention_bench over ATTN_FA_PATHS and ATTN_WG_PATHS (the wgmma ones in their own process);
#   3. if PLANS (a folder at the repository root, compiled elsewhere: bench/gpu/make_attention_plans.sh) is
#      given: tests/cuda/check_models.sh on the test models' plans in it (<model>-fp32.zplan, <model>-bf16.zplan),
#      then zrun (CUDA graph replay, median of 10 after 3 warm-ups) of every *-tp1-*.zplan in it (the benchmark
#      models, one plan per attention kernel: the plan names the kernel, ZK_CUDA_ATTENTION does not reach zrun),
#      while the deadline allows; then torch.compile's forwards (bench/gpu/torch_baseline.py) if time remains.
# Run from the tree's root:  bash bench/gpu/attention_call.sh [PLANS]
# Environment: ATTN_DEADLINE_S (seconds from the start after which optional steps are skipped; default 380),
# ATTN_FA_PATHS, ATTN_WG_PATHS (the kernels zplan_cuda_attention_bench times, by ZK_CUDA_ATTENTION name).
# Logs go to /tmp/attn-call, and as attn-logs.tgz and summary.txt to $OUT; the summary prints last.
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
plans=${1:-}
[[ -n $plans ]] && plans=$(cd "$plans" && pwd)
out=/tmp/attn-call
mkdir -p "$out"
# The device tool returns a few files only: the logs travel as one archive, the summary beside it.
trap '[[ -n ${OUT:-} ]] && { tar czf "$OUT/attn-logs.tgz" -C "$out" .; cp -f "$out/summary.txt" "$OUT/"; }' EXIT
deadline=${ATTN_DEADLINE_S:-380}
fa_paths=${ATTN_FA_PATHS:-default old fa4x1 fa4x1r}
wg_paths=${ATTN_WG_PATHS:-wg2 wg3}
b=$top/build-gpu
sum=$out/summary.txt
log() { echo "[+${SECONDS}s] $*" | tee -a "$sum"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$sum"

cmake -S "$top" -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" \
  > "$out/build.log" 2>&1 || { log "configure failed"; tail -30 "$out/build.log"; exit 1; }
(ninja -C "$b" -j"$(nproc)" zplan_cuda_kernels_test zplan_cuda_attention_bench >> "$out/build.log" 2>&1
 echo $? > /tmp/attn-build.rc) &
bpid=$!
log "building; SDPA peers meanwhile"
timeout 120 python3 "$top/bench/gpu/sdpa_bench.py" > "$out/sdpa.log" 2>&1
log "sdpa rc $?"
wait $bpid
rc=$(cat /tmp/attn-build.rc)
log "kernel build rc $rc"
if [[ $rc != 0 ]]; then grep -B2 -A12 -E "error|FAILED" "$out/build.log" | head -60; cat "$sum"; exit 1; fi
[[ -n $plans ]] && { nice -n 10 ninja -C "$b" -j"$(nproc)" zrun > "$out/build-zrun.log" 2>&1; echo $? > /tmp/attn-zrun.rc; } &
zpid=$!

kt=$b/bin/zplan_cuda_kernels_test
run_tests() {  # NAME LIMIT FILTER
  timeout "$2" "$kt" --gtest_filter="$3" > "$out/tests-$1.log" 2>&1
  local r=$?
  log "tests $1 ($3) rc $r: $(grep -E '^\[  (PASSED|FAILED)' "$out/tests-$1.log" | tr '\n' ' ')"
  grep -m 12 -E "Failure|path '|Which is|error" "$out/tests-$1.log" >> "$sum"
  return $r
}
run_tests ws 100 'CudaAttentionWgmma.WarpSpecialised*'
ws_rc=$?
# A kernel that hangs would hang its bench too: time only the others then.
[[ $ws_rc == 124 || $ws_rc == 137 ]] && wg_paths=$(tr ' ' '\n' <<< "$wg_paths" | grep -v '^wg3' | tr '\n' ' ')
run_tests fa 150 'CudaAttention.*'
fa_rc=$?
run_tests wg 120 'CudaAttentionWgmma.*-CudaAttentionWgmma.WarpSpecialised*'

timeout 60 "$b/bin/zplan_cuda_attention_bench" $fa_paths > "$out/bench.log" 2>&1
log "bench rc $?"
timeout 90 "$b/bin/zplan_cuda_attention_bench" $wg_paths > "$out/bench-wg.log" 2>&1
log "bench wg rc $?"
{ echo "--- attention bench (zk)"; cat "$out/bench.log" "$out/bench-wg.log"; echo "--- SDPA peers"; cat "$out/sdpa.log"; } >> "$sum"

if [[ -n $plans ]]; then
  wait $zpid
  log "zrun build rc $(cat /tmp/attn-zrun.rc)"
  z=$b/bin/zrun
  timeout 120 bash "$top/tests/cuda/check_models.sh" "$z" "$plans" > "$out/models.log" 2>&1
  log "check_models.sh rc $?"
  cat "$out/models.log" >> "$sum"
  for plan in "$plans"/*-tp1-*.zplan; do
    [[ -f $plan ]] || continue
    name=$(basename "$plan" .zplan)
    if ((SECONDS > deadline)); then log "skip $name (deadline)"; continue; fi
    echo "=== $name" >> "$out/zrun.log"
    ZRT_CUDA_GRAPH=1 timeout 90 "$z" "$plan" --backend cuda --init random --random-inputs --warmup 3 --repeat 10 \
      >> "$out/zrun.log" 2>&1 || echo "zrun failed" >> "$out/zrun.log"
    log "zrun $name: $(grep -o 'median [0-9.]* ms' "$out/zrun.log" | tail -1)"
  done
fi
if [[ -n $plans ]] && ((SECONDS < deadline - 60)); then
  timeout $((deadline - SECONDS)) python3 "$top/bench/gpu/torch_baseline.py" --models gpt2-350m llama-1b --modes compile \
    > "$out/torch.log" 2>&1
  log "torch.compile peers rc $?"
  grep -E '^\{' "$out/torch.log" >> "$sum"
fi
echo "=== summary"
cat "$sum"
