#!/usr/bin/env bash
# NVMe offload end to end (docs/nvme.md): one case of run_model.sh (inference against PyTorch's logits) or of
# run_train.sh (5 training steps against PyTorch's losses and gradient norms, and the plan checker's ordering
# proof) with the NVMe files in a fresh temporary folder, then the traffic the runtime's I/O layer counted on
# every rank against the plan report's per-run / per-step figures, and no transfer the plan's events left
# unordered.
# train-vs-cpu does what train does, then trains the same plan with the optimizer in host memory instead
# (--offload-optimizer cpu, and --offload-param none for nvme: a training step does not offload parameters
# to host memory) and requires the same losses and gradient norms exactly: the files only hold the bytes
# that host memory would, and the host update and the 16-bit narrowing of the master parts run the same
# kernels in both plans.
# Usage: run_nvme.sh infer|train|train-vs-cpu BIN_DIR MODEL_DIR WORK_DIR TOL "MPIRUN..." -- ZPLAN_FLAGS...
set -euo pipefail
mode=$1 bin=$2 model=$3 work=$4 tol=$5 mpirun=$6; shift 6
[ "$1" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
if [ "$mode" = train-vs-cpu ]; then
  "$0" train "$bin" "$model" "$work" "$tol" "$mpirun" -- "$@"
  cpu=() prev=""
  for a in "$@"; do
    case "$prev:$a" in --offload-optimizer:nvme) a=cpu ;; --offload-param:nvme) a=none ;; esac
    cpu+=("$a") prev=$a
  done
  echo "against the host-memory plan: ${cpu[*]}"
  exec "$here/run_train.sh" "$bin" "$model" "$work/cpu" 0 "$mpirun" "$work" -- "${cpu[@]}"
fi
mkdir -p "$work"
disk=$(mktemp -d "$work/nvme.XXXXXX")
trap 'rm -rf "$disk"' EXIT
if [ "$mode" = infer ]; then
  "$here/run_model.sh" "$bin" "$model" "$work" "$tol" "$mpirun" -- "$@" --nvme-path "$disk"
else
  "$here/run_train.sh" "$bin" "$model" "$work" "$tol" "$mpirun" -- "$@" --nvme-path "$disk" \
    --report-json "$work/report.json"
fi
"$python" - "$mode" "$work/report.json" "$work/zrun.log" "$disk" <<'PY'
import json, os, re, sys
mode, report, log, disk = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).read(), sys.argv[4]
n = report["nvme"]
if not n:
    sys.exit("FAIL: the report has no NVMe figures")
what = "run" if mode == "infer" else "step"
rows = re.findall(r"zrun: rank (\d+) nvme: file (\S+) \((\d+) B, (\w+) I/O\); before the first \w+ read (\d+) B "
                  r"written (\d+) B; per " + what + r" read (\d+) B written (\d+) B \((\d+) \w+s\); unplanned waits (\d+)",
                  log)
world = report["world"]
if len(rows) != world:
    sys.exit(f"FAIL: {len(rows)} ranks printed equal per-{what} NVMe traffic, expected {world}:\n{log}")
for rank, path, size, io, _, _, read, written, count, unplanned in rows:
    print(f"rank {rank}: {io} I/O, file {size} B (planned {n['file_bytes']}), per {what} read {read} B written "
          f"{written} B (report: {n['step_read_bytes']} / {n['step_write_bytes']} for {n['step']}), unplanned waits {unplanned}")
    if int(size) != n["file_bytes"]:
        sys.exit("FAIL: the file size differs from the plan's")
    if (int(read), int(written)) != (n["step_read_bytes"], n["step_write_bytes"]):
        sys.exit(f"FAIL: rank {rank} moved other bytes per {what} than the report says")
    if int(unplanned):
        sys.exit(f"FAIL: rank {rank} waited for NVMe transfers that no plan event ordered")
    if os.path.dirname(path) != disk.rstrip("/"):
        sys.exit(f"FAIL: the file {path} is not under {disk}")
if n["step_read_bytes"] == 0:
    sys.exit("FAIL: nothing is read from NVMe per " + what)
# The report's time floor is docs/nvme.md's (read + written) / --nvme-bandwidth.
floor = (n["step_read_bytes"] + n["step_write_bytes"]) / n["bandwidth_bytes_per_second"]
print(f"time floor per {what}: report {n['step_floor_seconds']:.9g} s, (read + written) / bandwidth {floor:.9g} s")
if not abs(n["step_floor_seconds"] - floor) <= 1e-9 * floor:
    sys.exit("FAIL: the report's time floor is not (read + written) / bandwidth")
# Direct I/O wherever the file system takes it (asked here by opening a file of that folder with O_DIRECT).
probe = os.path.join(disk, "o_direct_probe")
try:
    os.close(os.open(probe, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600))
    takes_direct = True
except OSError:
    takes_direct = False
finally:
    if os.path.exists(probe):
        os.remove(probe)
for rank, path, size, io, *_ in rows:
    if takes_direct and io != "direct":
        sys.exit(f"FAIL: rank {rank} used {io} I/O in a folder that takes O_DIRECT")
print(f"I/O: {rows[0][3]} (the folder {'takes' if takes_direct else 'refuses'} O_DIRECT)")
PY
