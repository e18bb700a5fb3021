#!/usr/bin/env bash
# Runs every fuzzer of a fuzz build for SECONDS, all at once, in fork mode (a crash, OOM or timeout is
# saved and the run goes on), each from its own corpus folder plus the seeds and the regressions. Prints
# each fuzzer's last status line (cov, ft, corp, exec/s, oom/timeout/crash) and where its crash files are.
#   fuzz/run_all.sh BUILD_DIR SEEDS_DIR SECONDS [TARGET...]
# SEEDS_DIR is make_seeds.py's output; WORK = BUILD_DIR/fuzz-runs/<target>/{corpus,artifacts,log}.
set -u
build=$1 seeds=$2 secs=$3
shift 3
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx_import compile plan_load npy_read)
# allow_user_poisoning=0: see fuzz/FINDINGS.md F33.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0:allow_user_poisoning=0
pids=()
for t in "${targets[@]}"; do
  work=$build/fuzz-runs/$t
  mkdir -p "$work/corpus" "$work/artifacts"
  seed=$seeds/$t
  reg=$top/tests/fuzz/regressions/$t
  dict=()
  case $t in
    onnx_import|compile) seed=$seeds/onnx_import; dict=(-dict="$top/fuzz/onnx.dict") ;;
    npy_read) dict=(-dict="$top/fuzz/npy.dict") ;;
  esac
  dirs=("$work/corpus")
  for d in "$seed" "$reg" "$top/tests/fuzz/seeds/$t"; do [ -d "$d" ] && dirs+=("$d"); done
  "$build/bin/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 "${dict[@]}" \
      -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -artifact_prefix="$work/artifacts/" \
      "${dirs[@]}" >"$work/log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for t in "${targets[@]}"; do
  work=$build/fuzz-runs/$t
  echo "$t: $(grep -E '^#[0-9]+: cov:' "$work/log" | tail -n 1)"
  echo "    $(ls "$work/artifacts" | wc -l) files in $work/artifacts"
done
