#!/usr/bin/env bash
# Runs a plan through zrun under mpirun and checks it: the global output against the float64-derived
# expected output, and on every rank the measured peak arena against the planned one.
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
# Every rank: "planned arena device P B ..." and "measured device M B" with M == P.
bad=$(grep '^zrun: rank' "$log" | sed -E 's/.*planned arena device ([0-9]+) B.*measured device ([0-9]+) B.*/\1 \2/' |
      awk '$1 != $2' | wc -l)
if [ "$bad" -ne 0 ]; then echo "FAIL: measured peak differs from planned on $bad rank(s)"; exit 1; fi
echo "PASS"
