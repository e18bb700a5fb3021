#!/usr/bin/env bash
# Compiles, here (the GPU machine has no MLIR), the plans of bench/gpu/memory_call.sh into OUTDIR:
#   bench/gpu/make_memory_plans.sh ZPLAN OUTDIR
# The test models (tests/models, batch 2, seq 16, tp 1) in fp32 and bf16 for tests/cuda/check_models.sh, and
# llama2-7b at batch 4 (seq 1024, bf16, --graph-only: zrun runs it with --init random) as compiled by default
# and with --fold-rotary on. OUTDIR must sit at the tree's root (plans refer to the test models' weights
# relative to themselves).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=$1
out=$2
mkdir -p "$out"
c() { local o=$1; shift; "$zplan" "$@" --target cuda -o "$out/$o" 2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }; }
for model in gpt2 llama bert; do
  for dt in fp32 bf16; do
    c $model-$dt.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 1
  done
done
b7=("$top/tests/models/bench/llama2-7b/model.onnx" --batch 4 --seq 1024 --dtype bf16 --tp 1 --graph-only)
c llama2-7b-tp1.zplan "${b7[@]}"
c llama2-7b-fold.zplan "${b7[@]}" --fold-rotary on
rm -f "$out"/*.zplan.log
ls -la "$out" | awk '{s += $5} END {print "make_memory_plans: " NR - 3 " files, " s " bytes in '"$out"'"}'
