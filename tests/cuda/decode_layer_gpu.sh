#!/usr/bin/env bash
# One device call for the persistent decode layer (kernels/cuda/decode_layer.cu; docs/generation.md,
# "Persistent decode layer kernel: written, not yet run"), on nvidia-h200. On the compiling machine first:
#   ninja -C build zrun zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test &&
#   tests/cuda/pack_runtime.sh build zrun zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test
#   tests/cuda/make_generate_plans.sh .gpu-gen --layer
# then the call, carrying .gpu-bin and .gpu-gen:  bash tests/cuda/decode_layer_gpu.sh
#   -> CudaDecodeLayer.RefusesAGridThatCannotBeResident, .MatchesCpuReference (the kernel against the CPU
#      reference kernels, phase by phase; a hung grid barrier ends at the step's timeout, rc 124) and
#      .PlanOperandsOwnSyncNoResidual (as the backend runs it: the plan's sync state, no residual, no early loads)
#   -> CudaDecodeLayer.ChainTimingAgainstSixKernels (four llama-1b layers: decode_layer against the six kernels)
#   -> CudaSkinnyStream.NormLayerChainTiming (the four streaming products alone, session 10's reference figure)
#   -> where the plans are there: zrun --generate on llama-1b (random weights, 512-token prompts, 256 new
#      tokens) with the default plan and the --decode-layer on plan, alternated, at batch 1 and 4; the layer
#      plan's tokens compared with the default plan's
# Logs travel back as $OUT/decode-layer-logs.tgz, the summary as $OUT/summary.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
step_width=22
logs_to /tmp/zplan-decode-layer decode-layer-logs.tgz summary.txt
cd "$top" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
gpu_env
gpu_build zrun zplan_cuda_decode_layer_test zplan_cuda_generate_kernels_test
show() { grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|Expected|Which is|decode layer|six kernels|decode_layer|norm chain|sync word|phase" "$out/$1.log" | head -${2:-40}; }
step correctness env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_decode_layer_test" \
  --gtest_filter='CudaDecodeLayer.RefusesAGridThatCannotBeResident:CudaDecodeLayer.MatchesCpuReference:CudaDecodeLayer.PlanOperandsOwnSyncNoResidual'
show correctness 60
step timing env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_decode_layer_test" \
  --gtest_filter='CudaDecodeLayer.ChainTimingAgainstSixKernels'
show timing
step stream_chain env CUDA_VISIBLE_DEVICES=0 timeout 120 "$b/bin/zplan_cuda_generate_kernels_test" \
  --gtest_filter='CudaSkinnyStream.NormLayerChainTiming'
show stream_chain
if [[ -f .gpu-gen/llama-1b-b1-layer.zplan ]]; then
  python3 - "$out" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for b in (1, 4):
    np.save(f"{sys.argv[1]}/prompt-b{b}.npy", rng.integers(3, 32000, size=(b, 512), dtype=np.int64))
PY
  run_zrun() {  # run_zrun NAME BATCH PLAN
    step "$1" env ZRT_CUDA_REPORT=1 timeout 90 "$b/bin/zrun" "$3" --backend cuda --init random --generate --warmup 1 \
      --prompt "$out/prompt-b$2.npy" --max-new-tokens 256 --tokens-out "$out/tokens-$1.npy"
    echo "$1: $(grep -E 'tokens/s' "$out/$1.log" | tail -1)"
  }
  same() {
    python3 -c "
import numpy as np
a, b = np.load('$out/tokens-$1.npy'), np.load('$out/tokens-$2.npy')
print('$2 tokens equal to $1:', bool((a == b).all()), '(differing: %d of %d)' % (int((a != b).sum()), a.size))
" 2>&1 | tail -1
  }
  for bs in 1 4; do
    for round in 1 2; do
      run_zrun b$bs-$round $bs .gpu-gen/llama-1b-b$bs.zplan
      run_zrun b$bs-layer-$round $bs .gpu-gen/llama-1b-b$bs-layer.zplan
    done
    same b$bs-1 b$bs-layer-1
  done
fi
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
