#!/usr/bin/env bash
# The learning-rate schedule planned into the train step (--lr-schedule warmup | warmup-decay) against the
# same training with the rate set from outside: a constant-rate plan trained one step at a time, each step
# resumed from the previous one's checkpoint with zrun --lr set to the schedule's rate for that step, from
# the formula (DeepSpeed's WarmupLR / WarmupDecayLR with a linear warmup from 0, at zplan's 1-based step k):
#   warmup:       lr x min(k / W, 1)
#   warmup-decay: lr x (k / W if k < W else max(0, (T - k) / (T - W)))
# This is what PyTorch's LambdaLR with the same factor does: the rate is set before each update. Every
# step's loss and gradient norm must agree within RTOL; the schedule must also differ from the constant rate
# (the run at the constant peak rate gives other losses).
# Usage: run_schedule.sh BIN_DIR MODEL_DIR WORK_DIR RTOL "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 rtol=$4 mpirun=$5; shift 5
[ "$1" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
world=$(flag_value --world 1 "$@") lr=$(flag_value --lr 0.001 "$@") sched=$(flag_value --lr-schedule constant "$@")
warm=$(flag_value --warmup-steps 0 "$@") total=$(flag_value --total-steps 0 "$@")
# The constant-rate plan's flags: ZPLAN_FLAGS without the schedule's.
common=() prev=""
for a in "$@"; do
  case "$a" in --lr-schedule|--warmup-steps|--total-steps) ;; *)
    case "$prev" in --lr-schedule|--warmup-steps|--total-steps) ;; *) common+=("$a") ;; esac ;;
  esac
  prev=$a
done
steps=6
rm -rf "$work" && mkdir -p "$work"
"$bin/zplan" "$model/model.onnx" --train --seq 16 --clip-grad 1.0 "$@" -o "$work/sched.zplan"
"$bin/zplan" "$model/model.onnx" --train --seq 16 --clip-grad 1.0 "${common[@]}" -o "$work/const.zplan"
check_plan "$work/sched.zplan"
run() { $mpirun -np "$world" "$bin/zrun" "$@" --train --data "$model/input_ids.npy" --timeout 120; }
run "$work/sched.zplan" --steps $steps --losses-out "$work/sched-losses.npy" --grad-norms-out "$work/sched-norms.npy" \
  | tee "$work/sched.log"
run "$work/const.zplan" --steps $steps --losses-out "$work/peak-losses.npy" --grad-norms-out "$work/peak-norms.npy" \
  > "$work/peak.log"
rates=$("$python" -c "
import sys
sched, lr, w, t = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def factor(k):
    if sched == 'warmup':
        return min(k / w, 1.0) if w > 0 else 1.0
    return k / w if k < w else max(0.0, (t - k) / (t - w))
print(' '.join(repr(lr * factor(k)) for k in range(1, $steps + 1)))
" "$sched" "$lr" "$warm" "$total")
echo "rates from the formula: $rates"
k=0
for rate in $rates; do
  k=$((k + 1))
  resume=()
  [ $k -gt 1 ] && resume=(--resume "$work/ck$((k - 1))")
  run "$work/const.zplan" --steps $k --lr "$rate" "${resume[@]}" --save-dir "$work/ck$k" --save-every 1 \
    --losses-out "$work/step$k-losses.npy" --grad-norms-out "$work/step$k-norms.npy" >> "$work/stepwise.log"
done
"$python" - "$work" "$steps" "$rtol" <<'PY'
import sys
import numpy as np
work, steps, rtol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for what in ("losses", "norms"):
    got = np.load(f"{work}/sched-{what}.npy")
    ref = np.concatenate([np.load(f"{work}/step{k}-{what}.npy") for k in range(1, steps + 1)])
    peak = np.load(f"{work}/peak-{what}.npy")
    assert got.shape == ref.shape == (steps,), (got.shape, ref.shape)
    rel = np.abs(got - ref) / np.abs(ref)
    print(f"{what}: scheduled {np.array2string(got, precision=6)}  stepwise {np.array2string(ref, precision=6)}  "
          f"max relative difference {rel.max():.3g} (tolerance {rtol:g}); constant peak rate "
          f"{np.array2string(peak, precision=6)}")
    if not rel.max() <= rtol:
        sys.exit(f"FAIL: the scheduled plan's {what} differ from the stepwise run's")
    if what == "losses" and np.abs(got[1:] - peak[1:]).max() <= 10 * rtol * np.abs(peak).max():
        sys.exit("FAIL: the schedule changed nothing (the losses equal the constant rate's)")
PY
