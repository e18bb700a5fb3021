#!/usr/bin/env bash
# Plans for tests/cuda/nvme_bench.sh, compiled here (the GPU machine has no MLIR) into .gpu-nvme of the checkout
# that travels (ignored by git as /.gpu-*/): the shared gpt2 and llama test models on one GPU with their
# parameters on NVMe (resident weights read into pinned staging buffers, then copied to the device), fp32,
# with the model's input and PyTorch's logits for zrun --expect.
#   bash tests/cuda/make_nvme_plans.sh [BIN_DIR]
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${1:-$top/build/bin}
dst=$top/.gpu-nvme
rm -rf "$dst" && mkdir -p "$dst"
for model in gpt2 llama; do
  "$bin/zplan" "$top/tests/models/$model/model.onnx" --target cuda --batch 2 --seq 16 --offload-param nvme \
    --nvme-path /tmp -o "$dst/$model.zplan" --report > "$dst/$model.report.txt"
done
# Both models take the same input; each plan is checked against its own model's logits.
cp "$top/tests/models/gpt2/input_ids.npy" "$dst/input_ids.npy"
for model in gpt2 llama; do cp "$top/tests/models/$model/expected_output.npy" "$dst/$model.expected.npy"; done
