#!/usr/bin/env bash
# fp16 dynamic loss scaling on several ranks, forced to overflow: the plan starts from a loss scale of 2^40,
# far beyond what the scaled fp16 gradients hold. Every rank must skip the same steps (the overflow flag is a
# max all-reduce over tp and dp): the scale halves on each skipped step, the loss of a skipped step is the
# first one's again (nothing was updated and the batch is the same), and once the scale fits, the five
# applied steps give PyTorch's five losses within 2e-2. Reads zrun's per-step lines (loss, loss_scale,
# skipped_steps).
# Usage: run_train_overflow.sh BIN_DIR MODEL_DIR WORK_DIR "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 mpirun=$4; shift 4
[ "$1" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
world=$(flag_value --world 1 "$@")
mkdir -p "$work"
plan=$work/train.zplan
rm -f "$plan" "$work/losses.npy"
"$bin/zplan" "$model/model.onnx" --train --seq 16 --batch 2 --clip-grad 1.0 --dtype fp16 \
  --initial-loss-scale 1099511627776 "$@" -o "$plan"
$mpirun -np "$world" "$bin/zrun" "$plan" --train --data "$model/input_ids.npy" --steps 30 \
  --losses-out "$work/losses.npy" --timeout 300 | tee "$work/zrun.log"
"$python" - "$work" "$model" <<'PY'
import re, sys
import numpy as np
work, model = sys.argv[1], sys.argv[2]
steps = [(float(m[0]), float(m[1]), int(float(m[2]))) for m in
         re.findall(r"step \d+ loss (\S+) grad_norm \S+ loss_scale (\S+) skipped_steps (\S+)", open(f"{work}/zrun.log").read())]
losses = np.load(f"{work}/losses.npy")
ref = np.load(f"{model}/train_losses.npy")
assert len(steps) == 30 == len(losses), f"{len(steps)} step lines, {len(losses)} losses"
skipped = steps[-1][2]
print(f"skipped {skipped} steps; scale after the last skip {steps[skipped - 1][1]:g}")
assert skipped >= 20, "the scale 2^40 must overflow for more than 20 steps"
scale = 2.0 ** 40
for k, (loss, after, count) in enumerate(steps):
    if k < skipped:
        scale /= 2
        assert count == k + 1 and after == scale, f"step {k + 1}: skipped_steps {count}, loss_scale {after}"
        assert losses[k] == losses[0], f"step {k + 1}: the loss of a skipped step changed ({losses[k]} != {losses[0]})"
    else:
        assert count == skipped and after == scale, f"step {k + 1}: skipped_steps {count}, loss_scale {after}"
applied = losses[skipped:skipped + 5]
assert len(applied) == 5, f"only {len(applied)} applied steps"
rel = np.abs(applied - ref) / ref
print(f"applied losses {np.array2string(applied, precision=6)}  PyTorch {np.array2string(ref, precision=6)}  "
      f"max relative difference {rel.max():.3g} (tolerance 0.02)")
if not rel.max() <= 2e-2:
    sys.exit("FAIL: the losses after the skipped steps differ from PyTorch's")
PY
