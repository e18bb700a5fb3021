#!/usr/bin/env bash
# One case of the collective order check (collective_order.cpp): a faulty sequence must end the whole job
# within LIMIT seconds, non-zero, with the check's message matching REGEX on some rank; `ok` must pass.
#   check_order.sh MODE LIMIT REGEX MPIRUN... -np 4 PROGRAM
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../lib/crashed.sh"
mode=$1 limit=$2 regex=$3
shift 3
start=$(date +%s%N)
output=$(timeout -s KILL 60 "$@" "$mode" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$output" | grep -v '^-*$' | head -n 20
echo "exit $rc after ${elapsed_ms} ms"
fail=0
if [ "$mode" = ok ]; then
  [ $rc -eq 0 ] || { echo "FAIL: the matching sequence failed"; fail=1; }
  [ "$(grep -c 'order check on, results match' <<<"$output")" -eq 4 ] || { echo "FAIL: not every rank finished"; fail=1; }
else
  if [ $rc -eq 0 ]; then echo "FAIL: the faulty sequence was accepted"; fail=1; fi
  if [ $rc -eq 137 ]; then echo "FAIL: killed after 60 s (hang)"; fail=1
  elif why=$(crashed $rc "$output"); then echo "FAIL: the job $why, not an ordinary exit"; fail=1; fi
  if ! grep -Eq -- "$regex" <<<"$output"; then echo "FAIL: no message matching /$regex/"; fail=1; fi
fi
if [ $elapsed_ms -gt $((limit * 1000)) ]; then echo "FAIL: took over $limit s"; fail=1; fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
