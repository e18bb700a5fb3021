#!/usr/bin/env bash
# hf_inputs_check.sh MODEL_DIR WORKDIR [TOL]
#
# The checks of a real Hugging Face export that takes attention_mask and position_ids (tests/models/hf_inputs,
# written by tests/models/export_with_inputs.py):
# - generation (zplan --generate --max-seq 40 --batch 2, 24 new tokens from the [2, 16] prompt) gives exactly
#   Hugging Face generate's greedy tokens (expected_generate.npy: PyTorch, KV cache on);
# - the same against onnxruntime's recompute of the export at (tp, zero, world) = (1, 0, 1), (2, 0, 2) and
#   (1, 3, 2), the last two with prompts of 16 and 11 (generate_vs_ort.sh);
# - the forward plan (--seq 16) at tp 1 and 2, fed the first row left-padded by 3 (attention_mask and
#   position_ids as run inputs), against PyTorch's logits (expected_output_padded.npy) within TOL (1e-4) at
#   the positions the mask keeps. For an export that takes past keys and values (llama_ts_past, ...: no
#   attention_mask_padded.npy, but expected_output_past5.npy) the forward plan instead takes a past of 5
#   (--dim past_sequence_length=5, the mask's length 21: `past_sequence_length + sequence_length`, optimum 1.x's
#   `past_sequence_length + 1`, or dynamo's `total`), every input but input_ids fed from <name>_past5.npy,
#   against PyTorch's logits within TOL.
# zplan and zrun come from PATH (lit's).
set -euo pipefail
model=$1 work=$2 tol=${3:-1e-4}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
mkdir -p "$work"
zplan "$model/model.onnx" --generate --max-seq 40 --batch 2 -o "$work/g.zplan" >/dev/null
zrun "$work/g.zplan" --generate --prompt "$model/input_ids.npy" --max-new-tokens 24 --tokens-out "$work/g.npy" \
  >/dev/null
"$python" - "$work/g.npy" "$model/expected_generate.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
same = got.dtype == want.dtype and got.shape == want.shape and bool((got == want).all())
print(f"equal to Hugging Face generate's greedy tokens: {same}")
if not same:
    sys.exit(f"zrun:\n{got}\nHugging Face:\n{want}")
PY
"$python" -c "import numpy as np; np.save('$work/lens.npy', np.array([16, 11]))"
PYTHON=$python bash "$here/generate_vs_ort.sh" "$model/model.onnx" 40 24 "$work/ort" "$model/input_ids.npy" \
  "$work/lens.npy" 2>/dev/null
if [[ -f "$model/expected_output_past5.npy" ]]; then
  for tp in 1 2; do
    zplan "$model/model.onnx" --seq 16 --batch 2 --tp "$tp" --world "$tp" --dim past_sequence_length=5 \
      --dim "past_sequence_length + sequence_length=21" --dim "past_sequence_length + 1=21" --dim total=21 -o "$work/p.zplan" >/dev/null 2>&1
    feeds=(--input input_ids="$model/input_ids.npy")
    for f in "$model"/*_past5.npy; do
      n=$(basename "$f" _past5.npy)
      [[ $n == expected_output ]] || feeds+=(--input "$n=$f")
    done
    "${mpi[@]}" -np "$tp" zrun "$work/p.zplan" "${feeds[@]}" --output logits="$work/p.npy" >/dev/null
    "$python" - "$work/p.npy" "$model/expected_output_past5.npy" "$tp" "$tol" <<'PY'
import sys
import numpy as np
got, want, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[4])
assert got.shape == want.shape, (got.shape, want.shape)
err = float(np.abs(got.astype(np.float64) - want).max())
print(f"forward tp {sys.argv[3]}, past of 5: within {tol:g} of PyTorch: {err <= tol} ({err:.2g})")
if not err <= tol:
    sys.exit(1)
PY
  done
fi
[[ -f "$model/attention_mask_padded.npy" ]] || exit 0
for tp in 1 2; do
  zplan "$model/model.onnx" --seq 16 --batch 2 --tp "$tp" --world "$tp" -o "$work/f.zplan" >/dev/null 2>&1
  "${mpi[@]}" -np "$tp" zrun "$work/f.zplan" --input input_ids="$model/input_ids.npy" \
    --input attention_mask="$model/attention_mask_padded.npy" --input position_ids="$model/position_ids_padded.npy" \
    --output logits="$work/f.npy" >/dev/null
  "$python" - "$work/f.npy" "$model/expected_output_padded.npy" "$tp" "$tol" "$model/attention_mask_padded.npy" <<'PY'
import sys
import numpy as np
got, want, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[4])
assert got.shape == want.shape, (got.shape, want.shape)
# The positions the mask keeps (a padding position's logits are no one's).
keep = np.load(sys.argv[5]) == 1
err = float(np.abs(got.astype(np.float64)[keep] - want[keep]).max())
print(f"forward tp {sys.argv[3]}, left-padded mask: within {tol:g} of PyTorch: {err <= tol} ({err:.2g})")
if not err <= tol:
    sys.exit(1)
PY
done
