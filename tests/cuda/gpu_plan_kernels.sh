#!/usr/bin/env bash
# One device call (nvidia-h200) that checks what the plan decides about kernels (docs/gpu-plan-runs.md,
# "The plan names the kernels"):
#   bash tests/cuda/gpu_plan_kernels.sh
# - build (compiler off) -> zplan_cuda_rotary_test (the rotary's sequence-major form against the CPU kernel)
#   -> the attention kernel tests (the plan's kernel codes through the plan's overload, forward and backward,
#   against the CPU reference; the sequence-major and packed operands; the wgmma kernel's lse)
# - the test models against PyTorch with the rotary fold on (.gpu-plans-rot, from bench/gpu/make_plans.sh
#   ZPLAN .gpu-plans-rot --fold-rotary on; tests/cuda/check_models.sh)
# - llama2-7b at batch 4 folded (.gpu-plans-rot) and not (.gpu-plans-unf, --fold-rotary off), the same
#   call: planned vs measured peak and the median of 10 graph replays (tests/cuda/plan_memory.sh)
# - the wgmma forward's lse end to end: llama-1b training steps (.gpu-lse: bf16, batch 2, seq 1024) with the
#   default kernels (wg2 forward, mma backward reading its lse) against the same plan with
#   --attention-kernel rows (the exact forward and its lse), the same random weights and tokens: losses and
#   gradient norms must agree within bf16's 2e-2.
# - last, the one-GPU training plans against PyTorch's losses (.gpu-train, tests/cuda/make_train_plans.sh;
#   tests/cuda/train_gpu.sh, the *-z0-w1 plans)
# FlatBuffers, CLI11 and GoogleTest from .gpu-deps (scripts/gpu-deps.sh). Logs travel back as
# $OUT/plan-kernels-logs.tgz; the summary is printed last.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
logs_to /tmp/zplan-plan-kernels plan-kernels-logs.tgz
cd "$top" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpu_env
gpu_build zrun zplan_cuda_rotary_test zplan_cuda_kernels_test zplan_cuda_train_kernels_test
gtest() {
  step "$1" env CUDA_VISIBLE_DEVICES=0 timeout 150 "$2" "${@:3}"
  grep -E "^\[  (PASSED|FAILED) |Failure|Which is|Actual" "$out/$1.log" | head -12
}
gtest rotary "$b/bin/zplan_cuda_rotary_test"
gtest attention "$b/bin/zplan_cuda_kernels_test" \
  --gtest_filter='CudaAttention.PlanKernelCodes:CudaAttention.SequenceMajorOperands:CudaAttention.FullyMaskedRowIsZero'
gtest attention_train "$b/bin/zplan_cuda_train_kernels_test" \
  --gtest_filter='CudaTrain.AttentionGradPlanKernelCodes:CudaTrain.AttentionLseAndFlashBackward'
step models tests/cuda/check_models.sh "$b/bin/zrun" .gpu-plans-rot
cat "$out/models.log"
for v in unf rot; do
  step mem7b-$v timeout 150 tests/cuda/plan_memory.sh "$b/bin/zrun" .gpu-plans-$v/manifest-7b.txt "$out/mem-$v"
  grep -E '^\{|FAIL' "$out/mem7b-$v.log"
  grep -hE "compute steps|graph of" "$out/mem-$v"/*.log | head -2
done
python3 -c "import numpy as np; np.save('$out/tokens.npy', np.random.default_rng(1).integers(0, 32000, (8, 1024), dtype=np.int64))"
for k in default rows; do
  step lse-$k env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zrun" .gpu-lse/llama-1b-$k.zplan --backend cuda \
    --init random --train --data "$out/tokens.npy" --steps 4 --losses-out "$out/l-$k.npy" \
    --grad-norms-out "$out/n-$k.npy" --timeout 100
  grep -E "step [0-9]+ loss|error" "$out/lse-$k.log" | head -4
done
python3 - "$out" <<'PY'
import sys, numpy as np
o = sys.argv[1]
for f, what in (("l", "loss"), ("n", "grad norm")):
    a, b = np.load(f"{o}/{f}-default.npy"), np.load(f"{o}/{f}-rows.npy")
    rel = float(np.max(np.abs(a - b) / np.abs(b)))
    print(f"lse end to end, {what}: wg2 {np.array2string(a, precision=5)} rows {np.array2string(b, precision=5)} "
          f"max rel {rel:.2e} {'ok' if np.isfinite(a).all() and rel <= 2e-2 else 'FAIL'}")
PY
# Last: the longest step, bounded so that the summary still comes back.
step train timeout 110 env ZPLAN_TRAIN_ONLY='*-z0-w1' tests/cuda/train_gpu.sh
grep -E "ok|FAIL|rc=" "$out/train.log" | grep -v "^build" | head -20
printf '%s\n' "${summary[@]}"
