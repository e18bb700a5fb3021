#!/usr/bin/env bash
# Runs zrun (a world of one, without mpirun: mpirun's wait after a rank's non-zero exit tripled each case's
# time) on something that is not a valid plan or input: it must end on its own within 20 s with a non-zero
# exit that is not a signal, and print a message matching REGEX.
#   check_zrun.sh REGEX ZRUN ARGS...
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../lib/crashed.sh"
regex=$1
shift
start=$(date +%s%N)
output=$(timeout -s KILL 20 "$@" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$output" | grep -v '^-*$' | head -n 20
echo "exit $rc after ${elapsed_ms} ms"
fail=0
if [ $rc -eq 0 ]; then echo "FAIL: zrun accepted it"; fail=1; fi
if [ $rc -eq 137 ]; then echo "FAIL: killed after 20 s (hang)"; fail=1
elif why=$(crashed $rc "$output"); then echo "FAIL: zrun $why"; fail=1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "FAIL: no message matching /$regex/"; fail=1; fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
