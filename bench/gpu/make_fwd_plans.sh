#!/usr/bin/env bash
# Compiles, here (the GPU machine has no MLIR), the one-GPU plans of bench/gpu/fwd_call.sh into OUTDIR:
#   bench/gpu/make_fwd_plans.sh ZPLAN OUTDIR
# Benchmark plans (bf16, seq 1024, --target cuda, --graph-only: zrun runs them with --init random): gpt2-350m
# and llama-1b at batch 8, llama-1b with --offload-param cpu (its --report beside it: the bytes moved a step,
# for the PCIe floor), llama2-7b at batch 4. Correctness plans: the test models (tests/models, batch 2, seq 16)
# in fp32 and bf16 at tp 1, for tests/cuda/check_models.sh. OUTDIR must sit at the tree's root (plans refer
# to the test models' weights relative to themselves).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=$1
out=$2
mkdir -p "$out"
bm=$top/tests/models/bench
c() { local o=$1; shift; "$zplan" "$@" --target cuda -o "$out/$o" 2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }; }
for model in gpt2-350m llama-1b; do
  c $model-tp1.zplan "$bm/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 1 --graph-only
done
c llama-1b-offload.zplan "$bm/llama-1b/model.onnx" --batch 8 --seq 1024 --dtype bf16 --offload-param cpu --graph-only \
  --report > "$out/llama-1b-offload.report.txt"
c llama2-7b-tp1.zplan "$bm/llama2-7b/model.onnx" --batch 4 --seq 1024 --dtype bf16 --tp 1 --graph-only
for model in gpt2 llama bert; do
  for dt in fp32 bf16; do
    c $model-$dt.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 1
  done
done
rm -f "$out"/*.zplan.log
ls -la "$out" | awk '{s += $5} END {print "make_fwd_plans: " NR - 3 " files, " s " bytes in '"$out"'"}'
