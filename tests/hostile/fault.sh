#!/usr/bin/env bash
# Distributed faults under mpirun on CPU ranks. Each case must end the whole job, every rank, within the
# zrun timeout plus a few seconds, with a non-zero exit and a clear message; no rank process may survive.
#
#   fault.sh CASE ZRUN PLAN_A PLAN_B TIMEOUT MPIRUN...
#
# PLAN_A is a plan for 2 ranks that runs for a while under --repeat; PLAN_B is a different plan for 2 ranks.
# Cases:
#   rank_exits       rank 1 exits with status 124 mid-run (it runs under timeout(1), which ends it after
#                    1.5 s): the job must stop at once, not wait for rank 0's timeout;
#   rank_leaves      rank 1 finishes its single run and leaves (MPI_Finalize) while rank 0 keeps issuing
#                    collectives: rank 0 must time out with zrun's message;
#   rank_killed      rank 1 is killed (SIGKILL) mid-run: the job must stop at once;
#   rank_stalls      rank 1 is stopped (SIGSTOP) mid-run: rank 0's collective must time out and the job end,
#                    the stopped rank included;
#   different_plan   rank 1 is given PLAN_B: every rank must refuse at open, before anything runs.
set -u
case_name=$1 zrun=$2 plan_a=$3 plan_b=$4 timeout_s=$5
shift 5
mpirun=("$@")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
slack=8
limit=$(( ${timeout_s%.*} + slack ))

# The ranks are descendants of the launcher; find the zrun processes by walking the tree from its id.
descendants() {
  local kids k
  kids=$(pgrep -P "$1" || true)
  for k in $kids; do
    echo "$k"
    descendants "$k"
  done
}
zrun_ranks() {
  local p
  for p in $(descendants "$1"); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "zrun" ] && echo "$p"
  done
}
wait_for_ranks() {  # wait_for_ranks JOB N: prints the ids once N zrun ranks run
  local ids
  # Up to 30 s: on a loaded 2-core CI machine two MPI ranks can take seconds to start.
  for _ in $(seq 1 600); do
    ids=$(zrun_ranks "$1")
    if [ "$(wc -w <<<"$ids")" -ge "$2" ]; then echo "$ids"; return 0; fi
    sleep 0.05
  done
  return 1
}

long=(--random-inputs --repeat 1000000 --timeout "$timeout_s")
start=$(date +%s%N)
case $case_name in
  rank_exits)
    "${mpirun[@]}" -np 1 "$zrun" "$plan_a" "${long[@]}" : \
                   -np 1 timeout -s TERM 1.5 "$zrun" "$plan_a" "${long[@]}" >"$log" 2>&1 &
    want='exited on signal|non-zero status|exiting improperly|killed|timed out'
    ;;
  rank_leaves)
    "${mpirun[@]}" -np 1 "$zrun" "$plan_a" "${long[@]}" : \
                   -np 1 "$zrun" "$plan_a" --random-inputs --repeat 1 --timeout "$timeout_s" >"$log" 2>&1 &
    want="rank 0: timed out after $timeout_s s"
    ;;
  rank_stalls)
    "${mpirun[@]}" -np 2 "$zrun" "$plan_a" "${long[@]}" >"$log" 2>&1 &
    want="timed out after $timeout_s s"
    ;;
  rank_killed)
    "${mpirun[@]}" -np 2 "$zrun" "$plan_a" "${long[@]}" >"$log" 2>&1 &
    want="signal 9|Killed"
    ;;
  different_plan)
    "${mpirun[@]}" -np 1 "$zrun" "$plan_a" "${long[@]}" : -np 1 "$zrun" "$plan_b" "${long[@]}" >"$log" 2>&1 &
    want='ranks hold different plan files'
    ;;
  *) echo "unknown case '$case_name'"; exit 2 ;;
esac
job=$!

# rank_exits' second rank ends itself after 1.5 s, possibly before the first one has started on a loaded
# machine: one running rank is enough to know the job is up there.
want_ranks=2
[ "$case_name" = rank_exits ] && want_ranks=1
if ! ranks=$(wait_for_ranks "$job" "$want_ranks"); then
  # A job that has already ended (rank_exits on a slow start) is judged by its exit and message below.
  if kill -0 "$job" 2>/dev/null; then
    echo "FAIL: the zrun ranks did not appear"; kill -9 "$job"; cat "$log"; exit 1
  fi
  echo "the job ended before its ranks were seen"
  ranks=""
fi
echo "rank processes: $(tr '\n' ' ' <<<"$ranks")"
if [ "$case_name" = rank_stalls ] || [ "$case_name" = rank_killed ]; then
  sleep 1.5
  # Rank 1 is the second rank of the job: the one whose environment says so.
  victim=""
  for p in $ranks; do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
  done
  [ -n "$victim" ] || victim=$(tail -n1 <<<"$ranks")
  # Without a rank to stop or kill the case would only watch a job end by itself: that proves nothing.
  signal=KILL
  [ "$case_name" = rank_stalls ] && signal=STOP
  echo "signalling rank process ${victim:-(none)} (SIG$signal)"
  if [ -z "$victim" ] || ! kill -"$signal" "$victim"; then
    echo "FAIL: no running rank to signal"; kill -9 "$job" 2>/dev/null; cat "$log"; exit 1
  fi
fi

for _ in $(seq 1 $((limit * 10))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: the job still runs after ${elapsed_ms} ms (limit ${limit} s)"
  for p in $ranks; do kill -9 "$p" 2>/dev/null; done
  kill -9 "$job" 2>/dev/null
  cat "$log"
  exit 1
fi
wait "$job"
rc=$?
cat "$log"
echo "exit $rc after ${elapsed_ms} ms (timeout ${timeout_s} s, limit ${limit} s)"
fail=0
sleep 0.2
for p in $ranks; do
  # A zombie has ended; only its parent has not collected the status yet.
  state=$(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null)
  if [ -n "$state" ] && [ "$state" != Z ]; then
    echo "FAIL: rank process $p survived the job (state $state)"; kill -9 "$p"; fail=1
  fi
done
if [ $rc -eq 0 ]; then echo "FAIL: the job reported success"; fail=1; fi
if ! grep -Eq -- "$want" "$log"; then echo "FAIL: no message matching /$want/"; fail=1; fi
if { [ "$case_name" = rank_exits ] || [ "$case_name" = rank_killed ]; } && [ $elapsed_ms -ge $(( ${timeout_s%.*} * 1000 )) ]; then
  echo "FAIL: a rank that exited should end the job at once, not at the ${timeout_s} s timeout"; fail=1
fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
