#!/usr/bin/env python3
"""Writes greedy generation references for the test models by full recompute in onnxruntime.

    python tests/models/make_generate_refs.py [--models qwen2,mistral,...] [--new-tokens 24] [--check]

For each model folder under tests/models: the exported graph (model.onnx) runs in onnxruntime on the whole
sequence so far, [2, 16 + t] tokens starting from input_ids.npy, and the arg max of the last position's logits
is token t; no KV cache is involved, so the reference is independent of zplan's and Hugging Face's caches.
It writes expected_generate.npy (int64 [2, 16 + new]) beside the model, as tests/e2e/run_generate.sh reads it.

Before writing, the first (prefill) call must reproduce expected_output.npy (PyTorch's logits) within
--tolerance, else nothing is written for that model. It prints, per model, that difference and the smallest
gap between the best and the second-best logit over all steps and rows: a compiled plan whose logits are
closer to the graph's than that gap picks the same tokens. --check compares with the file already there
instead of writing it (gpt2's and llama's come from Hugging Face generate with a KV cache; the recompute
gives the same tokens).
"""
import argparse
import os
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = ["qwen2", "mistral", "phi3", "gemma", "gpt_neox", "opt"]


def greedy(session, prompt, new_tokens):
    """Returns the prompt followed by new_tokens greedy tokens, the first call's logits and the smallest gap."""
    tokens = prompt.astype(np.int64)
    first, gap = None, np.inf
    for _ in range(new_tokens):
        logits = session.run(["logits"], {"input_ids": tokens})[0]
        if first is None:
            first = logits
        last = logits[:, -1, :].astype(np.float64)
        top2 = np.sort(last, axis=1)[:, -2:]
        gap = min(gap, float((top2[:, 1] - top2[:, 0]).min()))
        tokens = np.concatenate([tokens, last.argmax(axis=1)[:, None].astype(np.int64)], axis=1)
    return tokens, first, gap


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(FAMILIES), help="comma-separated folders of tests/models")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="largest allowed difference of the prefill logits from expected_output.npy")
    parser.add_argument("--check", action="store_true",
                        help="compare with the existing expected_generate.npy instead of writing it")
    args = parser.parse_args()

    print(f"onnxruntime {ort.__version__}")
    failed = []
    for model in args.models.split(","):
        folder = os.path.join(HERE, model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(os.path.join(folder, "model.onnx"), options,
                                       providers=["CPUExecutionProvider"])
        prompt = np.load(os.path.join(folder, "input_ids.npy"))
        tokens, first, gap = greedy(session, prompt, args.new_tokens)
        prefill = float(np.abs(first - np.load(os.path.join(folder, "expected_output.npy"))).max())
        line = f"{model}: prefill vs expected_output.npy {prefill:.2e}, smallest best-second gap {gap:.2e}"
        if prefill > args.tolerance:
            print(f"{line}: prefill differs by more than {args.tolerance:g}, nothing written")
            failed.append(model)
            continue
        target = os.path.join(folder, "expected_generate.npy")
        if args.check:
            same = np.array_equal(np.load(target), tokens)
            print(f"{line}: {'equal to' if same else 'DIFFERENT FROM'} {model}/expected_generate.npy")
            if not same:
                failed.append(model)
        else:
            np.save(target, tokens)
            print(f"{line}: wrote {model}/expected_generate.npy {tokens.dtype} {list(tokens.shape)}")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
