#!/usr/bin/env bash
# Runs a plan through zrun under mpirun and checks it: the global output against the float64-derived
# expected output, and one report line per rank. (zrun's "measured" arena is the extent of the plan's own
# tensors, so comparing it with the planned arena would compare the plan with itself; tests/memory measures
# the process from outside instead.)
#   zrun_check.sh ZRUN ALLCLOSE DATA NP PLAN ATOL MPIRUN...
set -u
zrun=$1 allclose=$2 data=$3 np=$4 plan=$5 atol=$6
shift 6
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log=$out/log
timeout 60 "$@" -np "$np" "$zrun" "$data/$plan" --input x="$data/x.npy" --output y="$out/y.npy" --repeat 3 \
  --timeout 30 >"$log" 2>&1
rc=$?
cat "$log"
if [ $rc -ne 0 ]; then echo "FAIL: zrun exited with $rc"; exit 1; fi
"$allclose" "$out/y.npy" "$data/expected.npy" "$atol" || { echo "FAIL: output differs"; exit 1; }
lines=$(grep -c '^zrun: rank' "$log")
if [ "$lines" -ne "$np" ]; then echo "FAIL: expected $np rank reports, got $lines"; exit 1; fi
echo "PASS"
