#!/usr/bin/env bash
# The plan's predicted process peak against the measured one, per rank, for every plan of a manifest:
#   tests/cuda/plan_memory.sh ZRUN MANIFEST [OUTDIR]
# MANIFEST lines: NAME NP PLAN (PLAN relative to the manifest's folder; '#' starts a comment). Each plan runs
# under zrun on the cuda backend (mpirun -np NP when NP > 1, one GPU per rank; NP = 1 runs on GPU 0) with
# random weights and inputs, 3 untimed warm-up runs, then 10 timed runs replayed as a CUDA graph. Each rank's
# planned process peak (RankMemory.planned_peak_bytes: arenas + workspace + CUDA context + NCCL buffers) must
# be at least the measured one (cudaMemGetInfo, the whole process, sampled after allocations and every run)
# and at most 3% above it. Prints one JSON line per rank (also the median time, for bench/gpu/report.py) and
# exits 1 if any rank misses, 77 without a GPU (or without enough GPUs for every plan: those are skipped).
set -uo pipefail
zrun=$1 manifest=$2 out=${3:-/tmp/zplan-plan-memory}
mkdir -p "$out"
dir=$(cd "$(dirname "$manifest")" && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ ${gpus:-0} -ge 1 ]] || { echo "SKIPPED: no GPU"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ZRT_CUDA_REPORT=1
fail=0 ran=0
while read -r name np plan rest; do
  [[ -z ${name:-} || $name == \#* ]] && continue
  if [[ $np -gt $gpus ]]; then echo "skip $name: needs $np GPUs, $gpus here"; continue; fi
  log=$out/mem-$name.log
  cmd=("$zrun" "$dir/$plan" --backend cuda --init random --random-inputs --warmup 3 --repeat 10 --cuda-graph $rest)
  if [[ $np -gt 1 ]]; then
    cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE=0 -x ZRT_NCCL_CTAS -x NCCL_RUNTIME_CONNECT "${cmd[@]}")
  else
    cmd=(env CUDA_VISIBLE_DEVICES=0 "${cmd[@]}")
  fi
  # stdin from /dev/null: mpirun would otherwise read the rest of the manifest.
  if ! timeout 300 "${cmd[@]}" < /dev/null > "$log" 2>&1; then
    echo "FAIL $name: zrun failed"; tail -8 "$log"; fail=1; continue
  fi
  ran=1
  python3 - "$log" "$name" "$np" <<'PY' || fail=1
import json, re, sys
log, name, np_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
pat = re.compile(r"zrun: rank (\d+)/\d+ .*runtime scratch (\d+) B; run [\d.]+ ms \(mean of \d+, min [\d.]+ ms, "
                 r"median ([\d.]+) ms\); planned process peak (\d+) B; measured process peak (\d+) B")
rows = [m.groups() for m in map(pat.search, open(log, errors="replace")) if m]
ok = len(rows) == np_
if not ok:
    print(f"FAIL {name}: {len(rows)} rank lines in {log}, expected {np_}")
for r, scratch, med, planned, measured in rows:
    planned, measured = int(planned), int(measured)
    over = (planned - measured) / measured if measured else float("nan")
    good = measured > 0 and planned >= measured and planned <= 1.03 * measured
    ok = ok and good
    print(json.dumps({"plan": name, "np": np_, "rank": int(r), "median_ms": float(med), "planned_mib": round(planned / 2**20, 1),
                      "measured_mib": round(measured / 2**20, 1), "over": round(over, 4), "scratch_mib": round(int(scratch) / 2**20, 1),
                      "ok": good}))
sys.exit(0 if ok else 1)
PY
done < "$manifest"
[[ $ran == 1 ]] || { echo "SKIPPED: no plan could run here"; exit 77; }
exit $fail
