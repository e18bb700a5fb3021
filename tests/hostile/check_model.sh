#!/usr/bin/env bash
# Runs zplan on one hostile model and checks that it is refused properly:
#   - a non-zero exit that is an ordinary error (not a signal, not the 10 s kill);
#   - within LIMIT seconds (2 s by default);
#   - a message matching REGEX (which names the file, initializer or node);
#   - no output file (nor its temporary) left behind.
# With REGEX "OK" the model must instead compile (exit 0, output present): the control case.
#
# MODE `import` runs `zplan import MODEL -o OUT` instead of the compile path `zplan MODEL -o OUT`.
#
# FLAGS after MODE are passed to zplan (hostile command lines on a valid model).
#
#   check_model.sh ZPLAN MODEL REGEX [LIMIT [MODE [FLAGS...]]]
set -u
zplan=$1 model=$2 regex=$3 limit=${4:-2} mode=${5:-compile}
shift $(( $# < 5 ? $# : 5 ))
cmd=("$zplan")
[ "$mode" = import ] && cmd+=(import)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out.zplan

start=$(date +%s%N)
output=$(timeout -s KILL 10 "${cmd[@]}" "$model" -o "$out" "$@" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$output"
echo "exit $rc after ${elapsed_ms} ms"

if [ "$regex" = "OK" ]; then
  if [ $rc -ne 0 ] || [ ! -s "$out" ]; then echo "FAIL: the control model did not compile"; exit 1; fi
  echo "PASS"
  exit 0
fi
fail=0
if [ $rc -eq 0 ]; then echo "FAIL: zplan accepted a hostile model"; fail=1; fi
if [ $rc -ge 124 ]; then echo "FAIL: zplan crashed or hung (exit $rc)"; fail=1; fi
if [ $elapsed_ms -gt $((limit * 1000)) ]; then echo "FAIL: took ${elapsed_ms} ms, limit ${limit} s"; fail=1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "FAIL: no message matching /$regex/"; fail=1; fi
if [ -e "$out" ] || [ -e "$out.tmp" ]; then echo "FAIL: an output file was left behind"; ls -la "$work"; fail=1; fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
