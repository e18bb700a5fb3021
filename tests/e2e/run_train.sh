#!/usr/bin/env bash
# One end-to-end training case: compile a shared test model with `zplan --train`, train it for 5 steps with
# `zrun --train` on WORLD MPI ranks, and compare every step's loss and global gradient norm with PyTorch's
# (tests/models/<model>/train_losses.npy, train_grad_norms.npy: lr 1e-3, AdamW, clipping at 1.0; the recipe
# is in ../shared/models/README.md) within a relative tolerance. Every training plan also passes the plan
# checker.
# With REF_WORK_DIR the losses and norms are compared with that earlier case's instead (accumulation: two
# micro-batches of one sample against one batch of two).
# Usage: run_train.sh BIN_DIR MODEL_DIR WORK_DIR RTOL "MPIRUN..." [REF_WORK_DIR] -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 rtol=$4 mpirun=$5; shift 5
refwork=""
if [ "$1" != "--" ]; then refwork=$1; shift; fi
[ "$1" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
world=$(flag_value --world 1 "$@") batch=$(flag_value --batch 2 "$@") micro=$(flag_value --micro-batches 1 "$@")
# A global batch of 4 is the two samples twice (input_ids_b4.npy): the same mean loss and gradients.
if [ "$batch" = 4 ]; then ids=$model/input_ids_b4.npy; else ids=$model/input_ids.npy; fi
mkdir -p "$work"
plan=$work/train.zplan
rm -f "$plan" "$work/losses.npy" "$work/norms.npy"
"$bin/zplan" "$model/model.onnx" --train --seq 16 --clip-grad 1.0 "$@" -o "$plan"
check_plan "$plan"
$mpirun -np "$world" "$bin/zrun" "$plan" --train --data "$ids" --steps 5 --micro-batches "$micro" \
  --losses-out "$work/losses.npy" --grad-norms-out "$work/norms.npy" --timeout 120 | tee "$work/zrun.log"
"$python" - "$work" "$model" "$rtol" "$refwork" <<'PY'
import sys
import numpy as np
work, model, rtol, refwork = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
for got, ref, what in (("losses.npy", "train_losses.npy", "loss"), ("norms.npy", "train_grad_norms.npy", "gradient norm")):
    g = np.load(f"{work}/{got}")
    r = np.load(f"{refwork}/{got}") if refwork else np.load(f"{model}/{ref}")
    assert g.dtype == np.float64 and g.shape == r.shape, f"{got}: {g.dtype} {g.shape}, expected float64 {r.shape}"
    rel = np.abs(g - r) / np.abs(r)
    print(f"{what}: zplan {np.array2string(g, precision=6)}  reference {np.array2string(r, precision=6)}  "
          f"max relative difference {rel.max():.3g} (tolerance {rtol:g}{', against ' + refwork if refwork else ''})")
    if not rel.max() <= rtol:
        sys.exit(f"FAIL: the {what} differs from PyTorch's")
PY
