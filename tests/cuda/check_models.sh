#!/usr/bin/env bash
# Runs the shared test models' plans on the cuda backend and compares with PyTorch's outputs:
#   tests/cuda/check_models.sh ZRUN PLANDIR
# PLANDIR holds <model>-fp32.zplan and <model>-bf16.zplan, compiled here by
#   zplan tests/models/<m>/model.onnx --batch 2 --seq 16 --tp 1 --target cuda --dtype fp32|bf16 -o PLANDIR/...
# and, where the node has 2 GPUs, <model>-<dtype>-tp2.zplan (--tp 2) and <model>-<dtype>-zero3.zplan
# (--world 2 --zero 3), run under mpirun -np 2 (bench/gpu/make_plans.sh makes them all).
# (weights are referenced relative to the plan, so PLANDIR must sit at the repository root).
# fp32 must be within 1e-4 (max abs) of expected_output.npy, bf16 within 2e-2 relative (||a - b|| / ||b||).
set -uo pipefail
zrun=$1 plans=$2
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
variants=("")
[[ ${gpus:-0} -ge 2 ]] && variants+=(-tp2 -zero3)
for v in "${variants[@]}"; do
for m in gpt2 llama bert; do
  [[ -n $v && $m == bert ]] && continue
  for dt in fp32 bf16; do
    p=$plans/$m-$dt$v.zplan
    [[ -f $p ]] || { echo "check_models: $p missing"; fail=1; continue; }
    out=$(mktemp --suffix=.npy)
    name=logits
    launch=()
    [[ -n $v ]] && launch=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE=0)
    if ! "${launch[@]}" "$zrun" "$p" --backend cuda --input input_ids="$top/tests/models/$m/input_ids.npy" --output "$name=$out" \
         > "$out.log" 2>&1; then
      echo "FAIL $m $dt$v: zrun failed:"; tail -5 "$out.log"; fail=1; continue
    fi
    python3 - "$out" "$top/tests/models/$m/expected_output.npy" "$m" "$dt$v" <<'PY' || fail=1
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
ok = np.isfinite(a).all() and (mx <= 1e-4 if dt.startswith("fp32") else rel <= 2e-2)
print(f"{'ok  ' if ok else 'FAIL'} {m} {dt}: max abs {mx:.3g}, relative {rel:.3g}")
sys.exit(0 if ok else 1)
PY
  done
done
done
exit $fail
