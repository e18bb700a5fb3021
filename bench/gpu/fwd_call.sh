#!/usr/bin/env bash
# bench/gpu/fwd_call.sh BASE FWD - issue 12 item 5 (one GPU): one call that builds the runtime of two trees (BASE,
# the code before a change, and FWD, the code with it), checks FWD's kernels and plans against the CPU reference
# and PyTorch, and times both side by side with the PyTorch peers, so that the call itself says what each change
# did. Each tree holds .gpu-plans (bench/gpu/make_fwd_plans.sh, compiled by that tree's zplan); FWD_DEPS (default
# ./.gpu-deps, made by scripts/gpu-deps.sh) holds FlatBuffers and GoogleTest for both builds. Run on a one-GPU
# machine from the checkout that carries the trees:
#   bench/gpu/fwd_call.sh .gpu-src-main .gpu-src-fwd
# Order (the GPU is timed by one thing at a time):
#   1. both builds in the background (niced) while the PyTorch peers run: eager and torch.compile for gpt2-350m
#      and llama-1b at batch 8 and llama2-7b at batch 4 (seq 1024, bf16), with each one's kernel table
#      (torch.profiler), and the pinned host-to-device copy rate (the offload floor);
#   2. FWD's attention kernel tests (tests/cuda, against the CPU reference) and check_models.sh (the test
#      models' plans against PyTorch's outputs);
#   3. zrun, CUDA graph replay, median of 10 after 3 warm-ups: BASE's runtime on BASE's plans, FWD's on FWD's,
#      FWD's runtime on BASE's plans (the kernels alone) and FWD's plans under the attention variants
#      (llama2-7b's runs take about 150 s each: zrun draws its 6.7 B random weights on the host);
#      ZRT_CUDA_PROFILE breakdowns of both; then zplan_cuda_kernel_bench.
# Writes a few logs and summary.txt to $OUT (at most 8 files come back) and prints the summary last.
set -uo pipefail
base=$(cd "$1" && pwd)
fwd=$(cd "$2" && pwd)
deps=$(cd "${FWD_DEPS:-.gpu-deps}" && pwd)
out=${OUT:-/tmp/fwd-call}
mkdir -p "$out"
deadline=${FWD_DEADLINE_S:-450}
log() { echo "[+${SECONDS}s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/summary.txt"

build() {  # TREE TAG TARGETS...
  local t=$1 tag=$2
  shift 2
  cmake -S "$t" -B "$t/build-gpu" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DZPLAN_FLATBUFFERS_ROOT="$deps" -DZPLAN_GTEST_SOURCE_DIR="$deps/googletest-src" \
    > "/tmp/cfg-$tag.log" 2>&1 || { echo "configure $tag failed"; tail -20 "/tmp/cfg-$tag.log"; return 1; }
  nice -n 10 ninja -C "$t/build-gpu" -j7 "$@" > "/tmp/build-$tag.log" 2>&1 || { echo "build $tag failed"; tail -30 "/tmp/build-$tag.log"; return 1; }
}
log "builds start; PyTorch peers run meanwhile"
(build "$base" base zrun; echo $? > /tmp/build-base.rc) &
(build "$fwd" fwd zrun zplan_cuda_kernels_test zplan_cuda_kernel_bench; echo $? > /tmp/build-fwd.rc) &
PYTHONUNBUFFERED=1 timeout 240 python3 "$fwd/bench/gpu/torch_baseline.py" --h2d --profile --batch-of llama2-7b=4 \
  --json "$out/torch.json" > "$out/torch.log" 2>&1
log "PyTorch peers done (rc $?)"
wait
log "builds done: base rc $(cat /tmp/build-base.rc), fwd rc $(cat /tmp/build-fwd.rc)"
zb=$base/build-gpu/bin/zrun
zf=$fwd/build-gpu/bin/zrun
[[ -x $zf ]] || { echo "no FWD zrun"; exit 1; }

log "kernel tests (attention, against the CPU reference)"
timeout 120 "$fwd/build-gpu/bin/zplan_cuda_kernels_test" --gtest_filter='CudaAttention.*' > "$out/checks.log" 2>&1
echo "kernel tests rc $?" | tee -a "$out/summary.txt"
tail -3 "$out/checks.log"
log "check_models (test models' FWD plans on CUDA against PyTorch's outputs)"
(cd "$fwd" && timeout 120 tests/cuda/check_models.sh "$zf" .gpu-plans) >> "$out/checks.log" 2>&1
echo "check_models rc $?" | tee -a "$out/summary.txt"
grep -E "^(ok|FAIL)" "$out/checks.log" | tee -a "$out/summary.txt"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
run() {  # LABEL ZRUN TREE PLAN [VAR=VALUE...]: timed, graph replay
  local label=$1 z=$2 tree=$3 plan=$4
  shift 4
  if ((SECONDS > deadline)); then echo "skip $label (deadline)"; return; fi
  [[ -x $z && -f $tree/.gpu-plans/$plan ]] || { echo "skip $label (no zrun or plan)"; return; }
  echo "=== $label" >> "$out/zrun.log"
  (cd "$tree" && env "$@" ZRT_CUDA_REPORT=1 ZRT_CUDA_GRAPH=1 timeout 150 "$z" ".gpu-plans/$plan" --backend cuda --init random \
     --random-inputs --warmup 3 --repeat 10) >> "$out/zrun.log" 2>&1 || echo "zrun $label failed" >> "$out/zrun.log"
  log "$label: $(grep -o 'median [0-9.]* ms' "$out/zrun.log" | tail -1)"
}
prof() {  # LABEL ZRUN TREE PLAN: events around every step, the ops that take the time
  local label=$1 z=$2 tree=$3 plan=$4
  if ((SECONDS > deadline)); then echo "skip profile $label (deadline)"; return; fi
  echo "=== profile $label" >> "$out/profile.log"
  (cd "$tree" && ZRT_CUDA_PROFILE=1 ZRT_CUDA_PROFILE_TOP=25 timeout 100 "$z" ".gpu-plans/$plan" --backend cuda --init random \
     --random-inputs --repeat 3) 2>&1 | grep "profile" >> "$out/profile.log"
}
run base/gpt2-350m "$zb" "$base" gpt2-350m-tp1.zplan
run fwd/gpt2-350m "$zf" "$fwd" gpt2-350m-tp1.zplan
run base/llama-1b "$zb" "$base" llama-1b-tp1.zplan
run fwd/llama-1b "$zf" "$fwd" llama-1b-tp1.zplan
run fwd-kernels-base-plan/gpt2-350m "$zf" "$base" gpt2-350m-tp1.zplan
run fwd-kernels-base-plan/llama-1b "$zf" "$base" llama-1b-tp1.zplan
run fwd-mma128/gpt2-350m "$zf" "$fwd" gpt2-350m-tp1.zplan ZK_CUDA_ATTENTION=mma128
run fwd-mma128/llama-1b "$zf" "$fwd" llama-1b-tp1.zplan ZK_CUDA_ATTENTION=mma128
run fwd-mma128r/gpt2-350m "$zf" "$fwd" gpt2-350m-tp1.zplan ZK_CUDA_ATTENTION=mma128r
run fwd-mma128r/llama-1b "$zf" "$fwd" llama-1b-tp1.zplan ZK_CUDA_ATTENTION=mma128r
run fwd-mma64-plain/gpt2-350m "$zf" "$fwd" gpt2-350m-tp1.zplan ZK_CUDA_ATTENTION=mma64 ZK_CUDA_ATTENTION_PLAIN=1
run base/llama-1b-offload "$zb" "$base" llama-1b-offload.zplan
run fwd/llama-1b-offload "$zf" "$fwd" llama-1b-offload.zplan
prof base/gpt2-350m "$zb" "$base" gpt2-350m-tp1.zplan
prof fwd/gpt2-350m "$zf" "$fwd" gpt2-350m-tp1.zplan
prof base/llama-1b "$zb" "$base" llama-1b-tp1.zplan
prof fwd/llama-1b "$zf" "$fwd" llama-1b-tp1.zplan
prof fwd/llama-1b-offload "$zf" "$fwd" llama-1b-offload.zplan
run fwd/llama2-7b-b4 "$zf" "$fwd" llama2-7b-tp1.zplan
if ((SECONDS < deadline - 40)); then
  log "kernel bench"
  timeout 60 "$fwd/build-gpu/bin/zplan_cuda_kernel_bench" > "$out/kbench.log" 2>&1
fi
run base/llama2-7b-b4 "$zb" "$base" llama2-7b-tp1.zplan
python3 "$fwd/bench/gpu/fwd_summary.py" "$out" "$fwd/.gpu-plans/llama-1b-offload.report.txt" | tee -a "$out/summary.txt"
tar czf "$out/logs.tgz" -C /tmp cfg-base.log cfg-fwd.log build-base.log build-fwd.log 2>/dev/null
log "done"
