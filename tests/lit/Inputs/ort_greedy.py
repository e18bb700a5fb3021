#!/usr/bin/env python3
"""The oracle of the generation lit tests: greedy tokens by full recompute in onnxruntime.

    ort_greedy.py MODEL.onnx PROMPT.npy TOKENS.npy [LENGTHS.npy]

TOKENS.npy (int64 [B, W], what zrun --generate wrote) must be the prompt PROMPT.npy [B, P] followed by the
N = W - P tokens that onnxruntime picks when it runs the graph on the whole sequence so far and takes the arg
max of the last position's logits (the recipe of tests/models/make_generate_refs.py; logits [B, V] are the
last position's). With LENGTHS.npy
(zrun's --prompt-lengths), sequence b is its first LENGTHS[b] prompt ids, run alone, followed by its N new
tokens; zrun repeats its last token up to W. The graph's other inputs get what a caller of the exported
model gives an unpadded sequence: attention_mask ones, position_ids and cache_position arange(length),
token_type_ids zeros, past keys and values (a float input of rank >= 3) an empty past: its symbolic dims but
dim 0 (the batch) 0, so that the attention_mask, past + sequence long, has the sequence's length, and
use_cache_branch (optimum's merged decoder) false. Prints the comparison and the smallest gap between the
best and the second-best logit; exits non-zero when a token differs.
"""
import sys

import numpy as np
import onnxruntime as ort

model, prompt_path, tokens_path = sys.argv[1:4]
got = np.load(tokens_path)
prompt = np.load(prompt_path).astype(np.int64)
lengths = np.load(sys.argv[4]) if len(sys.argv) > 4 else np.full(prompt.shape[0], prompt.shape[1])
new = got.shape[1] - prompt.shape[1]
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
          "tensor(float)": np.float32}


def feed(tokens):
    b, s = tokens.shape
    out = {}
    for i, inp in enumerate(session.get_inputs()):
        dtype = DTYPES[inp.type]
        if inp.name in ("attention_mask",):
            out[inp.name] = np.ones((b, s), dtype)
        elif inp.name == "position_ids":
            out[inp.name] = np.broadcast_to(np.arange(s, dtype=dtype), (b, s)).copy()
        elif inp.name == "cache_position":
            out[inp.name] = np.arange(s, dtype=dtype)
        elif inp.name == "token_type_ids":
            out[inp.name] = np.zeros((b, s), dtype)
        elif inp.name == "use_cache_branch":
            out[inp.name] = np.zeros(inp.shape, dtype)
        elif i == 0:
            out[inp.name] = tokens.astype(dtype)
        elif inp.type == "tensor(float)" and len(inp.shape) >= 3:
            out[inp.name] = np.zeros([b] + [d if isinstance(d, int) else 0 for d in inp.shape[1:]], dtype)
        else:
            sys.exit(f"ort_greedy.py: no value for the graph input '{inp.name}'")
    return out


def greedy(tokens):
    gap = np.inf
    for _ in range(new):
        logits = session.run(None, feed(tokens))[0]
        last = (logits if logits.ndim == 2 else logits[:, -1, :]).astype(np.float64)
        top2 = np.sort(last, axis=1)[:, -2:]
        gap = min(gap, float((top2[:, 1] - top2[:, 0]).min()))
        tokens = np.concatenate([tokens, last.argmax(axis=1)[:, None]], axis=1)
    return tokens, gap


if (lengths == prompt.shape[1]).all():
    want, gap = greedy(prompt)
else:
    want, gap = np.zeros((prompt.shape[0], got.shape[1]), np.int64), np.inf
    for b, n in enumerate(lengths):
        row, g = greedy(prompt[b:b + 1, :n])
        want[b, :n + new] = row[0]
        want[b, n + new:] = row[0, -1]
        gap = min(gap, g)
same = got.dtype == np.int64 and got.shape == want.shape and bool((got == want).all())
print(f"equal to onnxruntime's greedy recompute: {same} ({new} new tokens, smallest gap {gap:.2g})")
if not same:
    sys.exit(f"zrun:\n{got}\nonnxruntime:\n{want}")
