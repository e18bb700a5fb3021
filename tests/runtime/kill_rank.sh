#!/usr/bin/env bash
# Kills one rank of a running job (SIGKILL, by its process id) and checks that the whole job ends with an
# error instead of hanging, and because of the kill: within 15 s of it, well before zrun's own --timeout of
# 25 s (whose "timed out" message would otherwise pass for the job noticing the dead rank).
#   kill_rank.sh ZRUN DATA MPIRUN...
set -u
zrun=$1 data=$2
shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$@" -np 2 "$zrun" "$data/slow_tp2.zplan" --random-inputs --repeat 1000000 --timeout 25 >"$log" 2>&1 &
job=$!

# The ranks are descendants of the launcher; find them by walking the process tree from its id.
descendants() {
  local kids
  kids=$(pgrep -P "$1" || true)
  for k in $kids; do
    echo "$k"
    descendants "$k"
  done
}
victim=""
for _ in $(seq 1 100); do
  for p in $(descendants "$job"); do
    if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "zrun" ]; then victim=$p; fi
  done
  [ -n "$victim" ] && break
  sleep 0.1
done
if [ -z "$victim" ]; then echo "FAIL: no zrun rank appeared"; kill "$job" 2>/dev/null; exit 1; fi
sleep 1.5
echo "killing rank process $victim"
kill -9 "$victim" || { echo "FAIL: the rank could not be killed (it had already ended)"; kill "$job"; exit 1; }
killed=$(date +%s)
for _ in $(seq 1 300); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
elapsed=$(( $(date +%s) - start )) after_kill=$(( $(date +%s) - killed ))
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: the job still runs ${elapsed}s after a rank was killed"
  kill -9 "$job"
  exit 1
fi
wait "$job"
rc=$?
cat "$log"
echo "exit $rc after ${elapsed}s, ${after_kill}s after the kill"
if [ $rc -eq 0 ]; then echo "FAIL: the job reported success"; exit 1; fi
if [ $after_kill -ge 15 ]; then echo "FAIL: the job ended ${after_kill}s after the kill, not because of it"; exit 1; fi
if ! grep -Eqi "signal 9|killed|exited on signal|timed out|terminated" "$log"; then echo "FAIL: no clear message"; exit 1; fi
echo "PASS"
