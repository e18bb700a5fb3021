#!/usr/bin/env bash
# The NCCL fault path on 2 GPUs: rank 1 is killed (kill) or stopped (stall) while the ranks run a
# tensor-parallel plan in a loop, i.e. in the middle of its collectives; rank 0 must exit within
# ZRT_NCCL_TIMEOUT_S + 10 s of the fault with a message that names rank 1 (the communicator aborted with
# ncclCommAbort):
#   tests/cuda/nccl_fault.sh ZRUN PLAN kill|stall [OUTDIR]
# mpirun is told not to end the job itself when a rank dies (orte_abort_on_non_zero_status 0), so that what
# ends rank 0 is zplan's own fault path. Exits 77 with fewer than 2 GPUs.
set -uo pipefail
zrun=$1 plan=$2 mode=$3 out=${4:-/tmp/zplan-fault}
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ ${gpus:-0} -ge 2 ]] || { echo "SKIPPED: $gpus GPU(s), this test needs 2"; exit 77; }
[[ -f $plan ]] || { echo "SKIPPED: no plan $plan (compile a --tp 2 --target cuda plan there)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 ZRT_NCCL_TIMEOUT_S=${ZRT_NCCL_TIMEOUT_S:-20}
log=$out/fault-$mode.log
mpirun --allow-run-as-root --oversubscribe -np 2 --mca orte_abort_on_non_zero_status 0 \
  -x NCCL_NVLS_ENABLE -x ZRT_NCCL_TIMEOUT_S "$zrun" "$plan" --backend cuda --init random --random-inputs \
  --repeat 1000000 --timeout 0 > "$log" 2>&1 &
job=$!
# Rank 1's process: the zrun whose environment says OMPI_COMM_WORLD_RANK=1.
victim=
for _ in $(seq 1 300); do
  for p in $(pgrep -x zrun); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$p; fi
  done
  [[ -n $victim ]] && break
  sleep 0.1
done
[[ -n $victim ]] || { echo "FAIL $mode: rank 1 never started"; kill "$job"; cat "$log"; exit 1; }
# Let both ranks load the plan and run for a while: the loop then spends its time in collectives.
sleep 8
if ! kill -0 "$job" 2>/dev/null; then echo "FAIL $mode: the job ended before the fault"; cat "$log"; exit 1; fi
t0=$(date +%s.%N)
if [[ $mode == kill ]]; then kill -KILL "$victim"; else kill -STOP "$victim"; fi
limit=$(python3 -c "print(int($ZRT_NCCL_TIMEOUT_S) + 10)")
waited=0
while kill -0 "$job" 2>/dev/null && [[ $waited -lt $((limit + 30)) ]]; do sleep 0.2; waited=$(python3 -c "import time; print(int(time.time() - $t0))"); done
t1=$(date +%s.%N)
if kill -0 "$job" 2>/dev/null; then kill -CONT "$victim" 2>/dev/null; kill -KILL "$job" 2>/dev/null; fi
kill -KILL "$victim" 2>/dev/null
wait "$job" 2>/dev/null
elapsed=$(python3 -c "print(round($t1 - $t0, 1))")
msg=$(grep -m1 "zrun: rank 0: error" "$log")
echo "$mode: rank 0 ended ${elapsed} s after the fault (limit ${limit} s): ${msg:-no error line from rank 0}"
ok=$(python3 -c "print(int($elapsed <= $limit))")
[[ $ok == 1 ]] || { echo "FAIL $mode: took longer than ZRT_NCCL_TIMEOUT_S + 10 s"; tail -20 "$log"; exit 1; }
want="rank 1 .*(has exited|is stopped)"
[[ $mode == stall ]] && want="rank 1 .*is stopped"
echo "$msg" | grep -Eq "$want" || { echo "FAIL $mode: rank 0's message does not name rank 1 as $want"; tail -20 "$log"; exit 1; }
echo "$msg" | grep -q "ncclCommAbort" || { echo "FAIL $mode: no ncclCommAbort in rank 0's message"; exit 1; }
echo "ok $mode"
