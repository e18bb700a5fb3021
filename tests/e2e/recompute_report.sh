#!/usr/bin/env bash
# Activation recomputation lowers what the plan keeps for the backward: compiles a shared model's training
# step with --recompute none, selective and full and compares the report's activations_for_backward_bytes
# (the activation bytes alive across the loss) between the three compiles: each must be strictly below the
# previous one, and full must keep at most half of none. Then --recompute auto must pick none where the none
# plan fits, a recomputing plan at the full plan's arena when that is smaller, and fail naming --gpu-mem
# below the full plan's arena.
# Usage: recompute_report.sh BIN_DIR MODEL_DIR WORK_DIR ZPLAN_FLAGS...
set -euo pipefail
bin=$1 model=$2 work=$3; shift 3
source "$(dirname "$0")/lib.sh"
mkdir -p "$work"
for r in none selective full; do
  "$bin/zplan" "$model/model.onnx" --train --batch 2 --seq 16 "$@" --recompute "$r" \
    --report-json "$work/$r.json" -o "$work/$r.zplan"
done
read -r none_arena full_arena < <("$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
rank = {r: json.load(open(f"{work}/{r}.json"))["ranks"][0] for r in ("none", "selective", "full")}
kept = {r: rank[r]["activations_for_backward_bytes"] for r in rank}
print(f"activations for backward: none {kept['none']}, selective {kept['selective']}, full {kept['full']} bytes",
      file=sys.stderr)
assert kept["none"] > kept["selective"] > kept["full"] > 0, kept
assert 2 * kept["full"] <= kept["none"], kept
print(rank["none"]["device_arena_bytes"], rank["full"]["device_arena_bytes"])
PY
)
auto() {
  "$bin/zplan" "$model/model.onnx" --train --batch 2 --seq 16 "$@" -o "$work/auto.zplan" 2>&1 | tee "$work/auto.log"
}
# Where nothing needs recomputing, auto recomputes nothing.
auto "$@" --recompute auto --gpu-mem "$none_arena"
grep -q -- "--recompute auto: none fits" "$work/auto.log"
# Where the loss's own buffers set the peak (gpt2's vocabulary), recomputation cannot lower it.
if [ "$full_arena" -lt "$none_arena" ]; then
  auto "$@" --recompute auto --gpu-mem "$full_arena"
  grep -q -- "--recompute auto: \(selective\|full\) fits" "$work/auto.log"
fi
if "$bin/zplan" "$model/model.onnx" --train --batch 2 --seq 16 "$@" --recompute auto \
     --gpu-mem $((full_arena - 4096)) -o "$work/auto2.zplan" 2> "$work/auto2.log"; then
  echo "FAIL: --recompute auto accepted a --gpu-mem below the full plan's arena"; exit 1
fi
grep -q -- "does not fit --gpu-mem .* even with full recomputation" "$work/auto2.log"
test ! -e "$work/auto2.zplan"
echo "recompute report: ok"
