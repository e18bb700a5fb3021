#!/usr/bin/env bash
# Compiles, on this machine (the GPU machine has no MLIR), every plan the GPU calls run, into OUTDIR (default
# .gpu-plans at the repository root, which the calls carry), with OUTDIR/manifest.txt for
# tests/cuda/plan_memory.sh and OUTDIR/fault.zplan for tests/cuda/nccl_fault.sh:
#   bench/gpu/make_plans.sh ZPLAN [OUTDIR] [extra zplan flags for every plan]
# Benchmark plans: bf16, global batch 8 (llama2-7b: 4), seq 1024, --target cuda. Correctness plans: the test
# models (tests/models, batch 2, seq 16) in fp32 and bf16, at tp 1, tp 2 and ZeRO-3 over dp 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/plan_compile.sh"
plans_init "$1" "${2:-$top/.gpu-plans}" "${@:3}"
: > "$out/manifest.txt"
m() { echo "$1 $2 $1.zplan" >> "$out/manifest.txt"; }
for model in gpt2-350m llama-1b; do
  c $model-tp1.zplan "$bm/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 1 --graph-only; m $model-tp1 1
  c $model-tp2.zplan "$bm/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 2 --graph-only; m $model-tp2 2
done
c llama-1b-offload.zplan "$bm/llama-1b/model.onnx" --batch 8 --seq 1024 --dtype bf16 --offload-param cpu --graph-only; m llama-1b-offload 1
c llama-1b-dp2.zplan "$bm/llama-1b/model.onnx" --batch 8 --seq 1024 --dtype bf16 --world 2 --graph-only; m llama-1b-dp2 2
c llama-1b-zero3.zplan "$bm/llama-1b/model.onnx" --batch 8 --seq 1024 --dtype bf16 --world 2 --zero 3 --graph-only; m llama-1b-zero3 2
c llama2-7b-tp1.zplan "$bm/llama2-7b/model.onnx" --batch 4 --seq 1024 --dtype bf16 --tp 1 --graph-only
echo "llama2-7b-tp1 1 llama2-7b-tp1.zplan" > "$out/manifest-7b.txt"
cp "$out/gpt2-350m-tp2.zplan" "$out/fault.zplan"
# The one-GPU subset, for a call on a one-GPU machine.
awk '$2 == 1' "$out/manifest.txt" > "$out/manifest-1gpu.txt"
test_model_plans
for model in gpt2 llama; do
  for dt in fp32 bf16; do
    c $model-$dt-tp2.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 2
    c $model-$dt-zero3.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --world 2 --zero 3
  done
done
plans_done make_plans
