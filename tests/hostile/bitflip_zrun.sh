#!/usr/bin/env bash
# Flips one bit at N places of a plan file (the header's magic, length, CRC and reserved fields, then
# evenly over the payload) and runs zrun on each copy: every run must end with a non-zero exit and zrun's
# error message, never run the plan, crash or hang. zrun runs as a world of one without mpirun: the checks are
# the plan loader's, and starting mpirun took most of each run's time.
#   bitflip_zrun.sh ZRUN PLAN N
set -u
zrun=$1 plan=$2 n=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
size=$(stat -c %s "$plan")
# The plan's weights resolve relative to its folder: the damaged copies live beside a link to them.
for f in "$(dirname "$plan")"/*.bin; do ln -s "$f" "$work/"; done
# The control: the undamaged copy, in the same place, must run. Otherwise every damaged copy could fail for a
# reason of its own (weights not found beside it) and pass as refused.
cp "$plan" "$work/p.zplan"
output=$(timeout -s KILL 20 "$zrun" "$work/p.zplan" --random-inputs --timeout 15 2>&1) ||
  { echo "FAIL: the undamaged plan does not run here"; echo "$output" | tail -n 5; exit 1; }
positions="0 7 8 15 16 19 20 23"
for i in $(seq 0 $((n - 9))); do positions="$positions $(( 24 + i * (size - 25) / (n - 9) ))"; done
fail=0 tried=0
for pos in $positions; do
  bit=$(( pos % 8 ))
  cp "$plan" "$work/p.zplan"
  byte=$(od -An -tu1 -j "$pos" -N1 "$plan" | tr -d ' ')
  printf "$(printf '\\%03o' $(( byte ^ (1 << bit) )))" | dd of="$work/p.zplan" bs=1 seek="$pos" conv=notrunc status=none
  output=$(timeout -s KILL 20 "$zrun" "$work/p.zplan" --random-inputs --timeout 15 2>&1)
  rc=$?
  tried=$((tried + 1))
  if [ $rc -eq 0 ] || ! grep -q "zrun: error:" <<<"$output"; then
    echo "FAIL: byte $pos bit $bit: exit $rc"
    echo "$output" | tail -n 3
    fail=1
  else
    echo "byte $pos bit $bit: $(grep -m1 'zrun: error:' <<<"$output")"
  fi
done
echo "$tried damaged copies of $plan ($size bytes) through zrun"
[ "$tried" -eq "$n" ] || { echo "FAIL: $tried copies tried, $n asked for"; fail=1; }
[ $fail -eq 0 ] && echo "PASS"
exit $fail
