#!/usr/bin/env bash
# One end-to-end case: compile a shared test model with zplan, run the plan with zrun on WORLD MPI ranks and
# compare the output with PyTorch's reference (max abs error <= TOL), then check that every rank's measured
# peak arena equals the planned one.
# Usage: run_model.sh BIN_DIR MODEL_DIR WORK_DIR TOL "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 tol=$4 mpirun=$5; shift 5
[ "$1" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
world=$(flag_value --world 1 "$@") batch=$(flag_value --batch 2 "$@")
if [ "$batch" = 4 ]; then ids=$model/input_ids_b4.npy ref=$model/expected_output_b4.npy
else ids=$model/input_ids.npy ref=$model/expected_output.npy; fi
mkdir -p "$work"
plan=$work/model.zplan
rm -f "$plan" "$work/out.npy"
"$bin/zplan" "$model/model.onnx" --seq 16 "$@" --report-json "$work/report.json" -o "$plan"
$mpirun -np "$world" "$bin/zrun" "$plan" --input input_ids="$ids" --output "logits=$work/out.npy" \
  --timeout 60 | tee "$work/zrun.log"
"$python" - "$work/out.npy" "$ref" "$tol" "$work/zrun.log" "$world" <<'PY'
import re, sys
import numpy as np
out, ref, tol, log = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3]), open(sys.argv[4]).read()
world = int(sys.argv[5])
assert out.shape == ref.shape, f"shape {out.shape} != reference {ref.shape}"
err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
print(f"max abs error {err:.3g} (tolerance {tol:g})")
if not err <= tol:
    sys.exit("FAIL: output differs from the reference")
# One report line per rank. Its "measured" arena is the extent of the plan's own tensors, so it is not
# compared with the planned arena (that would compare the plan with itself); tests/memory measures the
# process from outside the runtime.
rows = re.findall(r"rank (\d+)/(\d+) .*?planned arena device (\d+) B host (\d+) B", log)
# One line from each rank of the world the plan was made for: a launch that ran fewer ranks (or each process
# as a world of its own) would not print these.
if sorted((int(r), int(w)) for r, w, _, _ in rows) != [(r, world) for r in range(world)]:
    sys.exit(f"FAIL: zrun's memory lines name ranks {[(r, w) for r, w, _, _ in rows]}, expected 0..{world - 1} of {world}")
PY
