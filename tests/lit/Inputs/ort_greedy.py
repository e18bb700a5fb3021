#!/usr/bin/env python3
"""The oracle of the generation lit tests: greedy tokens by full recompute in onnxruntime.

    ort_greedy.py MODEL.onnx PROMPT.npy TOKENS.npy

TOKENS.npy (int64 [B, P + N], what zrun --generate wrote) must be the prompt PROMPT.npy [B, P] followed by the
N tokens that onnxruntime picks when it runs the graph on the whole sequence so far and takes the arg max of
the last position's logits (the recipe of tests/models/make_generate_refs.py). Prints the comparison and the
smallest gap between the best and the second-best logit; exits non-zero when a token differs.
"""
import sys

import numpy as np
import onnxruntime as ort

model, prompt_path, tokens_path = sys.argv[1:4]
got = np.load(tokens_path)
tokens = np.load(prompt_path).astype(np.int64)
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
ids = session.get_inputs()[0].name
gap = np.inf
while tokens.shape[1] < got.shape[1]:
    last = session.run(None, {ids: tokens})[0][:, -1, :].astype(np.float64)
    top2 = np.sort(last, axis=1)[:, -2:]
    gap = min(gap, float((top2[:, 1] - top2[:, 0]).min()))
    tokens = np.concatenate([tokens, last.argmax(axis=1)[:, None]], axis=1)
same = got.dtype == np.int64 and got.shape == tokens.shape and bool((got == tokens).all())
print(f"equal to onnxruntime's greedy recompute: {same} ({got.shape[1] - np.load(prompt_path).shape[1]} new "
      f"tokens, smallest gap {gap:.2g})")
if not same:
    sys.exit(f"zrun:\n{got}\nonnxruntime:\n{tokens}")
