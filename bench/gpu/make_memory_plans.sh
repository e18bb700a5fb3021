#!/usr/bin/env bash
# Compiles, here (the GPU machine has no MLIR), the plans of bench/gpu/memory_call.sh into OUTDIR:
#   bench/gpu/make_memory_plans.sh ZPLAN OUTDIR
# The test models (tests/models, batch 2, seq 16, tp 1) in fp32 and bf16 for tests/cuda/check_models.sh, and
# llama2-7b at batch 4 (seq 1024, bf16, --graph-only: zrun runs it with --init random) as compiled by default
# and with --gemm-algos on (the tuning table's cuBLASLt algorithms, plan 2.15), with manifest-7b.txt listing
# the two for tests/cuda/plan_memory.sh. OUTDIR must sit at the tree's root (plans refer to the test models'
# weights relative to themselves).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/plan_compile.sh"
plans_init "$1" "$2"
test_model_plans
b7=("$bm/llama2-7b/model.onnx" --batch 4 --seq 1024 --dtype bf16 --tp 1 --graph-only)
c llama2-7b-tp1.zplan "${b7[@]}"
c llama2-7b-gemm.zplan "${b7[@]}" --gemm-algos on
printf 'llama2-7b 1 llama2-7b-tp1.zplan\nllama2-7b-gemm 1 llama2-7b-gemm.zplan\n' > "$out/manifest-7b.txt"
plans_done make_memory_plans
