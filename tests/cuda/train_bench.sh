#!/usr/bin/env bash
# Training on the GPU machine, one device call: the loss checks (tests/cuda/train_gpu.sh: fp32 and bf16,
# one GPU, and ZeRO 1-3 over dp 2 when there are two), then the benchmark plans of .gpu-train/bench
# (tests/cuda/make_train_plans.sh) with zrun and the PyTorch peers (bench/gpu/torch_train.py) side by side:
# steady tokens/s and the process peak (zrun: planned and measured by cudaMemGetInfo; PyTorch: the process's
# device use at the end, the allocator's cache included).
#   bash tests/cuda/train_bench.sh [--no-check] [--no-torch] [--families] [--worlds "1 2"] [--profile] [--kernels]
#                                  [--plans "NAME ..."] [--modes "eager compile"]
# --kernels: the CUDA kernel tests against the CPU reference kernels (zplan_cuda_kernels_test,
# zplan_cuda_train_kernels_test, with the attention timings). --plans: only these benchmark plans.
# --profile: the one-GPU plans once more without graph replay, timed per step by CUDA events
# (ZRT_CUDA_PROFILE): where the step's time goes, by op.
# Carry .gpu-deps (scripts/gpu-deps.sh) and .gpu-train. --families also exports tests/models/export_families.py
# into $OUT/families. Logs go to $OUT/train-bench.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$top"
check=1 torch=1 families=0 worlds="1 2" profile=0 kernels=0 plans= modes="eager compile"
while [[ $# -gt 0 ]]; do
  case $1 in --no-check) check=0 ;; --no-torch) torch=0 ;; --families) families=1 ;; --profile) profile=1 ;; --kernels) kernels=1 ;; --plans) plans=$2; shift ;; --modes) modes=$2; shift ;; --worlds) worlds=$2; shift ;; esac
  shift
done
logs_to /tmp/train-bench train-bench.tgz
gpu_env
ngpu=$(nvidia-smi -L | wc -l)
if [[ $families == 1 && -n ${OUT:-} ]]; then
  # CPU work, in the background while the GPU runs.
  (CUDA_VISIBLE_DEVICES= timeout 300 python3 tests/models/export_families.py /tmp/families > "$out/families.log" 2>&1
   tar czf "$OUT/families.tgz" -C /tmp families) &
fi
if [[ $check == 1 ]]; then
  bash tests/cuda/train_gpu.sh 2>&1 | tee "$out/check.log" | grep -E "build:|ok|FAIL|rc=|skipped"
else
  # train_gpu.sh builds zrun; without it, build here.
  gpu_build --no-tests zrun
fi
zrun=$b/bin/zrun
[[ -x $zrun ]] || { echo "no zrun"; exit 1; }
if [[ $kernels == 1 ]]; then
  cmake -S . -B "$b" -DZPLAN_BUILD_TESTS=ON > "$out/cfg-tests.log" 2>&1 &&
    ninja -C "$b" -j"$(nproc)" zplan_cuda_kernels_test zplan_cuda_train_kernels_test > "$out/build-tests.log" 2>&1 ||
    { grep -B2 -A12 -E "error|FAILED" "$out/build-tests.log" | head -40; }
  for t in zplan_cuda_kernels_test zplan_cuda_train_kernels_test; do
    CUDA_VISIBLE_DEVICES=0 timeout 180 "$b/bin/$t" > "$out/$t.log" 2>&1
    echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.log" | tr '\n' ' ')"
    grep -E "Failure|FAILED  \]|attention .*ms" "$out/$t.log" | head -20
  done
fi
python3 -c "import numpy as np; r=np.random.default_rng(1)
np.save('$out/tokens-gpt2-350m.npy', r.integers(0, 50257, (64, 1024), dtype=np.int64))
np.save('$out/tokens-llama-1b.npy', r.integers(0, 32000, (64, 1024), dtype=np.int64))"
while read -r name world; do
  [[ $world -gt $ngpu || " $worlds " != *" $world "* ]] && continue
  [[ -n $plans && " $plans " != *" $name "* ]] && continue
  [[ $name == gpt2-350m* ]] && model=gpt2-350m || model=llama-1b
  # CUDA graph replay first; without it only when the capture fails.
  for graph in 1 0; do
    cmd=("$zrun" .gpu-train/bench/$name.zplan --backend cuda --init random --train --data "$out/tokens-$model.npy"
         --steps 8 --timeout 200)
    [[ $graph == 1 ]] && cmd+=(--cuda-graph)
    [[ $world -gt 1 ]] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$world" -x NCCL_NVLS_ENABLE=0 "${cmd[@]}")
    t0=$SECONDS
    timeout 240 "${cmd[@]}" < /dev/null > "$out/$name-g$graph.log" 2>&1
    rc=$?
    python3 - "$out/$name-g$graph.log" "$name" "$graph" "$rc" "$((SECONDS - t0))" <<'PY'
import json, re, sys
log, name, graph, rc, secs = sys.argv[1:6]
t = open(log).read()
r = dict(peer="zplan", plan=name, cuda_graph=graph == "1", rc=int(rc), wall_s=int(secs))
m = re.search(r"steady step \(median of steps 2-\d+\): ([0-9.]+) ms, ([0-9]+) tokens/s", t)
if m: r.update(median_ms=float(m.group(1)), tokens_per_s=int(m.group(2)))
peaks = re.findall(r"planned process peak (\d+) B; measured process peak (\d+) B", t)
if peaks:
    p, q = max(int(a) for a, _ in peaks), max(int(b) for _, b in peaks)
    r.update(planned_gib=round(p / 2**30, 3), measured_gib=round(q / 2**30, 3), measured_vs_planned=round(q / p - 1, 4))
losses = re.findall(r"step (\d+) loss ([-0-9.naife]+)", t)
if losses: r["losses"] = [float(l) for _, l in losses]
if int(rc) != 0: r["tail"] = t[-600:]
print(json.dumps(r), flush=True)
PY
    [[ $rc == 0 ]] && break
  done
done < .gpu-train/bench/manifest.txt
if [[ $profile == 1 ]]; then
  while read -r name world; do
    [[ $world -gt 1 ]] && continue
    [[ $name == gpt2-350m* ]] && model=gpt2-350m || model=llama-1b
    ZRT_CUDA_PROFILE=1 ZRT_CUDA_PROFILE_TOP=16 timeout 120 "$zrun" .gpu-train/bench/$name.zplan --backend cuda --init random \
      --train --data "$out/tokens-$model.npy" --steps 4 < /dev/null > "$out/$name-profile.log" 2>&1
    echo "== $name"; grep -E "steady step|profile" "$out/$name-profile.log"
  done < .gpu-train/bench/manifest.txt
fi
if [[ $torch == 1 ]]; then
  [[ " $worlds " == *" 1 "* ]] && CUDA_VISIBLE_DEVICES=0 timeout 300 python3 bench/gpu/torch_train.py --models gpt2-350m llama-1b --modes $modes 2> "$out/torch.err" | tee "$out/torch.jsonl"
  if [[ $ngpu -ge 2 && " $worlds " == *" 2 "* ]]; then
    timeout 300 torchrun --nproc-per-node 2 bench/gpu/torch_train.py --models gpt2-350m llama-1b --dist ddp fsdp2 \
      --modes eager 2> "$out/torch2.err" | tee "$out/torch2.jsonl"
  fi
fi
wait
[[ $families == 1 ]] && tail -5 "$out/families.log"
