#!/usr/bin/env bash
# Runs a command that must fail: within 30 s, with a nonzero exit that is an ordinary error (not a signal: a
# crash after the right message is still a crash, and mpirun passes a rank's signal on as 128 + N or says
# so), and output matching REGEX.
#   expect_fail.sh REGEX CMD...
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../lib/crashed.sh"
regex=$1
shift
start=$(date +%s)
output=$(timeout 30 "$@" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit $rc after ${elapsed}s"
if [ $rc -eq 0 ]; then echo "FAIL: the command succeeded"; exit 1; fi
if [ $rc -eq 124 ] && [ $elapsed -ge 30 ]; then echo "FAIL: the command hung"; exit 1; fi
if why=$(crashed $rc "$output"); then echo "FAIL: the command $why"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "FAIL: no message matching /$regex/"; exit 1; fi
echo "PASS"
