#!/usr/bin/env bash
# One device call for the decode program's few-row products (docs/generation.md, session 6): builds zrun and
# the generation kernels test (compiler off), runs the few-row kernel tests (the fused products against the
# CPU reference, the plan's kernel choice, the timing tables), then zrun on llama-1b generation plans compiled
# here by `tests/cuda/make_generate_plans.sh OUTDIR --fused` into .gpu-gen (carried): at each batch the plan as main's compiler
# now writes it (the rule's kernel choice, no fusion on the cuda target) and, where the batch has few rows,
# the same plan with --decode-fusion on (file suffix -fused), with identical prompts and random weights; each
# fused run's tokens are compared with the unfused run's (session 6 also ran batch 1 with ZK_SKINNY=0, cuBLASLt
# for every unfused product; the switch is gone since session 9: a plan compiled with --few-rows-max-rows 0 is
# that comparison). Every step is cut by the call budget (ZPLAN_CALL_BUDGET_S, default 230 s).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
budget=${ZPLAN_CALL_BUDGET_S:-230}
left() { [[ $SECONDS -lt $1 ]]; }
step_width=18
logs_to /tmp/zplan-d2 d2-logs.tgz summary.txt
cd "$top"
gpu_env
gpu_build zrun zplan_cuda_generate_kernels_test
python3 - "$out" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for b in (1, 8, 64):
    np.save(f"{sys.argv[1]}/prompt-b{b}.npy", rng.integers(3, 32000, size=(b, 512), dtype=np.int64))
PY
run_zrun() {  # run_zrun NAME BATCH PLAN [ENV...]
  local name=$1 bs=$2 plan=$3
  shift 3
  [[ -f $plan ]] || { echo "$name: $plan missing"; return; }
  left $((budget - 25)) || { echo "$name: skipped (call budget)"; return; }
  step "$name" env ZRT_CUDA_REPORT=1 "$@" timeout 60 "$b/bin/zrun" "$plan" --backend cuda --init random --generate \
    --warmup 1 --prompt "$out/prompt-b$bs.npy" --max-new-tokens 256 --tokens-out "$out/tokens-$name.npy"
  echo "$name: $(grep -E 'tokens/s' "$out/$name.log" | tail -1) $(grep -ciE 'error|fail' "$out/$name.log") error lines"
}
same() {  # same A B: the new tokens of two runs compared
  python3 -c "
import numpy as np, sys
a, b = np.load('$out/tokens-$1.npy'), np.load('$out/tokens-$2.npy')
print('$2 tokens equal to $1:', bool((a == b).all()), '(differing new tokens: %d of %d)' % (int((a != b).sum()), a.size - a.shape[0] * 512))
" 2>&1 | tail -1
}
run_zrun b1 1 .gpu-gen/llama-1b-b1.zplan
run_zrun b1-fused 1 .gpu-gen/llama-1b-b1-fused.zplan
same b1 b1-fused
run_zrun b8 8 .gpu-gen/llama-1b-b8.zplan
run_zrun b8-fused 8 .gpu-gen/llama-1b-b8-fused.zplan
same b8 b8-fused
if left $((budget - 40)); then
  step kernels_test timeout $((budget - SECONDS - 30)) "$b/bin/zplan_cuda_generate_kernels_test" \
    --gtest_filter='CudaSkinny*'
  grep -E "^\[  (PASSED|FAILED) |Failure|^\[  FAILED|few-row|^skinny|^fused" "$out/kernels_test.log" | head -60
fi
run_zrun b64 64 .gpu-gen/llama-1b-b64.zplan
run_zrun b1-fused-again 1 .gpu-gen/llama-1b-b1-fused.zplan
same b1-fused b1-fused-again
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
