#!/usr/bin/env bash
# Runs one crash-regression input through the tool a user would run on such a file:
#   check_cli.sh onnx_import INPUT ZPLAN          zplan import INPUT -o OUT
#   check_cli.sh plan_load   INPUT ZRUN PYTHON    zrun INPUT, and zrun on a copy whose header (length, CRC-32)
#                                                 is made valid again, so that the damage reaches the checks
#                                                 behind the CRC
#   check_cli.sh npy_read    INPUT ZRUN PLAN      zrun PLAN --input x=INPUT
# The tool must end on its own within 20 s, with an ordinary exit status (never a signal). A raw regression
# input must get the outcome its folder's expected.txt documents (as fuzz/replay does): refused with a
# message matching that regex, or accepted. No output file may be left behind by a refusal. The
# header-repaired plan and the .npy may be valid after all: there an exit of 0 is accepted, and a non-zero
# one must come with an error message.
set -u
target=$1 input=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
# The documented outcome: "accept", or the regex of the refusal.
expected=$(awk -v n="$(basename "$input")" '$1 == n { if ($2 == "accept") print "accept"; else { sub(/^[^ ]+ +refuse +/, ""); print } }' \
           "$(dirname "$input")/expected.txt" 2>/dev/null)

run() {  # run EXPECT_FAIL REGEX CMD...: one invocation, checked
  local must_fail=$1 regex=$2
  shift 2
  local output rc
  output=$(timeout -s KILL 20 "$@" 2>&1)
  rc=$?
  echo "\$ $*"
  echo "$output" | tail -n 5
  echo "exit $rc"
  if [ $rc -ge 124 ]; then echo "FAIL: crashed, killed or hung (exit $rc)"; fail=1; return; fi
  if [ "$must_fail" = 1 ] && [ $rc -eq 0 ]; then echo "FAIL: accepted"; fail=1; return; fi
  if [ $rc -ne 0 ] && ! grep -Eq -- "$regex" <<<"$output"; then echo "FAIL: no message matching /$regex/"; fail=1; fi
}

case $target in
  onnx_import)
    zplan=$1
    # The importer resolves external data against the model's folder: give it a folder of its own.
    cp "$input" "$work/model.onnx"
    [ -n "$expected" ] || { echo "FAIL: no documented outcome for $(basename "$input") in expected.txt"; exit 1; }
    must_fail=1 regex=$expected
    [ "$expected" = accept ] && must_fail=0 regex=error
    # The fuzzer binds batch 2, seq 8 and accepts missing external files (fuzz/fuzz_onnx_import.cpp).
    run $must_fail "$regex" "$zplan" import "$work/model.onnx" --batch 2 --seq 8 --graph-only -o "$work/out.mlir"
    if [ $must_fail = 0 ] && [ ! -s "$work/out.mlir" ]; then echo "FAIL: accepted, but no graph was written"; fail=1; fi
    if [ $must_fail = 1 ] && [ -e "$work/out.mlir" ]; then echo "FAIL: an output file was left behind"; fail=1; fi
    ;;
  plan_load)
    zrun=$1 python=$2
    cp "$input" "$work/plan.zplan"
    [ -n "$expected" ] && [ "$expected" != accept ] || { echo "FAIL: no documented refusal for $(basename "$input")"; exit 1; }
    run 1 "zrun: .*error.*$expected" "$zrun" "$work/plan.zplan" --random-inputs --init random --timeout 15
    "$python" - "$input" "$work/fixed.zplan" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
payload = data[24:] if data[:8] == b"ZPLANv1\n" else data
header = b"ZPLANv1\n" + struct.pack("<QII", len(payload), zlib.crc32(payload) & 0xFFFFFFFF, 0)
open(sys.argv[2], "wb").write(header + payload)
PY
    run 0 "zrun: .*error" "$zrun" "$work/fixed.zplan" --random-inputs --init random --timeout 15
    ;;
  npy_read)
    zrun=$1 plan=$2
    run 0 "zrun: .*error" "$zrun" "$plan" --input "x=$input" --timeout 15
    ;;
  *) echo "unknown target '$target'"; exit 2 ;;
esac
[ $fail -eq 0 ] && echo "PASS"
exit $fail
