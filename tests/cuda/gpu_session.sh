#!/usr/bin/env bash
# Everything the GPU part checks, in one call on the lent GPU machine (device time is scarce):
#   build (compiler off) -> kernel tests -> memcheck of the attention/row/movement kernels -> training kernels
#   and run-time ops (with a memcheck of the attention backward) -> backend tests
#   -> the shared models on the cuda backend (.gpu-plans/) -> kernel timings -> bench/gpu/run.sh.
# Logs go to $OUT (or /tmp/zplan-gpu); a summary is printed last.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
step_width=14
# Logs stay in one folder on the machine and travel back as one archive (the device tool returns 8 files).
logs_to /tmp/zplan-gpu gpu-logs.tgz
cd "$top"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm --format=csv,noheader
gpu_build zplan_cuda_kernels_test zplan_cuda_backend_test zplan_cuda_nccl_test zplan_cuda_kernel_bench zrun \
  zplan_cuda_train_kernels_test zplan_cuda_train_backend_test
gpu_env
step kernels "$b/bin/zplan_cuda_kernels_test"
grep -E "^\[  (PASSED|FAILED) |worst|Trace|path|error:" "$out/kernels.log" | head -40
step memcheck timeout 60 compute-sanitizer --tool memcheck "$b/bin/zplan_cuda_kernels_test" \
  --gtest_filter='CudaAttention.*:CudaMovement.*'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3
step train_kernels "$b/bin/zplan_cuda_train_kernels_test"
grep -E "^\[  (PASSED|FAILED) |worst|Trace|path|attention (forward|backward)|error:" "$out/train_kernels.log" | head -40
step train_memcheck timeout 180 compute-sanitizer --tool memcheck "$b/bin/zplan_cuda_train_kernels_test" \
  --gtest_filter='CudaTrain.AttentionLseAndFlashBackward:CudaTrain.NormGrads:CudaRuntimeOps.*'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/train_memcheck.log" | tail -3
step train_backend "$b/bin/zplan_cuda_train_backend_test"
grep -E "^\[  (PASSED|FAILED) |Failure|cpu .*cuda" "$out/train_backend.log" | head -20
step backend "$b/bin/zplan_cuda_backend_test"
grep -E "^\[  (PASSED|FAILED) |Failure|error|rel |vs " "$out/backend.log" | head -30
if [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then
  step nccl mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0 "$b/bin/zplan_cuda_nccl_test"
  grep -E "^\[  (PASSED|FAILED) |Failure" "$out/nccl.log" | head -20
fi
if [[ -d .gpu-plans ]]; then
  step models tests/cuda/check_models.sh "$b/bin/zrun" .gpu-plans
  cat "$out/models.log"
fi
step kernel_bench "$b/bin/zplan_cuda_kernel_bench"
cat "$out/kernel_bench.log"
args=()
[[ -f .gpu-plans/gpt2-350m.zplan ]] && args+=(--gpt2-plan .gpu-plans/gpt2-350m.zplan)
[[ -f .gpu-plans/llama-1b.zplan ]] && args+=(--llama-plan .gpu-plans/llama-1b.zplan)
[[ -f .gpu-plans/llama-1b-offload.zplan ]] && args+=(--llama-offload-plan .gpu-plans/llama-1b-offload.zplan)
step bench timeout 380 env OUT="$out/bench" bench/gpu/run.sh "${args[@]}"
grep -vE "^\{|^==" "$out/bench.log" | tail -16
printf '%s\n' "${summary[@]}"
