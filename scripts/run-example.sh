#!/usr/bin/env bash
# The main job: set-up and build, then compile the bundled small GPT-2 with --tp 2 --zero 3 --world 4, run the
# plan on 4 ranks (4 CPU processes under mpirun on a machine without a GPU), and print the per-rank memory
# report and the largest difference from PyTorch's reference output.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/scripts/build.sh"
build=${ZPLAN_BUILD_DIR:-$top/build}
bin=$build/bin
model=$top/tests/models/gpt2
out=$build/example
mkdir -p "$out"

echo
echo "== zplan: compile gpt2 with --tp 2 --zero 3 --world 4 (batch 2, seq 16)"
"$bin/zplan" "$model/model.onnx" --tp 2 --zero 3 --world 4 --batch 2 --seq 16 --report -o "$out/gpt2.zplan"

echo
echo "== zrun: 4 ranks"
mpirun --allow-run-as-root --oversubscribe -np 4 "$bin/zrun" "$out/gpt2.zplan" \
  --input input_ids="$model/input_ids.npy" --output logits="$out/logits.npy" \
  --expect logits="$model/expected_output.npy"
