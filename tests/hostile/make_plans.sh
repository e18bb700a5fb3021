#!/usr/bin/env bash
# Compiles the real plans that the bit-flip and distributed-fault tests damage or run:
#   OUT/control.zplan     the hostile corpus's valid model (x @ W + b), tp 1: small enough to flip every bit
#   OUT/gpt2_tp1.zplan    tests/models/gpt2 at tp 1: the larger plan of the bit flips (one bit of every byte)
#   OUT/gpt2_tp2.zplan    tests/models/gpt2 at tp 2 (2 ranks): runs long enough under --repeat to be hit mid-run
#   OUT/gpt2_dp2.zplan    the same model on 2 ranks with ZeRO-3 over dp: a different plan for the same job size
#   OUT/fifo/             control.zplan beside a FIFO called weights.bin
#
#   make_plans.sh ZPLAN MODELS CORPUS OUT
set -eu
zplan=$1 models=$2 corpus=$3 out=$4
mkdir -p "$out"
# The control plan sits beside its model so that its weight file resolves relative to the plan's folder.
"$zplan" "$corpus/control/model.onnx" -o "$corpus/control/control.zplan"
cp "$corpus/control/control.zplan" "$out/control.zplan"
cp "$corpus/control/weights.bin" "$out/weights.bin"
"$zplan" "$models/gpt2/model.onnx" --batch 2 --seq 16 -o "$out/gpt2_tp1.zplan"
"$zplan" "$models/gpt2/model.onnx" --tp 2 --batch 2 --seq 16 -o "$out/gpt2_tp2.zplan"
"$zplan" "$models/gpt2/model.onnx" --world 2 --zero 3 --batch 2 --seq 16 -o "$out/gpt2_dp2.zplan"
# The control plan beside a FIFO named like its weights file: opening that for reading would block forever.
mkdir -p "$out/fifo"
cp "$out/control.zplan" "$out/fifo/control.zplan"
rm -f "$out/fifo/weights.bin"
mkfifo "$out/fifo/weights.bin"
ls -l "$out"
