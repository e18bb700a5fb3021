#!/usr/bin/env bash
# A short fuzzing run for the test suite: SECONDS of libFuzzer from the given corpus folders. New inputs go
# to a scratch corpus in the build folder and crash files to WORK/artifacts, never into the source tree.
# Fails when the fuzzer reports a crash, a leak, a timeout or an out-of-memory.
#   short_fuzz.sh FUZZER WORK SECONDS CORPUS_DIR...
set -u
fuzzer=$1 work=$2 secs=$3
shift 3
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$fuzzer" "$work/corpus" "$@" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
          -artifact_prefix="$work/artifacts/" 2>"$work/log"
rc=$?
grep -E "^#[0-9]+.*(INITED|DONE)|stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY" "$work/log" | tail -n 20
if [ $rc -ne 0 ] || ls "$work/artifacts" | grep -q .; then
  echo "FAIL: the fuzzer found something (exit $rc); the input is in $work/artifacts"
  tail -n 60 "$work/log"
  exit 1
fi
echo "PASS"
