#!/usr/bin/env bash
# Compile-time benchmark (not a test): compiles the graph-only llama2-7b export with
#   --tp 8 --zero 3 --world 64 --batch 8 --seq 4096 --dtype bf16
# and prints the wall time (target: under 5 s on the 2-core dev machine) and the resident weight bytes per
# rank from the report next to the formula params * 2 / (tp * dp), with params counted from the ONNX
# initializers by the onnx package (independently of zplan).
#
# Usage: bench/compile-llama2-7b.sh [BUILD_DIR]      (default: build)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${ZPLAN_BUILD_DIR:-$top/build}}
zplan=$build/bin/zplan
python=$top/.venv/bin/python
[ -x "$python" ] || python=python3
model=$top/tests/models/bench/llama2-7b/model.onnx
[ -f "$model" ] || model=$top/../shared/bench-models/llama2-7b/model.onnx
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

tp=8 world=64
start=$(date +%s.%N)
"$zplan" "$model" --graph-only --tp $tp --zero 3 --world $world --batch 8 --seq 4096 --dtype bf16 \
  -o "$out/llama2-7b.zplan" --report-json "$out/report.json" 2> "$out/stderr" || {
  cat "$out/stderr"; exit 1; }
end=$(date +%s.%N)

grep "zplan: wrote" "$out/stderr" || true
"$python" - "$model" "$out/report.json" "$start" "$end" $tp $world <<'PY'
import json, sys
import onnx
model, report, start, end, tp, world = sys.argv[1:]
tp, world = int(tp), int(world)
dp = world // tp
m = onnx.load(model, load_external_data=False)
params = 0
for init in m.graph.initializer:
    n = 1
    for d in init.dims:
        n *= d
    params += n
r = json.load(open(report))
resident = r["ranks"][0]["resident_weight_bytes"]
formula = params * 2 / (tp * dp)
seconds = float(end) - float(start)
print("llama2-7b --tp %d --zero 3 --world %d --batch 8 --seq 4096 --dtype bf16" % (tp, world))
print("compile time: %.2f s (target < 5 s)" % seconds)
print("parameters: %d" % params)
print("resident weight bytes per rank: %d" % resident)
print("formula params*2/(tp*dp):       %.0f" % formula)
print("difference: %+.3f%%" % (100.0 * (resident - formula) / formula))
print("planned peak (device) per rank: %d" % r["ranks"][0]["planned_peak_bytes"])
PY
