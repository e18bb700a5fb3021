#!/usr/bin/env bash
# A round's closing device call: every GPU check of the tree in one call, then the timing table, cut off by
# the call's budget (device time is scarce; later steps are skipped, and say so, when it runs out).
#   bash tests/cuda/gpu_round.sh [--no-table]
# Checks (each against an oracle the code under test does not compute: the CPU reference kernels, PyTorch's
# outputs and losses, the mpirun run):
#   kernel tests (inference, training, generation, sampling), backend tests, NCCL tests (2 GPUs)
#   -> the test models against PyTorch (tests/cuda/check_models.sh over .gpu-plans)
#   -> the one-GPU training plans against PyTorch's losses (tests/cuda/train_gpu.sh over .gpu-train, the
#      plans named *-z0-w1: fp32, bf16, fp16, full recompute, the optimizer on the host)
#   -> the NVMe plans (tests/cuda/nvme_bench.sh over .gpu-nvme, without the disk sweep)
#   -> generation (.gpu-gen: zrun's figures; the pinned host-to-device rate for the offload plan's floor)
#   (the pinned rate is measured once a call, also when the manifest holds --offload-param cpu plans: each
#   one's median is printed next to its floor, the bytes it moves at that rate)
#   -> torchrun against mpirun (tests/cuda/torchrun_nccl.sh, 2 GPUs)
# Table (unless --no-table): planned vs measured peak and median time of every plan in
# .gpu-plans/manifest.txt (tests/cuda/plan_memory.sh), llama-1b's ZeRO-3 and chunked tp 2 at fewer NCCL channels,
# then the PyTorch peers (bench/gpu/torch_baseline.py on
# one GPU, the models of ZPLAN_TORCH_MODELS, default gpt2-350m llama-1b, llama2-7b at batch 4 if named; its
# --tp-peers under torchrun on two).
# Plans come from bench/gpu/make_overlap_plans.sh (.gpu-plans), tests/cuda/make_train_plans.sh (.gpu-train)
# and tests/cuda/make_nvme_plans.sh (.gpu-nvme), compiled on the compiling machine; the call carries them and
# .gpu-deps (scripts/gpu-deps.sh). Logs travel back as $OUT/round-logs.tgz; the summary is printed last.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table=1
[[ ${1:-} == --no-table ]] && table=0
budget=${ZPLAN_CALL_BUDGET_S:-560}
left() { [[ $SECONDS -lt $1 ]]; }  # left SECONDS: is the call still under that many seconds?
# wanted STEP: not named in ZPLAN_ROUND_SKIP (a space-separated list of train, nvme, gen, torchrun, sweep, fault).
wanted() { [[ " ${ZPLAN_ROUND_SKIP:-} " != *" $1 "* ]]; }
logs_to /tmp/zplan-round round-logs.tgz
cd "$top" || exit 1
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
gpus=$(nvidia-smi -L | grep -c '^GPU')
gpu_env
gpu_build zrun zplan_cuda_kernels_test zplan_cuda_train_kernels_test zplan_cuda_generate_kernels_test \
  zplan_cuda_sample_test zplan_cuda_rotary_test zplan_cuda_backend_test zplan_cuda_train_backend_test \
  zplan_cuda_nccl_test zplan_cuda_attention_bench

# gtest NAME BINARY: one GoogleTest binary on GPU 0, its verdicts and failures printed.
# Each within 240 s: a hung kernel must not take the call's whole budget.
gtest() {
  step "$1" env CUDA_VISIBLE_DEVICES=0 timeout 240 "$2" "${@:3}"
  grep -E "^\[  (PASSED|FAILED) |Failure" "$out/$1.log" | head -12
}
gtest kernels "$b/bin/zplan_cuda_kernels_test" --gtest_filter='-*Wgmma*'
gtest train_kernels "$b/bin/zplan_cuda_train_kernels_test"
gtest generate_kernels "$b/bin/zplan_cuda_generate_kernels_test"
gtest sample "$b/bin/zplan_cuda_sample_test"
gtest rotary "$b/bin/zplan_cuda_rotary_test"
gtest backend "$b/bin/zplan_cuda_backend_test"
# The wgmma attention kernels that are not a default (any check of theirs still disabled included), run by
# name, then the attention kernels' timings (bench/gpu/attention_bench.cpp; the wgmma ones in their own
# process, so that a faulting kernel cannot take the default's figures with it). Informative: the defaults'
# checks are the kernels step above.
step wgmma env CUDA_VISIBLE_DEVICES=0 timeout 150 "$b/bin/zplan_cuda_kernels_test" --gtest_also_run_disabled_tests \
  --gtest_filter='*Wgmma*'
grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED  \]|Failure" "$out/wgmma.log" | head -16
step attention_bench env CUDA_VISIBLE_DEVICES=0 timeout 90 "$b/bin/zplan_cuda_attention_bench" default old
step attention_bench_wg env CUDA_VISIBLE_DEVICES=0 timeout 90 "$b/bin/zplan_cuda_attention_bench" wg1 wg2 wg2r wg2pp wgp wg3
cat "$out/attention_bench.log" "$out/attention_bench_wg.log" | grep -v "^$" | head -40
gtest train_backend "$b/bin/zplan_cuda_train_backend_test"
if [[ $gpus -ge 2 ]]; then
  step nccl mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0 "$b/bin/zplan_cuda_nccl_test"
  grep -E "^\[  (PASSED|FAILED) |Failure" "$out/nccl.log" | head -12
fi
if [[ -d .gpu-plans ]]; then
  step models tests/cuda/check_models.sh "$b/bin/zrun" .gpu-plans
  cat "$out/models.log"
fi
if [[ -d .gpu-train ]] && wanted train && left $((budget - 200)); then
  step train env ZPLAN_TRAIN_ONLY='*-z0-w1' tests/cuda/train_gpu.sh
  grep -E "ok|FAIL|rc=" "$out/train.log" | grep -v "^build" | head -40
fi
if [[ -d .gpu-nvme ]] && wanted nvme && left $((budget - 180)); then
  step nvme tests/cuda/nvme_bench.sh --dirs ""
  grep -iE "ok|fail|bytes|error" "$out/nvme.log" | head -30
fi
# Generation plans in .gpu-gen (tests/cuda/make_generate_plans.sh): each llama-1b-b<B>.zplan once, a 512-token
# prompt and 256 new tokens (zrun's own figures); llama2-7b-offload-b64.zplan (ZeRO-Inference: the weights in
# pinned host memory, streamed layer by layer each decode step) with 32 new tokens, next to the pinned
# host-to-device rate measured here, which sets its floor (the plan's report gives the bytes per step).
# The pinned host-to-device copy rate (1 GiB, the median of 10 after 3 warm-ups), measured once per call: it
# sets the floor of every plan that streams its weights from host memory (the generation offload plan, the
# --offload-param cpu plans of the manifest).
h2d_gbps=
h2d() {
  [[ -n $h2d_gbps ]] && return 0
  step h2d python3 - <<'PY'
import json, torch
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8).pin_memory()
d = torch.empty(n, dtype=torch.uint8, device="cuda")
for _ in range(3):
    d.copy_(a, non_blocking=True)
torch.cuda.synchronize()
times = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); d.copy_(a, non_blocking=True); e.record(); e.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
times.sort()
print(json.dumps({"pinned_h2d_GBps": round(n / times[5] / 1e9, 2)}))
PY
  cat "$out/h2d.log"
  h2d_gbps=$(grep -o '"pinned_h2d_GBps": [0-9.]*' "$out/h2d.log" | grep -o '[0-9.]*$')
}
if [[ -d .gpu-gen ]] && wanted gen && left $((budget - 200)); then
  # Greedy tokens against Hugging Face's (tests/cuda/generate_gpu.sh: gpt2 and llama, tp 1, and tp 2 on two GPUs).
  if [[ -d .gpu-gen/check ]]; then
    step greedy tests/cuda/generate_gpu.sh "$b/bin/zrun"
    grep -E "greedy tokens|failed|skipped" "$out/greedy.log"
  fi
  h2d
  for plan in .gpu-gen/*.zplan; do
    name=$(basename "$plan" .zplan)
    bs=${name##*-b}
    new=256
    [[ $name == *offload* ]] && new=32
    left $((budget - 120)) || { echo "$name: skipped (call budget)"; continue; }
    python3 -c "import numpy as np; np.save('$out/prompt-$name.npy', np.random.default_rng(0).integers(3, 32000, size=($bs, 512), dtype=np.int64))"
    # A plan of tp N (-tpN- in its name) runs as N ranks under mpirun, one GPU each, where the machine has them.
    np=1
    [[ $name =~ -tp([0-9]+)- ]] && np=${BASH_REMATCH[1]}
    [[ $np -gt $gpus ]] && { echo "$name: skipped ($gpus GPU)"; continue; }
    launch=(env CUDA_VISIBLE_DEVICES=0)
    [[ $np -gt 1 ]] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE=0)
    step "gen-$name" timeout $((budget - SECONDS - 30)) "${launch[@]}" "$b/bin/zrun" "$plan" --backend cuda \
      --init random --generate --warmup 1 --prompt "$out/prompt-$name.npy" --max-new-tokens $new \
      --tokens-out "$out/tokens-$name.npy" < /dev/null
    echo "$name:"; grep -iE "first token|tokens/s|error" "$out/gen-$name.log" | head -4
  done
fi
if [[ $gpus -ge 2 && -f .gpu-plans/gpt2-fp32-tp2.zplan ]] && wanted torchrun && left $((budget - 150)); then
  step torchrun tests/cuda/torchrun_nccl.sh "$b/bin/zrun" .gpu-plans/gpt2-fp32-tp2.zplan "$out/torchrun"
  tail -3 "$out/torchrun.log"
fi
if [[ $table == 1 && -f .gpu-plans/manifest.txt ]] && left $((budget - 120)); then
  # Offload plans in the manifest (bench/gpu/make_overlap_plans.sh notes their bytes per run): the rate their
  # floor divides by, measured in this call.
  [[ -s .gpu-plans/host-copies.txt ]] && h2d
  step memory timeout $((budget - SECONDS - 100)) tests/cuda/plan_memory.sh "$b/bin/zrun" .gpu-plans/manifest.txt "$out/mem"
  grep -E '^\{|FAIL|skip' "$out/memory.log"
  if [[ -s .gpu-plans/host-copies.txt && -n $h2d_gbps ]]; then
    # Each offload plan's median against its floor: the bytes it moves at the pinned rate just measured.
    python3 - "$h2d_gbps" .gpu-plans/host-copies.txt "$out/memory.log" <<'PY'
import json, sys
rate = float(sys.argv[1]) * 1e9
medians = {}
for line in open(sys.argv[3], errors="replace"):
    if line.startswith("{"):
        row = json.loads(line)
        medians[row["plan"]] = row["median_ms"]
for line in open(sys.argv[2]):
    name, moved = line.split()
    floor_ms = int(moved) / rate * 1e3
    med = medians.get(name)
    print(json.dumps({"plan": name, "host_to_device_bytes": int(moved), "pinned_h2d_GBps": rate / 1e9,
                      "floor_ms": round(floor_ms, 2), "median_ms": med,
                      "over_floor": round(med / floor_ms, 3) if med else None}))
PY
  fi
fi
# NCCL's channel count against the overlap (timing only: the plans' NCCL bytes assume 32 channels, so the
# memory check of these runs fails by design): fewer channels leave more SMs to the compute that the
# gathers and all-reduces overlap.
if [[ $table == 1 && $gpus -ge 2 ]] && wanted sweep && left $((budget - 150)); then
  grep -E "^llama-1b-(zero3|tp2-chunks2) " .gpu-plans/manifest.txt > .gpu-plans/manifest-sweep.txt
  for ctas in 8 16; do
    left $((budget - 130)) || break
    step sweep$ctas env ZRT_NCCL_CTAS=$ctas tests/cuda/plan_memory.sh "$b/bin/zrun" .gpu-plans/manifest-sweep.txt "$out/sweep$ctas"
    echo "ZRT_NCCL_CTAS=$ctas:"; grep -E '^\{' "$out/sweep$ctas.log"
  done
fi
# The NCCL fault path on two GPUs (tests/cuda/nccl_fault.sh): rank 1 killed, then stopped, in the middle of
# gpt2-350m tp 2's collectives; rank 0 must exit within ZRT_NCCL_TIMEOUT_S + 10 s naming rank 1.
if [[ $gpus -ge 2 && -f .gpu-plans/gpt2-350m-tp2.zplan ]] && wanted fault; then
  for mode in kill stall; do
    left $((budget - 150)) || { echo "fault-$mode: skipped (call budget)"; continue; }
    ZRT_NCCL_TIMEOUT_S=15 step fault-$mode tests/cuda/nccl_fault.sh "$b/bin/zrun" .gpu-plans/gpt2-350m-tp2.zplan $mode \
      "$out/fault"
    tail -3 "$out/fault-$mode.log"
  done
fi
if [[ $table == 1 ]] && left $((budget - 90)); then
  step torch env CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 timeout $((budget - SECONDS - 20)) python3 \
    bench/gpu/torch_baseline.py --models ${ZPLAN_TORCH_MODELS:-gpt2-350m llama-1b} --batch-of llama2-7b=4 \
    --json "$out/torch.json"
  grep '^{' "$out/torch.log"
fi
if [[ $table == 1 && $gpus -ge 2 ]] && left $((budget - 90)); then
  step torch2 env PYTHONUNBUFFERED=1 timeout $((budget - SECONDS - 10)) torchrun --nproc-per-node 2 \
    bench/gpu/torch_baseline.py --tp-peers --json "$out/torch2.json"
  grep '^{' "$out/torch2.log"
fi
printf '%s\n' "${summary[@]}"
