#!/usr/bin/env bash
# One device call for issue 12 (the plan is what runs on the GPUs), on nvidia-h200-x2 (one-GPU figures on
# GPU 0): build (compiler off) -> backend and NCCL tests -> the test models at tp 1, tp 2 and ZeRO-3 against
# PyTorch's outputs -> the NCCL probe (bytes and rate of one communicator per configuration) -> the planned
# vs measured process peak of every benchmark plan, with its median time (tests/cuda/plan_memory.sh) ->
# the NCCL fault path (kill, stall) -> [--torch] the PyTorch peers in the same call.
#   bash tests/cuda/gpu_issue12.sh [--torch] [--no-probe] [--no-fault]
# Plans come from .gpu-plans (bench/gpu/make_plans.sh, run on the compiling machine); FlatBuffers, CLI11
# and GoogleTest from .gpu-deps (scripts/gpu-deps.sh). Logs go to $OUT/gpu-logs.tgz; a summary is printed last.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
torch=0 probe=1 fault=1 sweep=1 big=0 budget=${ZPLAN_CALL_BUDGET_S:-560}
for a in "$@"; do
  case $a in
    --torch) torch=1 ;; --no-probe) probe=0 ;; --no-fault) fault=0 ;; --no-sweep) sweep=0 ;; --big) big=1 ;;
  esac
done
left() { [[ $SECONDS -lt $1 ]]; }  # left SECONDS: is the call still under that many seconds?
logs_to /tmp/zplan-gpu gpu-logs.tgz
cd "$top"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
gpu_env
gpu_build zplan_cuda_backend_test zplan_cuda_nccl_test zplan_nccl_probe zrun
step backend env CUDA_VISIBLE_DEVICES=0 "$b/bin/zplan_cuda_backend_test"
grep -E "^\[  (PASSED|FAILED) |Failure" "$out/backend.log" | head -20
step nccl mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0 "$b/bin/zplan_cuda_nccl_test"
grep -E "^\[  (PASSED|FAILED) |Failure" "$out/nccl.log" | head -20
step models tests/cuda/check_models.sh "$b/bin/zrun" .gpu-plans
cat "$out/models.log"
if [[ $probe == 1 ]]; then
  : > "$out/probe.jsonl"
  for cfg in "0 -" "0 0" "8 0" "16 0" "24 0" "32 0" "16 1"; do
    read -r ctas rc <<< "$cfg"
    env=(-x NCCL_NVLS_ENABLE=0)
    [[ $rc != - ]] && env+=(-x NCCL_RUNTIME_CONNECT=$rc)
    [[ $rc != - ]] && export NCCL_RUNTIME_CONNECT=$rc || unset NCCL_RUNTIME_CONNECT
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "${env[@]}" "$b/bin/zplan_nccl_probe" "$ctas" \
      >> "$out/probe.jsonl" 2>> "$out/probe.err"
  done
  unset NCCL_RUNTIME_CONNECT
  grep '"rank": 0' "$out/probe.jsonl"
fi
step memory tests/cuda/plan_memory.sh "$b/bin/zrun" .gpu-plans/manifest.txt "$out/mem"
grep -E '^\{|FAIL|skip' "$out/memory.log"
# Where the time goes on 2 GPUs (events around every step, per stream; no graph).
ZRT_CUDA_PROFILE=1 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0 -x ZRT_CUDA_PROFILE \
  "$b/bin/zrun" .gpu-plans/llama-1b-tp2.zplan --backend cuda --init random --random-inputs --repeat 5 > "$out/profile-llama-tp2.log" 2>&1
grep "profile over" "$out/profile-llama-tp2.log"
# The channel count against speed, llama-1b tp 2 (median of 10, graph replay).
[[ $sweep == 1 ]] && for ctas in 8 32; do
  ZRT_NCCL_CTAS=$ctas timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0 -x ZRT_NCCL_CTAS \
    "$b/bin/zrun" .gpu-plans/llama-1b-tp2.zplan --backend cuda --init random --random-inputs --warmup 3 --repeat 10 \
    --cuda-graph > "$out/ctas$ctas.log" 2>&1
  echo "ZRT_NCCL_CTAS=$ctas: $(grep -o 'median [0-9.]* ms); planned process peak [0-9]* B; measured process peak [0-9]* B' "$out/ctas$ctas.log" | head -2 | tr '\n' ' ')"
done
if [[ $fault == 1 ]]; then
  for mode in kill stall; do
    ZRT_NCCL_TIMEOUT_S=15 step fault-$mode tests/cuda/nccl_fault.sh "$b/bin/zrun" .gpu-plans/fault.zplan $mode "$out/fault"
    tail -3 "$out/fault-$mode.log"
  done
fi
if [[ $torch == 1 ]] && left $((budget - 150)); then
  step torch env CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu/torch_baseline.py \
    --models gpt2-350m llama-1b --json "$out/torch.json"
  grep '^{' "$out/torch.log"
fi
if [[ $torch == 1 ]] && left $((budget - 150)); then
  step torch2 env PYTHONUNBUFFERED=1 timeout $((budget - SECONDS - 20)) torchrun --nproc-per-node 2 \
    bench/gpu/torch_baseline.py --tp-peers --json "$out/torch2.json"
  grep '^{' "$out/torch2.log"
fi
# llama2-7b at batch 4 on GPU 0, zplan then the PyTorch peers, if the call has the time left.
if [[ $big == 1 ]] && left $((budget - 120)); then
  step mem7b timeout $((budget - SECONDS - 60)) tests/cuda/plan_memory.sh "$b/bin/zrun" .gpu-plans/manifest-7b.txt "$out/mem"
  grep -E '^\{|FAIL' "$out/mem7b.log"
fi
if [[ $big == 1 && $torch == 1 ]] && left $((budget - 60)); then
  step torch7b env CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 timeout $((budget - SECONDS - 10)) python3 \
    bench/gpu/torch_baseline.py --models llama2-7b --batch 4 --json "$out/torch7b.json"
  grep '^{' "$out/torch7b.log"
fi
printf '%s\n' "${summary[@]}"
