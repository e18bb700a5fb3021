#!/usr/bin/env bash
# Runs each input through a fuzz target once and prints, per input, "ok" or the first sanitizer line, then
# the distinct failures with a count: the quick way to see which findings a change fixed, and to group the
# crash-* files of a fuzzing run by cause.
#   fuzz/triage.sh FUZZER INPUT_OR_DIR...
set -u
fuzzer=$1
shift
# allow_user_poisoning=0: see fuzz/FINDINGS.md F33.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0:allow_user_poisoning=0}
# fuzz_compile silences zplan's stderr unless this is set.
export ZPLAN_FUZZ_VERBOSE=1
files=()
for a in "$@"; do
  if [ -d "$a" ]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "$a" -maxdepth 1 -type f ! -name '*.md' | sort)
  else
    files+=("$a")
  fi
done
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # stripped from stack paths
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
for f in "${files[@]}"; do
  out=$(timeout -s KILL 60 "$fuzzer" -rss_limit_mb=4096 -timeout=30 "$f" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    line="ok"
  else
    line=$(grep -m1 -E "runtime error|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY" <<<"$out" |
           sed -E "s|$repo/||" | sed -E 's|/usr/lib/gcc/[^ ]*/include/c\+\+/[0-9]+/||; s|\(BuildId[^)]*\)||; s|==[0-9]+==||')
    [ -n "$line" ] || line="exit $rc"
  fi
  printf '%-60s %s\n' "$(basename "$f")" "$line"
  echo "$line" >>"$summary"
done
echo "--- distinct outcomes"
sort "$summary" | uniq -c | sort -rn
