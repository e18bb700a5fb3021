#!/usr/bin/env bash
# Training on the GPU machine: builds zrun (compiler off), runs the fp32 training plans compiled on the CPU
# machine (.gpu-train/*.zplan, --target cuda) for 5 steps and compares every loss and gradient norm with
# PyTorch's (tests/models/<model>/train_*.npy): tp 1 on one GPU, ZeRO 1-3 over dp 2 on two GPUs (NCCL).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$top"
out=/tmp  # configure.log and build.log
nvidia-smi -L
t0=$SECONDS
gpu_build --no-tests zrun
echo "build: $((SECONDS - t0)) s"
gpu_env
ngpu=$(nvidia-smi -L | wc -l)
for p in .gpu-train/*.zplan; do
  name=$(basename "$p" .zplan); model=${name%%-*}; world=${name##*-w}
  [[ -n ${ZPLAN_TRAIN_ONLY:-} && $name != $ZPLAN_TRAIN_ONLY ]] && continue
  [[ $world -gt $ngpu ]] && { echo "$name: skipped ($ngpu GPU)"; continue; }
  o=/tmp/$name; mkdir -p "$o"
  cmd=("$b/bin/zrun" "$p" --backend cuda --train --data tests/models/$model/input_ids.npy --steps 5
       --losses-out "$o/l.npy" --grad-norms-out "$o/n.npy" --timeout 120)
  if [[ $world -gt 1 ]]; then cmd=(mpirun --allow-run-as-root --oversubscribe -np "$world" -x NCCL_NVLS_ENABLE=0 "${cmd[@]}"); fi
  t0=$SECONDS
  "${cmd[@]}" > "$o/log" 2>&1; rc=$?
  [[ $rc -ne 0 ]] && { echo "$name: zrun rc=$rc"; tail -8 "$o/log"; continue; }
  grep -iE "tokens/s|peak" "$o/log" | tail -2
  python3 - "$o" "tests/models/$model" "$name" "$((SECONDS - t0))" <<'PY'
import sys, numpy as np
o, m, name, secs = sys.argv[1:5]
for f, r, w in (("l.npy", "train_losses.npy", "loss"), ("n.npy", "train_grad_norms.npy", "norm")):
    g, ref = np.load(f"{o}/{f}"), np.load(f"{m}/{r}")
    rel = float(np.max(np.abs(g - ref) / np.abs(ref)))
    # bf16/fp16 compute: the bar of the CPU e2e cases (tests/e2e); fp32: as on CPU ranks
    tol = 2e-2 if ("-bf16-" in name or "-fp16-" in name) else 1e-4
    print(f"{name}: {w} {np.array2string(g, precision=6)} PyTorch {np.array2string(ref, precision=6)} max rel {rel:.2e} (tol {tol:g}) {'ok' if rel <= tol else 'FAIL'} ({secs} s)")
PY
done
