#!/usr/bin/env bash
# bench/gpu/attention_call.sh - one call on a one-GPU machine for the forward attention kernels
# (docs/gpu-plan-runs.md, "Attention forward kernels"): builds the kernel tests, the attention timing tool and
# zrun (compiler off; FlatBuffers and GoogleTest from ./.gpu-deps, scripts/gpu-deps.sh), runs PyTorch's SDPA
# peers (bench/gpu/sdpa_bench.py, flash and cuDNN) while it builds, then
#   1. every attention kernel against the CPU reference (CudaAttention.*, then the wgmma kernel's
#      CudaAttentionWgmma.* in a process of its own, so that a fault there cannot hide the others);
#   2. zplan_cuda_attention_bench over every kernel (the wgmma ones in their own process);
#   3. if PLANS (a folder of gpt2-350m-tp1.zplan and llama-1b-tp1.zplan, compiled elsewhere) is given: zrun,
#      CUDA graph replay, median of 10 after 3 warm-ups, under the old kernel and the fastest new one that
#      passed its tests (on gpt2-350m's shape); then, while time remains, torch.compile's forwards of the two
#      models (bench/gpu/torch_baseline.py --modes compile).
# Run from the tree's root:  bash bench/gpu/attention_call.sh [PLANS]
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

timeout 200 "$b/bin/zplan_cuda_kernels_test" --gtest_filter='CudaAttention.*' > "$out/tests.log" 2>&1
fa_rc=$?
log "CudaAttention.* rc $fa_rc: $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.log" | tr '\n' ' ')"
timeout 90 "$b/bin/zplan_cuda_kernels_test" --gtest_filter='CudaAttentionWgmma.*' --gtest_also_run_disabled_tests \
  > "$out/tests-wg.log" 2>&1
wg_rc=$?
log "CudaAttentionWgmma.* rc $wg_rc: $(grep -E '^\[  (PASSED|FAILED)' "$out/tests-wg.log" | tr '\n' ' ')"
grep -m 20 -E "Failure|path '|Which is|error" "$out/tests.log" "$out/tests-wg.log" | head -40 >> "$sum"

timeout 120 "$b/bin/zplan_cuda_attention_bench" default old mma64 mma128 fa4x1 fa4x1r fa4x2 fa8x1 fa8x1r fa4x2s > "$out/bench.log" 2>&1
log "bench rc $?"
timeout 60 "$b/bin/zplan_cuda_attention_bench" wg1 wg2 wgp > "$out/bench-wg.log" 2>&1
log "bench wg rc $?"
{ echo "--- attention bench (zk)"; cat "$out/bench.log" "$out/bench-wg.log"; echo "--- SDPA peers"; cat "$out/sdpa.log"; } >> "$sum"

if [[ -n $plans ]]; then
  cands=()
  [[ $fa_rc == 0 ]] && cands+=(fa4x1 fa4x1r fa4x2 fa8x1 fa8x1r fa4x2s)
  [[ $wg_rc == 0 ]] && cands+=(wg1 wg2 wgp)
  best=$(cat "$out/bench.log" "$out/bench-wg.log" | awk -v c=" ${cands[*]} " '$1 == "gpt2-350m" && $2 != "head-major" &&
         index(c, " " $2 " ") && ($4 + 0) > bt { bt = $4 + 0; b = $2 } END { print b }')
  log "fastest new kernel on gpt2-350m's shape: ${best:-none}"
  wait $zpid
  log "zrun build rc $(cat /tmp/attn-zrun.rc)"
  z=$b/bin/zrun
  for model in gpt2-350m llama-1b; do
    for path in old $best; do
      if ((SECONDS > deadline)); then log "skip $model $path (deadline)"; continue; fi
      echo "=== $model ZK_CUDA_ATTENTION=$path" >> "$out/zrun.log"
      ZK_CUDA_ATTENTION=$path ZRT_CUDA_GRAPH=1 timeout 90 "$z" "$plans/$model-tp1.zplan" --backend cuda --init random \
        --random-inputs --warmup 3 --repeat 10 >> "$out/zrun.log" 2>&1 || echo "zrun failed" >> "$out/zrun.log"
      log "zrun $model $path: $(grep -o 'median [0-9.]* ms' "$out/zrun.log" | tail -1)"
    done
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
