#!/usr/bin/env bash
# Compiles, here (the GPU machine has no MLIR), the plans that measure the compiler's overlap decisions on
# the 2-GPU machine (docs/gpu-plan-runs.md, "Overlap decided by the compiler"), into OUTDIR:
#   bench/gpu/make_overlap_plans.sh ZPLAN OUTDIR
# OUTDIR/manifest.txt (tests/cuda/plan_memory.sh: planned vs measured peak and median time of each plan):
# llama-1b plain dp 2, ZeRO-3 over dp 2 without the prefetch window (--prefetch-bytes 0, the old placement)
# and with the default window, tp 1, tp 2, and tp 2 with --overlap-chunks 2 and 4; gpt2-350m and gpt2-1.3b
# (tests/models/export_bench_graph.py) tp 1, tp 2 and tp 2 with --overlap-chunks 2; llama-1b on one GPU with --offload-param cpu, with the default copy window
# (llama-1b-offload) and with the placement of before, one parameter ahead (llama-1b-offload-nowindow,
# --prefetch-bytes 0), next to the resident tp 1 plan. bf16, global batch 8, seq 1024, --target cuda.
# OUTDIR/host-copies.txt: NAME BYTES, the host -> device bytes one run of each offload plan moves (its
# report's host_copies), which tests/cuda/gpu_round.sh divides by the pinned rate it measures: the floor.
# OUTDIR also gets the test models' plans under the names tests/cuda/check_models.sh reads, their -tp2
# variants compiled with --overlap-chunks 2 and their -zero3 variants with the default window: the chunked
# and prefetched plans against PyTorch's outputs on the GPU (cross-stream events decide correctness there).
# OUTDIR must sit at the repository root (the test models' weights are referenced relative to the plan).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
zplan=$1 out=$2
mkdir -p "$out"
bm=$top/tests/models/bench
c() { local o=$1; shift; "$zplan" "$@" --target cuda -o "$out/$o" 2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }; }
b() { local o=$1 m=$2; shift 2; c "$o.zplan" "$bm/$m/model.onnx" --batch 8 --seq 1024 --dtype bf16 --graph-only "$@"; }
: > "$out/manifest.txt"
m() { echo "$1 $2 $1.zplan" >> "$out/manifest.txt"; }
b llama-1b-dp2 llama-1b --world 2; m llama-1b-dp2 2
b llama-1b-zero3-nowindow llama-1b --world 2 --zero 3 --prefetch-bytes 0; m llama-1b-zero3-nowindow 2
b llama-1b-zero3 llama-1b --world 2 --zero 3; m llama-1b-zero3 2
for model in llama-1b gpt2-350m gpt2-1.3b; do
  b $model-tp1 $model --tp 1; m $model-tp1 1
  b $model-tp2 $model --tp 2; m $model-tp2 2
  b $model-tp2-chunks2 $model --tp 2 --overlap-chunks 2; m $model-tp2-chunks2 2
done
b llama-1b-tp2-chunks4 llama-1b --tp 2 --overlap-chunks 4; m llama-1b-tp2-chunks4 2
: > "$out/host-copies.txt"
# o NAME FLAGS...: a one-GPU llama-1b plan with the parameters in pinned host memory, its bytes per run noted.
o() {
  local o=$1; shift
  b "$o" llama-1b --offload-param cpu --report-json "$out/$o.json" "$@"; m "$o" 1
  python3 -c 'import json, sys; print(sys.argv[2], json.load(open(sys.argv[1]))["host_copies"]["bytes_per_run"]["main"])' \
    "$out/$o.json" "$o" >> "$out/host-copies.txt"
  rm -f "$out/$o.json"
}
o llama-1b-offload
o llama-1b-offload-nowindow --prefetch-bytes 0
for model in gpt2 llama bert; do
  for dt in fp32 bf16; do
    c $model-$dt.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 1
    [[ $model == bert ]] && continue
    c $model-$dt-tp2.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 2 --overlap-chunks 2
    c $model-$dt-zero3.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --world 2 --zero 3
  done
done
rm -f "$out"/*.log
du -sb "$out" | awk '{print "make_overlap_plans: " $1 " bytes in '"$out"'"}'
