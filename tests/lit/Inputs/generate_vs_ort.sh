#!/usr/bin/env bash
# generate_vs_ort.sh MODEL.onnx MAX_SEQ NEW WORKDIR PROMPT.npy LENGTHS.npy
#
# Plans MODEL.onnx with zplan --generate --max-seq MAX_SEQ --batch 2 at (tp, zero, world) = (1, 0, 1), (2, 0, 2)
# and (1, 3, 2), runs zrun --generate for NEW tokens (the whole prompts PROMPT.npy on one rank; the prompts cut
# to LENGTHS.npy over two ranks) and checks each run's tokens with ort_greedy.py, onnxruntime's recompute. zplan
# and zrun come from PATH (lit's).
set -euo pipefail
model=$1 maxseq=$2 new=$3 work=$4 prompt=$5 lengths=$6
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np 2)
mkdir -p "$work"
zplan "$model" --generate --max-seq "$maxseq" --batch 2 -o "$work/a.zplan" >/dev/null
zrun "$work/a.zplan" --generate --prompt "$prompt" --max-new-tokens "$new" --tokens-out "$work/a.npy" >/dev/null
echo "tp 1 world 1: $("$python" "$here/ort_greedy.py" "$model" "$prompt" "$work/a.npy")"
for cfg in "--tp 2 --world 2" "--zero 3 --world 2"; do
  zplan "$model" --generate --max-seq "$maxseq" --batch 2 $cfg -o "$work/b.zplan" >/dev/null
  "${mpi[@]}" zrun "$work/b.zplan" --generate --prompt "$prompt" --prompt-lengths "$lengths" \
    --max-new-tokens "$new" --tokens-out "$work/b.npy" >/dev/null
  echo "$cfg: $("$python" "$here/ort_greedy.py" "$model" "$prompt" "$work/b.npy" "$lengths")"
done
