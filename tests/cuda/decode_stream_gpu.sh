#!/usr/bin/env bash
# One device call for the decode products at one row (docs/generation.md, session 9), on nvidia-h200:
#   build zrun and the generation kernels test (compiler off)
#   -> the kernel tests of the few-row products (CudaSkinny*: the cluster kernels and the streaming kernel in
#      every launch shape against the CPU reference; the timing tables: each product through cuBLASLt, the
#      cluster kernels and the streaming kernel in its launch shape and in session 7's, the shape sweep, the
#      four-layer chain) and rope_kv_write's
#   -> zrun on llama-1b plans compiled here by `tests/cuda/make_generate_plans.sh OUTDIR --stream` (carried
#      as .gpu-gen), every run with the same random weights and prompt (512 tokens, 256 new):
#        b1-main / b8-main  main's defaults before session 9 (no norm_products, gate/up unfused, cluster kernels)
#        b1 / b8            the defaults (--decode-fusion auto, the streaming kernel by the plan's code)
#        b1-cluster         the defaults with --few-rows-kernel cluster (the same steps, the earlier kernels)
#        b1-od              the defaults with --few-rows-max-bytes 64 MiB (o and down on the streaming kernel)
#      the new tokens of each run compared with b1-main's (b8's with b8-main's)
#   -> greedy tokens against Hugging Face's (tests/models/llama, fp32): the default plan at batch 1 (the fused
#      steps and the streaming kernel; the first prompt of input_ids.npy) and at batch 2 (.gpu-gen/check,
#      `tests/cuda/make_generate_plans.sh OUTDIR --stream` writes them too; OUTDIR must be the carried
#      .gpu-gen of this tree: the plans find the test model's weights relative to themselves).
# Every step is cut by the call budget (ZPLAN_CALL_BUDGET_S, default 190 s). Logs travel back as
# $OUT/d9-logs.tgz, the summary as $OUT/summary.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
budget=${ZPLAN_CALL_BUDGET_S:-190}
left() { [[ $SECONDS -lt $1 ]]; }
step_width=22
logs_to /tmp/zplan-d9 d9-logs.tgz summary.txt
cd "$top"
models=${ZPLAN_MODELS:-tests/models}
gpu_env
gpu_build zrun zplan_cuda_generate_kernels_test
python3 - "$out" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for b in (1, 8):
    np.save(f"{sys.argv[1]}/prompt-b{b}.npy", rng.integers(3, 32000, size=(b, 512), dtype=np.int64))
PY
# The kernel tests first: session 9's call (budget 188 s) skipped them behind a 118 s build at a 75 s guard.
if left $((budget - 45)); then
  step kernels_test timeout $((budget - SECONDS - 30 < 60 ? budget - SECONDS - 30 : 60)) "$b/bin/zplan_cuda_generate_kernels_test" --gtest_filter='CudaSkinny*:CudaRopeKvWrite*'
  grep -E "^\[  (PASSED|FAILED) |Failure|^\[  FAILED|few-row|streaming|^skinny|^fused|layer chain|rope_kv_write|norm_products|stream shape" \
    "$out/kernels_test.log" | head -150
fi
run_zrun() {  # run_zrun NAME BATCH PLAN
  local name=$1 bs=$2 plan=$3
  [[ -f $plan ]] || { echo "$name: $plan missing"; return; }
  left $((budget - 12)) || { echo "$name: skipped (call budget)"; return; }
  step "$name" env ZRT_CUDA_REPORT=1 timeout 30 "$b/bin/zrun" "$plan" --backend cuda --init random --generate \
    --warmup 1 --prompt "$out/prompt-b$bs.npy" --max-new-tokens 256 --tokens-out "$out/tokens-$name.npy"
  local tps
  tps=$(grep -oE 'decode [0-9.]+ tokens/s' "$out/$name.log" | tail -1 | grep -oE '[0-9.]+' | head -1)
  echo "$name: $(grep -E 'tokens/s' "$out/$name.log" | tail -1); $(grep -ciE 'error|fail' "$out/$name.log") error lines"
  [[ -n $tps ]] && python3 -c "print('$name: step %.4f ms' % ($bs * 1e3 / $tps))"
}
same() {  # same A B: the new tokens of two runs compared
  [[ -f $out/tokens-$1.npy && -f $out/tokens-$2.npy ]] || return 0
  python3 -c "
import numpy as np
a, b = np.load('$out/tokens-$1.npy'), np.load('$out/tokens-$2.npy')
print('$2 tokens equal to $1:', bool((a == b).all()), '(differing new tokens: %d of %d)' % (int((a != b).sum()), a.size - a.shape[0] * 512))
" 2>&1 | tail -1
}
run_zrun b1-main 1 .gpu-gen/llama-1b-b1-main.zplan
run_zrun b1 1 .gpu-gen/llama-1b-b1.zplan
same b1-main b1
run_zrun b8-main 8 .gpu-gen/llama-1b-b8-main.zplan
run_zrun b8 8 .gpu-gen/llama-1b-b8.zplan
same b8-main b8
run_zrun b1-cluster 1 .gpu-gen/llama-1b-b1-cluster.zplan
same b1 b1-cluster
run_zrun b1-od 1 .gpu-gen/llama-1b-b1-od.zplan
same b1 b1-od
run_zrun b1-again 1 .gpu-gen/llama-1b-b1.zplan
same b1 b1-again
run_zrun b1-main-again 1 .gpu-gen/llama-1b-b1-main.zplan
grep -h "graph\|nodes" "$out"/b1*.log 2>/dev/null | sort | uniq -c | head -10
# Greedy tokens against Hugging Face's (fp32): batch 1 (the first prompt), batch 2.
if left $((budget - 8)) && [[ -f .gpu-gen/check/llama-b1.zplan ]]; then
  python3 -c "
import numpy as np, sys
np.save('$out/llama-prompt-b1.npy', np.load('$models/llama/input_ids.npy')[:1])"
  for bs in 1 2; do
    prompt=$models/llama/input_ids.npy
    [[ $bs == 1 ]] && prompt=$out/llama-prompt-b1.npy
    step "hf-llama-b$bs" timeout 20 "$b/bin/zrun" .gpu-gen/check/llama-b$bs.zplan --backend cuda --generate \
      --prompt "$prompt" --max-new-tokens 24 --tokens-out "$out/hf-llama-b$bs.npy"
    python3 -c "
import numpy as np
got, ref = np.load('$out/hf-llama-b$bs.npy'), np.load('$models/llama/expected_generate.npy')[:$bs]
same = got.shape == ref.shape and bool((got == ref).all())
print('llama fp32 batch $bs: greedy tokens', 'equal to' if same else 'DIFFER from', 'Hugging Face\'s',
      '(%d differ)' % int((got != ref).sum()) if got.shape == ref.shape else got.shape)" 2>&1 | tail -1
  done
fi
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
