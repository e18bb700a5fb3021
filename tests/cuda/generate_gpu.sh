#!/usr/bin/env bash
# Greedy generation on the GPUs against Hugging Face's tokens (tests/models/<model>/expected_generate.npy:
# generate() with a KV cache, 24 new tokens from input_ids.npy): gpt2 and llama, fp32, tp 1 on one GPU and
# tp 2 on two (NCCL). The tokens must be equal, every one.
#   tests/cuda/generate_gpu.sh --make [ZPLAN]   on the compiling machine: the plans, into .gpu-gen/check
#   tests/cuda/generate_gpu.sh [ZRUN]           on the GPU machine (carry .gpu-gen and .gpu-deps)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=.gpu-gen/check
if [[ ${1:-} == --make ]]; then
  zplan=${2:-build/bin/zplan}
  mkdir -p "$out"
  for m in gpt2 llama; do
    for tp in 1 2; do
      "$zplan" tests/models/$m/model.onnx --generate --max-seq 40 --batch 2 --tp $tp --target cuda \
        -o $out/$m-tp$tp.zplan || exit 1
    done
  done
  exit 0
fi
zrun=${1:-build-gpu/bin/zrun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L | wc -l)
fail=0
for p in $out/*.zplan; do
  name=$(basename "$p" .zplan); model=${name%-tp*}; tp=${name##*-tp}
  [[ $tp -gt $ngpu ]] && { echo "$name: skipped ($ngpu GPU)"; continue; }
  cmd=("$zrun" "$p" --backend cuda --generate --prompt tests/models/$model/input_ids.npy --max-new-tokens 24
       --tokens-out /tmp/$name-tokens.npy --timeout 120)
  [[ $tp -gt 1 ]] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$tp" -x NCCL_NVLS_ENABLE=0 "${cmd[@]}")
  timeout 150 "${cmd[@]}" < /dev/null > /tmp/$name-gen.log 2>&1 || { echo "$name: zrun failed"; tail -5 /tmp/$name-gen.log; fail=1; continue; }
  grep -iE "first token|tokens/s" /tmp/$name-gen.log | head -3
  python3 - /tmp/$name-tokens.npy tests/models/$model/expected_generate.npy "$name" <<'PY' || fail=1
import sys, numpy as np
got, ref, name = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3]
same = got.shape == ref.shape and bool((got == ref).all())
diff = int((got != ref).sum()) if got.shape == ref.shape else -1
print(f"{name}: greedy tokens {got.shape} {'equal' if same else 'DIFFER'} to Hugging Face's ({diff} differ)")
sys.exit(0 if same else 1)
PY
done
exit $fail
