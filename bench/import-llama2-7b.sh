#!/usr/bin/env bash
# Import benchmark (not a test): imports the graph-only llama2-7b export (2,147 nodes, 32 layers) with
#   zplan import --batch 8 --seq 1024 --graph-only
# and prints wall and CPU time (target: under 2 s on the 2-core dev machine) and the recognised ops.
# A second run at --seq 4096 shows that the causal-mask folding stays at seq x seq elements.
#
# Usage: bench/import-llama2-7b.sh [BUILD_DIR]      (default: build)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${ZPLAN_BUILD_DIR:-$top/build}}
zplan=$build/bin/zplan
model=$top/tests/models/bench/llama2-7b/model.onnx
[ -f "$model" ] || model=$top/../shared/bench-models/llama2-7b/model.onnx
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for seq in 1024 4096; do
  /usr/bin/time -f "%e %U %M" -o "$out/time" \
    "$zplan" import "$model" --batch 8 --seq $seq --graph-only -o "$out/llama2-7b.mlir"
  read -r wall user rss < "$out/time"
  echo "import llama2-7b --batch 8 --seq $seq: ${wall} s wall, ${user} s CPU, $((rss / 1024)) MiB peak"
done
echo "recognised ops (seq 4096):"
grep -o 'zg\.\(linear\|attention\|rms_norm\|silu\|embedding\|causal_mask\|matmul\) ' "$out/llama2-7b.mlir" \
  | sort | uniq -c
