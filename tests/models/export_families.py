#!/usr/bin/env python3
"""Exports more decoder families as test models, the way tests/models/README.md describes gpt2 and llama.

Run where torch and transformers are installed (the GPU machine; CPU is enough):

    python tests/models/export_families.py OUT_DIR [--families qwen2,mistral,phi3,gemma,gpt_neox,opt]

For each family: the Hugging Face *ForCausalLM class built from a small config with torch.manual_seed(0)
(2 layers, hidden 64, 4 heads, vocab 512; grouped K/V heads where the family has them), exported by
torch.onnx.export(dynamo=True) with dynamic batch and sequence axes and the weights as external data, into
OUT_DIR/<family>/: model.onnx (+ its data file), input_ids.npy (int64 [2, 16], torch.manual_seed(1)),
expected_output.npy (the float32 logits PyTorch computed), input_ids_b4.npy / expected_output_b4.npy (the
two rows, then the same two reversed), and config.json. It checks each export with onnxruntime when that is
installed, and prints the largest difference from PyTorch. Copy the folders into tests/models/ afterwards.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers

COMMON = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64)

# family -> (config class, model class, extra config fields)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(intermediate_size=172, num_key_value_heads=2, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(intermediate_size=172, num_key_value_heads=2, sliding_window=None)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(intermediate_size=172, num_key_value_heads=4, pad_token_id=0)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM",
              dict(intermediate_size=172, num_key_value_heads=1, head_dim=16)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 dict(intermediate_size=256, rotary_pct=0.25, use_parallel_residual=True)),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(ffn_dim=256, word_embed_proj_dim=64, enable_bias=True, do_layer_norm_before=True)),
}


def export(family, out_root):
    cfg_name, model_name, extra = FAMILIES[family]
    fields = dict(COMMON)
    fields.update(extra)
    config = getattr(transformers, cfg_name)(**fields)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    torch.manual_seed(1)
    ids = torch.randint(0, COMMON["vocab_size"], (2, 16), dtype=torch.int64)
    ids_b4 = torch.cat([ids, ids.flip(0)], 0)
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits.float().numpy()
        ref_b4 = model(input_ids=ids_b4, use_cache=False).logits.float().numpy()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    out = os.path.join(out_root, family)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=64)
    torch.onnx.export(Logits(model).eval(), (ids,), path, dynamo=True, external_data=True,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    np.save(os.path.join(out, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(out, "expected_output.npy"), ref)
    np.save(os.path.join(out, "input_ids_b4.npy"), ids_b4.numpy())
    np.save(os.path.join(out, "expected_output_b4.npy"), ref_b4)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config.to_dict(), f, indent=1, default=str)
    diff = None
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, {"input_ids": ids.numpy()})[0]
        diff = float(np.max(np.abs(got - ref)))
    except ImportError:
        pass
    print(f"{family}: {model_name} -> {out} (onnxruntime vs PyTorch: {diff})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--families", default=",".join(FAMILIES))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failed = []
    for fam in args.families.split(","):
        try:
            export(fam, args.out)
        except Exception as e:  # one family's failure must not hide the others
            print(f"{fam}: FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append(fam)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
