#!/usr/bin/env bash
# A cuda plan on 2 GPUs under torchrun (no MPI: the TCP communicator carries NCCL's unique ids and the control
# plane) gives the same output as under mpirun (NCCL's ids over MPI):
#   tests/cuda/torchrun_nccl.sh ZRUN PLAN [OUTDIR]
# PLAN is a world-2 cuda plan (e.g. zplan tests/models/gpt2/model.onnx --tp 2 --world 2 --batch 2 --seq 16
# --target cuda); both runs take the same random weights and inputs (--init random --random-inputs, one seed)
# and write the output OUTPUT (default logits). Exits 77 with fewer than 2 GPUs, without the plan or torch.
set -uo pipefail
zrun=$1 plan=$2 out=${3:-/tmp/zplan-torchrun}
name=${OUTPUT:-logits}
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ ${gpus:-0} -ge 2 ]] || { echo "SKIPPED: $gpus GPU(s), this test needs 2"; exit 77; }
[[ -f $plan ]] || { echo "SKIPPED: no plan $plan (compile a world-2 --target cuda plan there)"; exit 77; }
python3 -c "import torch.distributed.run" 2>/dev/null || { echo "SKIPPED: no torch (torchrun) here"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ZRT_CHECK_COLLECTIVES=1
args=(--backend cuda --init random --seed 7 --random-inputs --timeout 120)
mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x ZRT_CHECK_COLLECTIVES \
  "$zrun" "$plan" "${args[@]}" --output "$name=$out/mpirun.npy" > "$out/mpirun.log" 2>&1 ||
  { echo "FAIL: the mpirun run failed"; tail -20 "$out/mpirun.log"; exit 1; }
python3 -m torch.distributed.run --nproc-per-node 2 --no-python \
  "$zrun" "$plan" "${args[@]}" --output "$name=$out/torchrun.npy" > "$out/torchrun.log" 2>&1 ||
  { echo "FAIL: the torchrun run failed"; tail -20 "$out/torchrun.log"; exit 1; }
grep -m2 "planned arena" "$out/torchrun.log"
python3 - "$out/mpirun.npy" "$out/torchrun.npy" <<'PY'
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, f"shapes differ: mpirun {a.shape}, torchrun {b.shape}"
err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
print(f"torchrun vs mpirun: {a.shape} {a.dtype}, max abs difference {err:.3g} (limit 1e-5)")
sys.exit(0 if err <= 1e-5 and np.isfinite(b).all() else "FAIL: the outputs differ")
PY
