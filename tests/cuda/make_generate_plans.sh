#!/usr/bin/env bash
# Compiles, on this machine (the GPU machine has no MLIR), the generation plans that tests/cuda/generate_bench.sh
# runs on the GPU machine, into OUTDIR (default .gpu-gen at the repository root; /.gpu-gen/ is in
# .gitignore). The device call carries OUTDIR and .gpu-deps (scripts/gpu-deps.sh):
#   tests/cuda/make_generate_plans.sh [OUTDIR] [--7b] [--fused] [--stream] [--layer]
# llama-1b (tests/models/bench, graph only: the weights are drawn at load time with zrun --init random), bf16,
# --target cuda, --max-seq 768 (a 512-token prompt and 256 new tokens), one plan per batch size 1, 8 and 64.
# --fused adds llama-1b-b1-fused and -b8-fused (--decode-fusion on). --stream adds, for
# tests/cuda/decode_stream_gpu.sh, llama-1b-b1-cluster (--few-rows-kernel cluster: the default steps on the
# earlier few-row kernels), -b1-od (--few-rows-max-bytes 64 MiB: o and down on the streaming kernel too), the
# fp32 test llama at batch 1 and 2 for the greedy check against Hugging Face (check/llama-b1, -b2), and with
# ZPLAN_MAIN=ZPLAN (another build's zplan, main's before the change under test) llama-1b-b1-main and -b8-main.
# --layer adds llama-1b-b1-layer and -b4-layer (--decode-layer on: one decode_layer step, the persistent kernel,
# a layer) and -b4 (the default steps at batch 4), for tests/cuda/decode_layer_gpu.sh.
# --7b adds llama2-7b at tp 2 (the same batches) and at batch 64 with --offload-param cpu.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=${ZPLAN:-$top/build/bin/zplan}
out=$top/.gpu-gen
big=0 fused=0 stream=0 layer=0
for a in "$@"; do
  case $a in
    --7b) big=1 ;;
    --fused) fused=1 ;;
    --stream) stream=1 ;;
    --layer) layer=1 ;;
    -*) echo "make_generate_plans: unknown flag $a" >&2; exit 2 ;;
    *) out=$a ;;
  esac
done
mkdir -p "$out"
bm=$top/tests/models/bench
c() {  # c OUT MODEL FLAGS...: one plan, its compiler log beside it on failure
  local o=$1 model=$2
  shift 2
  local t0=$SECONDS
  "$zplan" "$bm/$model/model.onnx" --generate --max-seq 768 --dtype bf16 --target cuda --graph-only "$@" -o "$out/$o" \
    2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }
  echo "$o: $((SECONDS - t0)) s, $(stat -c %s "$out/$o") bytes"
  rm -f "$out/$o.log"
}
for b in 1 8 64; do
  c llama-1b-b$b.zplan llama-1b --batch $b
done
# --fused: the decode program's fused few-row products (--decode-fusion on: q/k/v and gate/up as one launch
# each), at the batches with few rows; tests/cuda/decode_products_gpu.sh runs them beside the plans above.
# Opt-in: tests/cuda/gpu_round.sh runs every plan of the folder and reads the batch from the name's end.
if [[ $fused == 1 ]]; then
  for b in 1 8; do
    c llama-1b-b$b-fused.zplan llama-1b --batch $b --decode-fusion on
  done
fi
if [[ $layer == 1 ]]; then
  c llama-1b-b4.zplan llama-1b --batch 4
  for b in 1 4; do
    c llama-1b-b$b-layer.zplan llama-1b --batch $b --decode-layer on
  done
fi
if [[ $stream == 1 ]]; then
  c llama-1b-b1-cluster.zplan llama-1b --batch 1 --few-rows-kernel cluster
  c llama-1b-b1-od.zplan llama-1b --batch 1 --few-rows-max-bytes 67108864
  mkdir -p "$out/check"
  # The model path relative to the repository root, as generate_gpu.sh's: zrun finds the weights from there.
  for b in 1 2; do
    (cd "$top" && "$zplan" tests/models/llama/model.onnx --generate --max-seq 40 --batch $b --target cuda \
      -o "$out/check/llama-b$b.zplan" > /dev/null)
  done
  if [[ -n ${ZPLAN_MAIN:-} ]]; then
    for b in 1 8; do
      zplan=$ZPLAN_MAIN c llama-1b-b$b-main.zplan llama-1b --batch $b
    done
  fi
fi
if [[ $big == 1 ]]; then
  for b in 1 8 64; do
    c llama2-7b-tp2-b$b.zplan llama2-7b --batch $b --tp 2
  done
  c llama2-7b-offload-b64.zplan llama2-7b --batch 64 --offload-param cpu
fi
ls -la "$out" | awk '{s += $5} END {print "make_generate_plans: " NR - 3 " files, " s " bytes in '"$out"'"}'
