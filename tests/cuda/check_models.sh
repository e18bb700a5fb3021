#!/usr/bin/env bash
# Runs the shared test models' plans on the cuda backend and compares with PyTorch's outputs:
#   tests/cuda/check_models.sh ZRUN PLANDIR
# PLANDIR holds <model>-fp32.zplan and <model>-bf16.zplan, compiled here by
#   zplan tests/models/<m>/model.onnx --batch 2 --seq 16 --tp 1 --target cuda --dtype fp32|bf16 -o PLANDIR/...
# (weights are referenced relative to the plan, so PLANDIR must sit at the repository root).
# fp32 must be within 1e-4 (max abs) of expected_output.npy, bf16 within 2e-2 relative (||a - b|| / ||b||).
set -uo pipefail
zrun=$1 plans=$2
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
for m in gpt2 llama bert; do
  for dt in fp32 bf16; do
    p=$plans/$m-$dt.zplan
    [[ -f $p ]] || { echo "check_models: $p missing"; fail=1; continue; }
    out=$(mktemp --suffix=.npy)
    name=logits
    if ! "$zrun" "$p" --backend cuda --input input_ids="$top/tests/models/$m/input_ids.npy" --output "$name=$out" \
         > "$out.log" 2>&1; then
      echo "FAIL $m $dt: zrun failed:"; tail -5 "$out.log"; fail=1; continue
    fi
    python3 - "$out" "$top/tests/models/$m/expected_output.npy" "$m" "$dt" <<'PY' || fail=1
import sys
import numpy as np
a = np.load(sys.argv[1])
if a.dtype == np.uint16:  # zrun writes bf16 outputs as their raw bits ('<u2'): widen to float32
    a = (a.astype(np.uint32) << 16).view(np.float32)
a = a.astype(np.float64)
b = np.load(sys.argv[2]).astype(np.float64)
m, dt = sys.argv[3], sys.argv[4]
if a.shape != b.shape:
    print(f"FAIL {m} {dt}: shape {a.shape} vs {b.shape}"); sys.exit(1)
mx = float(np.abs(a - b).max())
rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
ok = np.isfinite(a).all() and (mx <= 1e-4 if dt == "fp32" else rel <= 2e-2)
print(f"{'ok  ' if ok else 'FAIL'} {m} {dt}: max abs {mx:.3g}, relative {rel:.3g}")
sys.exit(0 if ok else 1)
PY
  done
done
exit $fail
