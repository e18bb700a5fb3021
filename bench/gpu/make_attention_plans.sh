#!/usr/bin/env bash
# Compiles, on this machine (the GPU machine has no MLIR), the plans bench/gpu/attention_call.sh runs, into
# OUTDIR (default .gpu-plans at the repository root, where the call's tree carries it):
#   bench/gpu/make_attention_plans.sh ZPLAN [OUTDIR] [KERNEL...]
# The test models (tests/models, batch 2, seq 16, fp32 and bf16: the correctness plans of
# tests/cuda/check_models.sh; their head dim of 16 takes the exact kernel whatever the flags) and, for each
# KERNEL (default: wg2 wg3), gpt2-350m and llama-1b at tp 1 (bf16, batch 8, seq 1024) compiled with
# --attention-kernel KERNEL as <model>-tp1-<KERNEL>.zplan: the plan names its attention kernel, so an A/B
# of kernels in whole forwards is an A/B of plans.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/plan_compile.sh"
plans_init "$1" "${2:-$top/.gpu-plans}"
shift $(( $# >= 2 ? 2 : 1 ))
kernels=("$@")
((${#kernels[@]})) || kernels=(wg2 wg3)
test_model_plans
for k in "${kernels[@]}"; do
  for model in gpt2-350m llama-1b; do
    c $model-tp1-$k.zplan "$bm/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 1 \
      --graph-only --attention-kernel "$k"
  done
done
plans_done make_attention_plans
