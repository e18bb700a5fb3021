#!/usr/bin/env bash
# Compiles the fp32 training plans that tests/cuda/train_gpu.sh runs on the GPU machine, into .gpu-train/
# (add /.gpu-train/ to .git/info/exclude; the device call runs `bash tests/cuda/train_gpu.sh` and carries
# .gpu-train and .gpu-deps, from scripts/gpu-deps.sh):
# gpt2 and llama, tp 1, ZeRO 0 on one GPU and ZeRO 1-3 over dp 2, --target cuda.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=${ZPLAN:-$top/build/bin/zplan}
cd "$top"
mkdir -p .gpu-train
for m in gpt2 llama; do
  extra=()
  [[ $m == gpt2 ]] && extra=(--restore-zero-biases)  # the export dropped gpt2's zero biases
  for cfg in "0 1" "1 2" "2 2" "3 2"; do
    read -r zero world <<<"$cfg"
    "$zplan" tests/models/$m/model.onnx --train --target cuda --seq 16 --batch 2 --clip-grad 1.0 "${extra[@]}" \
      --zero "$zero" --world "$world" -o .gpu-train/$m-z$zero-w$world.zplan
  done
done
