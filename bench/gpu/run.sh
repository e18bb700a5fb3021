#!/usr/bin/env bash
# bench/gpu/run.sh - the GPU benchmark, in ONE call on the lent GPU machine:
#   1. builds the runtime there (compiler off; FlatBuffers and GoogleTest from .gpu-deps, made here by
#      scripts/gpu-deps.sh and carried with the call);
#   2. runs each plan given (compiled here by `zplan ... --target cuda --dtype bf16 --batch 8 --seq 1024`)
#      with zrun on the cuda backend, weights from --init random, random ids: once timed (CUDA graph
#      replay, median of --repeat runs after 3 warm-up runs) and once profiled (time per step class: GEMM, attention, rest);
#   3. runs the PyTorch peers (eager and torch.compile, bench/gpu/torch_baseline.py) in the same call;
#   4. prints one table: tokens/s, TFLOP/s, ratio to each peer, planned vs measured peak device memory,
#      and where zplan's time goes.
#
# usage: bench/gpu/run.sh [--gpt2-plan PLAN] [--llama-plan PLAN] [--llama-offload-plan PLAN]
#                         [--no-torch] [--repeat N] [--out DIR]
# Plans are optional: without any, only the PyTorch half runs (it works on its own).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/zplan-bench}
repeat=10
torch=1
declare -A plans=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --gpt2-plan) plans[gpt2-350m]=$2; shift 2 ;;
    --llama-plan) plans[llama-1b]=$2; shift 2 ;;
    --llama-offload-plan) plans[llama-1b-offload]=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
for k in "${!plans[@]}"; do
  [[ -f ${plans[$k]} ]] || { echo "run.sh: plan for $k not found: ${plans[$k]}" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"

if [[ ${#plans[@]} -gt 0 ]]; then
  [[ -d $top/.gpu-deps ]] || { echo "run.sh: $top/.gpu-deps missing: run scripts/gpu-deps.sh here and carry it" >&2; exit 2; }
  b=$top/build-gpu
  cmake -S "$top" -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" \
    > "$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
  ninja -C "$b" -j"$(nproc)" zrun > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
  for k in "${!plans[@]}"; do
    echo "== zrun $k: ${plans[$k]}"
    # Timed: the second run is captured as a CUDA graph, later runs replay it; 3 untimed warm-up runs, then the median of the timed ones (as the PyTorch peers).
    # A failing plan is reported and the others (and the PyTorch half) still run.
    ZRT_CUDA_REPORT=1 ZRT_CUDA_GRAPH=1 "$b/bin/zrun" "${plans[$k]}" --backend cuda --init random --random-inputs \
      --warmup 3 --repeat "$repeat" > "$out/zrun-$k.log" 2>&1 || { echo "run.sh: zrun failed on $k"; tail -20 "$out/zrun-$k.log"; continue; }
    tail -3 "$out/zrun-$k.log"
    # Profiled: events around every step (no graph), for the share of time per step class.
    [[ $k == *offload* ]] && continue
    ZRT_CUDA_PROFILE=1 "$b/bin/zrun" "${plans[$k]}" --backend cuda --init random --random-inputs --repeat 3 \
      > "$out/profile-$k.log" 2>&1 || { echo "run.sh: profiled zrun failed on $k"; tail -20 "$out/profile-$k.log"; }
    grep "profile over" "$out/profile-$k.log" || true
  done
fi

if [[ $torch == 1 ]]; then
  echo "== PyTorch eager and torch.compile"
  PYTHONUNBUFFERED=1 python3 "$top/bench/gpu/torch_baseline.py" --json "$out/torch.json" 2>&1 | tee "$out/torch.log" | grep '^{'
fi

python3 "$top/bench/gpu/report.py" --dir "$out" | tee "$out/table.txt"
