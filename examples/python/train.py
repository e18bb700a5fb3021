#!/usr/bin/env python3
"""Trains a small GPT-2 with zplan the way DeepSpeed's getting-started tutorial trains with DeepSpeed.

    mpirun -np 2 python examples/python/train.py      # two data-parallel ranks, ZeRO stage 1
    python examples/python/train.py --steps 20         # one rank

DeepSpeed's loop is deepspeed.initialize(model, config=ds_config), then forward, backward and step for each
batch, and save_checkpoint now and then. zplan.initialize compiles the whole training step ahead of time from
the same ds_config (for as many ranks as mpirun started), so the loop is one call per batch. The model is tests/models/gpt2 (a 2-layer GPT-2 exported from
Hugging Face; zplan.export_hf makes such a file from any Hugging Face model); the data is a toy language
that can be learnt: every sample counts up from a random start.
"""
import argparse
import os

import numpy as np

import zplan

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=os.path.join(here, "..", "..", "tests", "models", "gpt2", "model.onnx"))
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--save-dir", help="write a checkpoint every 10 steps under this folder")
args = parser.parse_args()

ds_config = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
    "zero_optimization": {"stage": 1},
}
engine = zplan.initialize(args.model, config=ds_config, seq=16)  # on every rank that mpirun started

rng = np.random.default_rng(0)
rows, seq = engine.batch_shape  # the global batch: 4 samples per data-parallel rank
vocab = engine.id_range[1]
for step in range(1, args.steps + 1):
    batch = rng.integers(0, vocab - seq, size=(rows, 1)) + np.arange(seq)  # every rank draws the same batch
    loss = engine.step(batch)
    if engine.rank == 0 and step % 5 == 0:
        print(f"step {step}: loss {loss:.4f}", flush=True)
    if args.save_dir and step % 10 == 0:
        engine.save_checkpoint(args.save_dir)
