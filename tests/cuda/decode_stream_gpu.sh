#!/usr/bin/env bash
# One device call for the streaming few-row kernel (docs/generation.md, session 7), on nvidia-h200:
#   build zrun and the generation kernels test (compiler off) -> the device copy rate (a 1 GiB device copy,
#   read + write) -> the generation kernels test with the streaming kernel on (ZK_SKINNY_STREAM=1: the few-row
#   and fused products against the CPU reference, the chained launches, the timing tables and the four-layer
#   chain) -> zrun on llama-1b plans compiled here by `tests/cuda/make_generate_plans.sh OUTDIR --stream`
#   (carried as .gpu-gen), every run with the same random weights and prompt (512 tokens, 256 new):
#     b1-main   main's plan before session 7 (llama-1b-b1-main / -b8-main: compiled by main's zplan at c33a88e)
#     b1        the default plan (q/k/v one few-row launch; session 7's steps are not in default cuda plans)
#     b1-all    every decode product of one row on the few-row kernel, gate/up + SiLU one launch
#               (--decode-fusion on --few-rows-max-bytes 1 GiB: the LM head too)
#     b1-mid    the same without the LM head (--few-rows-max-bytes 64 MiB)
#     b1-gated  --decode-fusion on alone (gate/up + SiLU one launch; o, down, LM head cuBLASLt)
#   (b1-all, b1-mid and b1-gated, with --decode-fusion on, have one rope_kv_write a layer and the residual_norm
#   before each few-row product in it: norm_products, which always runs the streaming kernel)
#   with ZK_SKINNY_STREAM=1 (the streaming kernel) or 0 (the earlier kernels) as each line says; then b8 and
#   b64. The new tokens of each run are compared with b1-main's (b8's with b8-main's). Not yet run: session 7
#   found no device time left under the budget guard. Every step is cut by the
#   call budget (ZPLAN_CALL_BUDGET_S, default 280 s). The floor at batch 1 is generate_bench.sh's rule.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
budget=${ZPLAN_CALL_BUDGET_S:-280}
left() { [[ $SECONDS -lt $1 ]]; }
step_width=22
logs_to /tmp/zplan-d3 d3-logs.tgz summary.txt
cd "$top"
gpu_env
gpu_build zrun zplan_cuda_generate_kernels_test
python3 - "$out" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for b in (1, 8, 64):
    np.save(f"{sys.argv[1]}/prompt-b{b}.npy", rng.integers(3, 32000, size=(b, 512), dtype=np.int64))
PY
# The copy rate and the batch-1 floor (the model's byte counts from bench/gpu/torch_baseline.py's configuration, as generate_bench.sh).
step floor python3 - "$out/floor.txt" <<'PY'
import json, sys, torch
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); c = torch.empty_like(a)
for _ in range(3):
    c.copy_(a)
torch.cuda.synchronize()
ts = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); c.copy_(a); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
ts.sort()
rate = 2 * n / ts[len(ts) // 2]
sys.path.insert(0, "bench/gpu")
from torch_baseline import CONFIGS
kind, cfg = CONFIGS["llama-1b"]
L, d, h = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
kv, f, V = cfg.get("num_key_value_heads", h), cfg["intermediate_size"], cfg["vocab_size"]
hd = d // h
per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f + 2 * d
wbytes = 2 * (L * per_layer + d + V * d)
kv_bytes = 2 * L * kv * hd * 2 * (512 + 128)
floor_ms = (wbytes + kv_bytes) / rate * 1e3
line = f"copy rate {rate / 1e9:.0f} GB/s; batch-1 bytes a step {wbytes + kv_bytes}; floor {floor_ms:.4f} ms"
print(line)
open(sys.argv[1], "w").write(f"{floor_ms}\n")
PY
cat "$out/floor.log"
floor_ms=$(cat "$out/floor.txt" 2>/dev/null || echo 0)
if left $((budget - 150)); then
  step kernels_test env ZK_SKINNY_STREAM=1 timeout 100 "$b/bin/zplan_cuda_generate_kernels_test"
  grep -E "^\[  (PASSED|FAILED) |Failure|^\[  FAILED|few-row|^skinny|^fused|layer chain|decode attention|rope_kv_write|norm_products" \
    "$out/kernels_test.log" | head -70
fi
run_zrun() {  # run_zrun NAME BATCH PLAN [ENV...]
  local name=$1 bs=$2 plan=$3
  shift 3
  [[ -f $plan ]] || { echo "$name: $plan missing"; return; }
  left $((budget - 20)) || { echo "$name: skipped (call budget)"; return; }
  step "$name" env ZRT_CUDA_REPORT=1 "$@" timeout 45 "$b/bin/zrun" "$plan" --backend cuda --init random --generate \
    --warmup 1 --prompt "$out/prompt-b$bs.npy" --max-new-tokens 256 --tokens-out "$out/tokens-$name.npy"
  local tps
  tps=$(grep -oE 'decode [0-9.]+ tokens/s' "$out/$name.log" | tail -1 | grep -oE '[0-9.]+' | head -1)
  echo "$name: $(grep -E 'tokens/s' "$out/$name.log" | tail -1); $(grep -ciE 'error|fail' "$out/$name.log") error lines"
  [[ $bs == 1 && -n $tps ]] && python3 -c "
s = 1e3 / $tps
print('$name: step %.4f ms, floor / step %.3f' % (s, $floor_ms / s))"
}
same() {  # same A B: the new tokens of two runs compared
  python3 -c "
import numpy as np
a, b = np.load('$out/tokens-$1.npy'), np.load('$out/tokens-$2.npy')
print('$2 tokens equal to $1:', bool((a == b).all()), '(differing new tokens: %d of %d)' % (int((a != b).sum()), a.size - a.shape[0] * 512))
" 2>&1 | tail -1
}
# b1-main is main's plan before this session's compiler changes (compiled by the zplan of main at c33a88e),
# run with the earlier kernels: main as it stood.
run_zrun b1-main 1 .gpu-gen/llama-1b-b1-main.zplan ZK_SKINNY_STREAM=0
run_zrun b1 1 .gpu-gen/llama-1b-b1.zplan ZK_SKINNY_STREAM=1
same b1-main b1
run_zrun b1-all 1 .gpu-gen/llama-1b-b1-all.zplan ZK_SKINNY_STREAM=1
same b1-main b1-all
run_zrun b1-gated 1 .gpu-gen/llama-1b-b1-gated.zplan ZK_SKINNY_STREAM=1
same b1-main b1-gated
run_zrun b1-mid 1 .gpu-gen/llama-1b-b1-mid.zplan ZK_SKINNY_STREAM=1
same b1-main b1-mid
run_zrun b1-all-old 1 .gpu-gen/llama-1b-b1-all.zplan ZK_SKINNY_STREAM=0
same b1-main b1-all-old
run_zrun b8-main 8 .gpu-gen/llama-1b-b8-main.zplan ZK_SKINNY_STREAM=0
run_zrun b8 8 .gpu-gen/llama-1b-b8.zplan ZK_SKINNY_STREAM=1
same b8-main b8
run_zrun b1-all-again 1 .gpu-gen/llama-1b-b1-all.zplan ZK_SKINNY_STREAM=1
same b1-all b1-all-again
run_zrun b1-s0 1 .gpu-gen/llama-1b-b1.zplan ZK_SKINNY_STREAM=0
same b1-main b1-s0
run_zrun b64 64 .gpu-gen/llama-1b-b64.zplan ZK_SKINNY_STREAM=1
grep -h "graph\|nodes" "$out"/b1*.log 2>/dev/null | sort | uniq -c | head -10
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
