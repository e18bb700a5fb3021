#!/usr/bin/env bash
# Compiles the fp32 training plans that tests/cuda/train_gpu.sh runs on the GPU machine, into .gpu-train/
# (/.gpu-train/ is in .gitignore; the device call runs `bash tests/cuda/train_gpu.sh` and carries
# .gpu-train and .gpu-deps, from scripts/gpu-deps.sh):
# gpt2 and llama, tp 1, ZeRO 0 on one GPU and ZeRO 1-3 over dp 2, --target cuda; the same in bf16 (fp32
# master weights, moments and reduction). Then the benchmark plans of tests/cuda/train_bench.sh in
# .gpu-train/bench: gpt2-350m and llama-1b (tests/models/bench, graph only: zrun --init random), bf16,
# batch 8 x seq 1024, AdamW with clipping at 1.0: one GPU without and with selective recompute, and ZeRO 2
# and 3 over dp 2 (4 samples per rank).
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
    for dt in fp32 bf16; do
      name=$m-z$zero-w$world
      [[ $dt == bf16 ]] && name=$m-bf16-z$zero-w$world
      "$zplan" tests/models/$m/model.onnx --train --target cuda --seq 16 --batch 2 --clip-grad 1.0 "${extra[@]}" \
        --dtype $dt --zero "$zero" --world "$world" -o .gpu-train/$name.zplan
    done
  done
done
# The training modes that had only run on CPU ranks, on one GPU: fp16 with dynamic loss scaling, full
# recompute, and the optimizer on the host (fp32 and bf16). Name: model-<dtype>-<mode>-z0-w1.
for m in gpt2 llama; do
  extra=()
  [[ $m == gpt2 ]] && extra=(--restore-zero-biases)
  for cfg in "fp16 rcfull --recompute full" "fp16 plain" "fp32 rcfull --recompute full" \
             "fp32 offopt --offload-optimizer cpu" "bf16 offopt --offload-optimizer cpu"; do
    read -r dt tag more <<<"$cfg"
    # shellcheck disable=SC2086  # `more` holds flags
    "$zplan" tests/models/$m/model.onnx --train --target cuda --seq 16 --batch 2 --clip-grad 1.0 "${extra[@]}" \
      --dtype "$dt" $more -o .gpu-train/$m-$dt-$tag-z0-w1.zplan
  done
done
bm=$top/tests/models/bench
mkdir -p .gpu-train/bench
: > .gpu-train/bench/manifest.txt
for m in gpt2-350m llama-1b; do
  for cfg in "tp1 1 0 none" "tp1-sel 1 0 selective" "z2-w2 2 2 none" "z3-w2 2 3 none"; do
    read -r tag world zero rc <<<"$cfg"
    "$zplan" "$bm/$m/model.onnx" --train --target cuda --dtype bf16 --batch 8 --seq 1024 --clip-grad 1.0 --lr 1e-4 \
      --graph-only --world "$world" --zero "$zero" --recompute "$rc" --report \
      -o .gpu-train/bench/$m-$tag.zplan > .gpu-train/bench/$m-$tag.report 2>&1
    echo "$m-$tag $world" >> .gpu-train/bench/manifest.txt
  done
done
