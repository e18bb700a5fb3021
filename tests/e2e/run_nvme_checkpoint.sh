#!/usr/bin/env bash
# Checkpoints of a plan whose parameters and optimizer state live on NVMe (docs/nvme.md): 4 training steps
# straight; 2 steps, a save, and 2 more resumed from it under the same plan (the state read back from the
# checkpoint is written into the NVMe files); and the same checkpoint resumed under a plan without offload at
# ZeRO 1 (resharded). The resumed losses and gradient norms equal the straight run's within 1e-6. ZPLAN_FLAGS
# (e.g. --dtype bf16: fp32 master parts and moments in the files, bf16 parameter shards) go to both plans.
# Usage: run_nvme_checkpoint.sh BIN_DIR MODEL_DIR WORK_DIR "MPIRUN..." [-- ZPLAN_FLAGS...]
set -euo pipefail
bin=$1 model=$2 work=$3 mpirun=$4; shift 4
[ "${1:-}" = "--" ] && shift
source "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work/disk"
flags=(--train --seq 16 --clip-grad 1.0 --world 2 --batch 2 --restore-zero-biases "$@")
"$bin/zplan" "$model/model.onnx" "${flags[@]}" --zero 3 --offload-param nvme --offload-optimizer nvme \
  --nvme-path "$work/disk" -o "$work/nvme.zplan" > /dev/null
"$bin/zplan" "$model/model.onnx" "${flags[@]}" --zero 1 -o "$work/plain.zplan" > /dev/null
run() { $mpirun -np 2 "$bin/zrun" "$1" --train --data "$model/input_ids.npy" --timeout 120 "${@:2}"; }
run "$work/nvme.zplan" --steps 4 --losses-out "$work/straight.npy" --grad-norms-out "$work/straight-norms.npy" \
  > "$work/straight.log"
run "$work/nvme.zplan" --steps 2 --save-dir "$work/ck" --save-every 2 > "$work/save.log"
run "$work/nvme.zplan" --steps 4 --resume "$work/ck" --losses-out "$work/resumed.npy" \
  --grad-norms-out "$work/resumed-norms.npy" > "$work/resumed.log"
run "$work/plain.zplan" --steps 4 --resume "$work/ck" --losses-out "$work/resharded.npy" \
  --grad-norms-out "$work/resharded-norms.npy" > "$work/resharded.log"
grep -h "resumed from" "$work/resumed.log" "$work/resharded.log"
"$python" - "$work" <<'PY'
import sys
import numpy as np
work = sys.argv[1]
for what, suffix in (("losses", ""), ("gradient norms", "-norms")):
    straight = np.load(f"{work}/straight{suffix}.npy")
    for name in ("resumed", "resharded"):
        got = np.load(f"{work}/{name}{suffix}.npy")
        diff = float(np.abs(got[-2:] - straight[2:]).max())
        print(f"{name}: {what} of steps 3-4 {got[-2:]} vs straight {straight[2:]}: max difference {diff:.3g}")
        if not diff <= 1e-6:
            sys.exit(f"FAIL: the {name} run's {what} differ from the straight run's")
PY
