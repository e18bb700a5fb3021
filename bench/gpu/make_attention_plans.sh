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
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=$1
out=${2:-$top/.gpu-plans}
shift $(( $# >= 2 ? 2 : 1 ))
kernels=("$@")
((${#kernels[@]})) || kernels=(wg2 wg3)
mkdir -p "$out"
c() { local o=$1; shift; "$zplan" "$@" --target cuda -o "$out/$o" 2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }; }
for model in gpt2 llama bert; do
  for dt in fp32 bf16; do
    c $model-$dt.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 1
  done
done
for k in "${kernels[@]}"; do
  for model in gpt2-350m llama-1b; do
    c $model-tp1-$k.zplan "$top/tests/models/bench/$model/model.onnx" --batch 8 --seq 1024 --dtype bf16 --tp 1 \
      --graph-only --attention-kernel "$k"
  done
done
rm -f "$out"/*.log
ls -la "$out" | awk '{s += $5} END {print "make_attention_plans: " NR - 3 " files, " s " bytes in '"$out"'"}'
