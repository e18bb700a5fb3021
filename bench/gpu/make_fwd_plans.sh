#!/usr/bin/env bash
# Compiles, here (the GPU machine has no MLIR), the one-GPU plans of bench/gpu/fwd_call.sh into OUTDIR:
#   bench/gpu/make_fwd_plans.sh ZPLAN OUTDIR
# Benchmark plans (bf16, seq 1024, --target cuda, --graph-only: zrun runs them with --init random): gpt2-350m
# and llama-1b at batch 8, llama-1b with --offload-param cpu (its --report beside it: the bytes moved a step,
# for the PCIe floor), llama2-7b at batch 4. Correctness plans: the test models (tests/models, batch 2, seq 16)
# in fp32 and bf16 at tp 1, for tests/cuda/check_models.sh. OUTDIR must sit at the tree's root (plans refer
# to the test models' weights relative to themselves).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/plan_compile.sh"
plans_init "$1" "$2"
for model in gpt2-350m llama-1b; do
  c $model-tp1.zplan "$bm/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 1 --graph-only
done
c llama-1b-offload.zplan "$bm/llama-1b/model.onnx" --batch 8 --seq 1024 --dtype bf16 --offload-param cpu --graph-only \
  --report > "$out/llama-1b-offload.report.txt"
c llama2-7b-tp1.zplan "$bm/llama2-7b/model.onnx" --batch 4 --seq 1024 --dtype bf16 --tp 1 --graph-only
test_model_plans
plans_done make_fwd_plans
