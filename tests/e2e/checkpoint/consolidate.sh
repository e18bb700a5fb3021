#!/usr/bin/env bash
# `zplan consolidate` end to end (CPU ranks, fp32); consolidate_check.py holds the oracles.
#   roundtrip MODEL: train 6 steps at (tp 2, zero 3, world 4) saving after step 5; consolidate that
#     checkpoint to ONNX and safetensors; onnxruntime's loss on the consolidated model equals zrun's step-6
#     loss (the step-5 weights on step 6's batch); zrun's forward pass of the consolidated model (compiled
#     by zplan) equals onnxruntime's logits; the safetensors tensors equal the ONNX initializers, and with
#     --hf-names carry the exported module's parameter names; without a
#     terminal there is no progress bar, on one (script(1)) there is.
#   memory: the peak RSS of consolidating a 200 MiB model stays near its largest tensor (24 MiB).
# Usage: consolidate.sh BIN_DIR MODELS_DIR WORK_DIR "MPIRUN..." MODE [MODEL]
set -euo pipefail
bin=$1 models=$2 work=$3 mpirun=$4 mode=$5
model=${6:-gpt2}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
case "$mode" in
roundtrip)
  m=$models/$model
  read -ra extra <<< "$(train_flags "$model")"
  "$bin/zplan" "$m/model.onnx" --train --seq 16 --clip-grad 1.0 --batch 2 --tp 2 --zero 3 --world 4 "${extra[@]}" \
    -o train.zplan 2>/dev/null
  $mpirun -np 4 "$bin/zrun" train.zplan --train --data "$m/input_ids.npy" --timeout 120 --steps 6 --save-dir ck \
    --save-every 5 --losses-out losses.npy | grep -v "zrun: step [1-4] "
  "$bin/zplan" consolidate ck -o trained.onnx 2>stderr.log
  if grep -q $'\r' stderr.log; then echo "FAIL: a progress bar without a terminal"; exit 1; fi
  "$bin/zplan" consolidate ck --format safetensors -o trained.safetensors
  "$python" "$here/consolidate_check.py" roundtrip trained.onnx losses.npy "$m/input_ids.npy" trained.safetensors \
    ort_logits.npy
  "$bin/zplan" consolidate ck --format safetensors --hf-names -o hf.safetensors
  "$python" "$here/consolidate_check.py" hfnames "$m/model.onnx" trained.safetensors hf.safetensors
  "$bin/zplan" trained.onnx --batch 2 --seq 16 -o forward.zplan 2>/dev/null
  "$bin/zrun" forward.zplan --input "input_ids=$m/input_ids.npy" --expect logits=ort_logits.npy --tolerance 1e-4 |
    grep "vs ort_logits"
  script -qec "'$bin/zplan' consolidate ck -o tty.onnx" /dev/null >tty.log
  if ! grep -q "[0-9]/[0-9]* tensors" tty.log; then echo "FAIL: no progress bar on a terminal"; cat tty.log; exit 1; fi
  echo "ok: a progress bar on a terminal only"
  ;;
memory)
  "$python" "$here/make_wide_model.py" 8192 768 3072 8 wide.onnx
  "$python" -c "import numpy as np; np.save('ids.npy', np.random.default_rng(0).integers(0, 8192, (2, 16)))"
  "$bin/zplan" wide.onnx --train --batch 2 --seq 16 --zero 1 --world 2 -o wide.zplan 2>/dev/null
  $mpirun -np 2 "$bin/zrun" wide.zplan --train --data ids.npy --timeout 300 --steps 1 --save-dir ck --save-every 1
  # The same binary on a small checkpoint gives the baseline (the process and its libraries).
  small=$models/llama
  "$bin/zplan" "$small/model.onnx" --train --batch 2 --seq 16 -o small.zplan 2>/dev/null
  "$bin/zrun" small.zplan --train --data "$small/input_ids.npy" --steps 1 --save-dir sck --save-every 1 >/dev/null
  peak() {
    "$python" -c "import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)" "$@"
  }
  small_kb=$(peak "$bin/zplan" consolidate sck -o small.onnx)
  big_kb=$(peak "$bin/zplan" consolidate ck -o big.onnx)
  "$python" "$here/consolidate_check.py" memory "$small_kb" "$big_kb" wide.onnx
  ;;
*)
  echo "unknown mode $mode"
  exit 2
  ;;
esac
