#!/usr/bin/env bash
# fp16 dynamic loss scaling with the parameters and the optimizer state on NVMe (docs/nvme.md), forced to
# overflow (run_train_overflow.sh: an initial scale of 2^40, so the first 20-odd steps are skipped):
# 1. The NVMe plan passes run_train_overflow.sh's checks: every rank skips the same steps, the scale halves on
#    each, a skipped step's loss is the first step's again, then five applied steps give PyTorch's losses.
# 2. The plan with the optimizer in host memory instead gives the same 30 losses exactly.
# 3. A skipped step leaves the files as they were: the NVMe plan saves a checkpoint after each of its first 3
#    (skipped) steps, and in every one the moments are zero and each parameter shard, master part and moment is
#    byte for byte what it is in the first (only the loss-scale scalars change).
# Usage: run_nvme_overflow.sh BIN_DIR MODEL_DIR WORK_DIR "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3 mpirun=$4; shift 4
[ "$1" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
world=$(flag_value --world 1 "$@")
rm -rf "$work" && mkdir -p "$work/disk"
"$here/run_train_overflow.sh" "$bin" "$model" "$work/nvme" "$mpirun" -- "$@" \
  --offload-param nvme --offload-optimizer nvme --nvme-path "$work/disk"
"$here/run_train_overflow.sh" "$bin" "$model" "$work/cpu" "$mpirun" -- "$@" --offload-optimizer cpu
$mpirun -np "$world" "$bin/zrun" "$work/nvme/train.zplan" --train --data "$model/input_ids.npy" --steps 3 \
  --save-dir "$work/ck" --save-every 1 --timeout 120 > "$work/save.log"
"$python" - "$work" "$src/runtime/schema/checkpoint.fbs" <<'PY'
import glob, json, os, subprocess, sys, tempfile
import numpy as np
work, schema = sys.argv[1], sys.argv[2]
nvme, cpu = np.load(f"{work}/nvme/losses.npy"), np.load(f"{work}/cpu/losses.npy")
print(f"losses, NVMe plan against host-memory plan: max difference {np.abs(nvme - cpu).max():.3g} (required 0)")
if not np.array_equal(nvme, cpu):
    sys.exit("FAIL: the NVMe plan's losses differ from the host-memory plan's")
SIZE = {0: 4, 1: 2, 2: 2, 3: 8, 4: 4, 5: 1}
def state(ck):
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/m.bin", "wb").write(open(f"{ck}/manifest.zckpt", "rb").read()[24:])
        subprocess.run(["flatc", "--json", "--strict-json", "--raw-binary", "-o", d, schema, "--", f"{d}/m.bin"],
                       check=True)
        m = json.load(open(f"{d}/m.json"))
    files = {f.get("rank", 0): open(f"{ck}/{f['name']}", "rb").read() for f in m["files"]}
    out = {}
    for t in m["tensors"]:
        for s in t["slices"]:
            n = (s.get("flat_end", 0) - s.get("flat_begin", 0)) * SIZE[t.get("dtype", 0)]
            off = s.get("offset", 0)
            out[(t["name"], t.get("kind"), s.get("rank", 0))] = files[s.get("rank", 0)][off:off + n]
    return out
cks = sorted(d for d in glob.glob(f"{work}/ck/step-*") if os.path.exists(f"{d}/manifest.zckpt"))
if len(cks) != 3:
    sys.exit(f"FAIL: {len(cks)} checkpoints, expected 3")
first = state(cks[0])
# Every slice read must hold bytes: a manifest field this reader no longer finds (flat_begin / flat_end,
# offset) would give empty slices, all equal and all "zero", and the checks below would compare nothing.
empty = [k for k, d in first.items() if k[1] != "scalar" and not d]
if empty or not first:
    sys.exit(f"FAIL: {len(empty)} of {len(first)} slices read as empty, e.g. {empty[:3]}")
kinds = {k[1] for k in first}
if not {"master", "moment1", "moment2"} <= kinds:
    sys.exit(f"FAIL: the checkpoint holds {sorted(kinds)}, expected master parts and moments")
for key, data in first.items():
    if key[1] in ("moment1", "moment2") and any(data):
        sys.exit(f"FAIL: {key} is not zero after a skipped step")
for ck in cks[1:]:
    other = state(ck)
    changed = [k for k in first if k[1] != "scalar" and other.get(k) != first[k]]
    if changed:
        sys.exit(f"FAIL: {os.path.basename(ck)} differs from {os.path.basename(cks[0])} in {changed[:5]}")
n = sum(1 for k in first if k[1] != "scalar")
print(f"{len(cks)} checkpoints after skipped steps: {n} parameter, master and moment slices identical, moments zero")
PY
