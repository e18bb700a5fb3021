#!/usr/bin/env bash
# One end-to-end generation case: compile a shared test model with `zplan --generate --max-seq 40 --batch 2`
# and the given mesh flags, check the plan, run greedy generation of 24 new tokens with `zrun --generate` on
# WORLD MPI ranks, and require the tokens to equal tests/models/<model>/expected_generate.npy exactly (greedy:
# Hugging Face generate's for gpt2 and llama, onnxruntime's full recompute of the graph for the other
# families; tests/models/README.md).
# Usage: run_generate.sh BIN_DIR MODEL_DIR WORK_DIR "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 mpirun=$4; shift 4
[ "$1" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
world=$(flag_value --world 1 "$@")
mkdir -p "$work"
plan=$work/generate.zplan
rm -f "$plan" "$work/tokens.npy"
"$bin/zplan" "$model/model.onnx" --generate --max-seq 40 --batch 2 "$@" -o "$plan"
check_plan "$plan" >/dev/null
$mpirun -np "$world" "$bin/zrun" "$plan" --generate --prompt "$model/input_ids.npy" --max-new-tokens 24 \
  --tokens-out "$work/tokens.npy" --timeout 120 | tee "$work/zrun.log"
"$python" - "$work/tokens.npy" "$model/expected_generate.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.dtype == np.int64 and got.shape == want.shape, f"tokens {got.dtype} {got.shape}, expected int64 {want.shape}"
diff = np.argwhere(got != want)
if len(diff):
    b, t = diff[0]
    sys.exit(f"token [{b}, {t}] is {got[b, t]}, the reference gives {want[b, t]}\n{got}\n{want}")
print(f"greedy tokens equal the reference ({sys.argv[2]}): {got.shape[0]} x {got.shape[1]}")
PY
