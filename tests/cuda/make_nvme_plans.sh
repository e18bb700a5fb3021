#!/usr/bin/env bash
# Plans for tests/cuda/nvme_bench.sh, compiled here (the GPU machine has no MLIR) into .gpu-nvme of the checkout
# that travels (ignored by git as /.gpu-*/): the shared gpt2 and llama test models on one GPU with their
# parameters on NVMe (resident weights read into pinned staging buffers, then copied to the device), fp32,
# with the model's input and PyTorch's logits for zrun --expect. Then, in .gpu-nvme/train, bf16 training plans
# (docs/nvme.md, mixed precision): the fp32 master parts and moments in the files and the update on the host, on
# one GPU (--offload-optimizer nvme) and at ZeRO 3 over two GPUs with the bf16 parameter shards on NVMe too;
# one plan with the optimizer in pinned host memory instead (--offload-optimizer cpu), the host update without
# the files. nvme_bench.sh trains each for 5 steps against PyTorch's losses and gradient norms (2e-2, as
# bf16 on CPU ranks) and compares the bytes the I/O layer moved per step with each plan's report (--report-json).
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
mkdir -p "$dst/train"
for model in gpt2 llama; do
  extra=()
  [[ $model == gpt2 ]] && extra=(--restore-zero-biases)  # the export dropped gpt2's zero biases
  # name world zero param optimizer
  for cfg in "opt-nvme-w1 1 0 none nvme" "param-opt-nvme-z3-w2 2 3 nvme nvme" "opt-cpu-w1 1 0 none cpu"; do
    read -r tag world zero param opt <<<"$cfg"
    nvme=()
    [[ $opt == nvme || $param == nvme ]] && nvme=(--nvme-path /tmp)
    "$bin/zplan" "$top/tests/models/$model/model.onnx" --train --target cuda --dtype bf16 --seq 16 --batch 2 \
      --clip-grad 1.0 "${extra[@]}" --world "$world" --zero "$zero" --offload-param "$param" \
      --offload-optimizer "$opt" "${nvme[@]}" -o "$dst/train/$model-bf16-$tag.zplan" \
      --report-json "$dst/train/$model-bf16-$tag.report.json" > /dev/null
  done
  for f in input_ids.npy train_losses.npy train_grad_norms.npy; do cp "$top/tests/models/$model/$f" "$dst/train/$model.$f"; done
done
