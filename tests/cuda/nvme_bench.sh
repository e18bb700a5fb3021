#!/usr/bin/env bash
# NVMe read throughput on the GPU machine's disks (docs/nvme.md), in one device call (compiler off):
#   build zplan-nvme-bench (the runtime's own NvmeStore: O_DIRECT, a thread pool) -> list the block devices and
#   the file systems of the candidate folders -> measure write and read rates on each candidate folder at two
#   depths -> optionally run NVMe-offload plans compiled on the compiling machine (.gpu-nvme/*.zplan, made by
#   tests/cuda/make_nvme_plans.sh) with zrun --backend cuda against their expected outputs, and its bf16 training
#   plans (.gpu-nvme/train) for 5 steps against PyTorch's losses and gradient norms (2e-2), the bytes each rank's
#   I/O layer moved per step against the plan's report.
#
#   bash tests/cuda/nvme_bench.sh [--bytes 8G] [--dirs "/tmp /var/tmp"]
#
# FlatBuffers, CLI11 and GoogleTest come from .gpu-deps (scripts/gpu-deps.sh). Every figure is printed on stdout;
# logs travel back as $OUT/nvme-logs.tgz. Give the median read rate of the folder the files would live in to
# zplan --nvme-bandwidth.
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bytes=8G dirs="/tmp /var/tmp $top"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bytes) bytes=$2; shift ;;
    --dirs) dirs=$2; shift ;;
    *) echo "nvme_bench: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
out=/tmp/zplan-nvme
mkdir -p "$out"
trap '[[ -n ${OUT:-} ]] && tar czf "$OUT/nvme-logs.tgz" -C "$out" .' EXIT
cd "$top"
b=$top/build-gpu
cmake -S . -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
targets=(zplan-nvme-bench)
[[ -d .gpu-nvme ]] && targets+=(zrun)
ninja -C "$b" -j"$(nproc)" "${targets[@]}" > "$out/build.log" 2>&1 ||
  { grep -B2 -A12 -E "error|FAILED" "$out/build.log" | head -60; exit 1; }
echo "== block devices"
lsblk -o NAME,TYPE,ROTA,SIZE,MODEL,MOUNTPOINT 2>/dev/null | head -30
echo "== candidate folders"
for d in $dirs; do df -hT "$d" | tail -1; done
for d in $dirs; do
  for cfg in "8 4" "32 16"; do
    set -- $cfg
    echo "== $d: depth $1, threads $2"
    "$b/bin/zplan-nvme-bench" "$d" --bytes "$bytes" --block 64M --depth "$1" --threads "$2" --repeat 3 2>&1 |
      tee -a "$out/bench.log"
  done
done
if [[ -d .gpu-nvme ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for p in .gpu-nvme/*.zplan; do
    name=$(basename "$p" .zplan)
    disk=$(mktemp -d /tmp/zplan-nvme-run.XXXXXX)
    echo "== zrun $name (files under $disk)"
    "$b/bin/zrun" "$p" --backend cuda --nvme-path "$disk" --input input_ids=.gpu-nvme/input_ids.npy \
      --expect logits=.gpu-nvme/$name.expected.npy --tolerance 1e-3 --warmup 1 --repeat 5 2>&1 | tee "$out/$name.log" |
      grep -E "nvme|output|error|run "
    rm -rf "$disk"
  done
fi
if [[ -d .gpu-nvme/train ]]; then
  export NCCL_NVLS_ENABLE=0
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
  for p in .gpu-nvme/train/*.zplan; do
    name=$(basename "$p" .zplan); model=${name%%-*}; world=${name##*-w}
    [[ $world -gt $ngpu ]] && { echo "== train $name: skipped ($ngpu GPU)"; continue; }
    disk=$(mktemp -d /tmp/zplan-nvme-run.XXXXXX)
    o=$out/train-$name; mkdir -p "$o"
    echo "== train $name on $world GPU (files under $disk)"
    cmd=("$b/bin/zrun" "$p" --backend cuda --train --nvme-path "$disk" --data ".gpu-nvme/train/$model.input_ids.npy"
         --steps 5 --losses-out "$o/l.npy" --grad-norms-out "$o/n.npy" --timeout 120)
    [[ $world -gt 1 ]] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$world" -x NCCL_NVLS_ENABLE=0 "${cmd[@]}")
    "${cmd[@]}" > "$o/log" 2>&1; rc=$?
    rm -rf "$disk"
    [[ $rc -ne 0 ]] && { echo "$name: zrun rc=$rc FAIL"; grep -E "error" "$o/log" | head -5; tail -5 "$o/log"; continue; }
    python3 - "$o" ".gpu-nvme/train" "$model" "$name" <<'PY'
import json, re, sys
import numpy as np
o, d, model, name = sys.argv[1:5]
ok, parts = True, []
for f, r, w in (("l.npy", "train_losses.npy", "loss"), ("n.npy", "train_grad_norms.npy", "norm")):
    g, ref = np.load(f"{o}/{f}"), np.load(f"{d}/{model}.{r}")
    rel = float(np.max(np.abs(g - ref) / np.abs(ref)))
    ok &= rel <= 2e-2
    parts.append(f"{w} max rel {rel:.2e}")
n = json.load(open(f"{d}/{name}.report.json")).get("nvme")
rows = re.findall(r"zrun: rank (\d+) nvme: .*; per step read (\d+) B written (\d+) B \(\d+ steps\); unplanned waits (\d+)",
                  open(f"{o}/log").read())
if n:
    want = (n["step_read_bytes"], n["step_write_bytes"])
    got = sorted({(int(rd), int(wr), int(u)) for _, rd, wr, u in rows})
    ok &= bool(rows) and all((rd, wr) == want and u == 0 for rd, wr, u in got)
    parts.append(f"per step read/written {got} on {len(rows)} ranks (report {want[0]} / {want[1]}, 0 unplanned waits)")
# One line per plan (gpu_round.sh shows the first lines of this log); the losses are in the log folder.
print(f"train {name}: {'ok' if ok else 'FAIL'} (PyTorch tol 2e-2): " + "; ".join(parts))
PY
  done
fi
