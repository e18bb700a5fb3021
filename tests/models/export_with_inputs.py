#!/usr/bin/env python3
"""Real Hugging Face exports that take attention_mask and position_ids besides input_ids.

Run where torch, transformers and onnxruntime are installed (CPU is enough):

    python tests/models/export_with_inputs.py OUT_DIR [--models llama_dynamo,gpt2_ts,...]

(tests/models/hf_inputs holds llama_ts, gpt2_ts, qwen2_dynamo, llama_ts_present and llama_ts_fp16:
`--models llama_ts,gpt2_ts,qwen2_dynamo,llama_ts_present,llama_ts_fp16`.)

Each model is a transformers *ForCausalLM built from a small config with torch.manual_seed(0) (2 layers,
hidden 64, 4 heads, vocab 512, eager attention), wrapped so that the export takes input_ids, attention_mask
and position_ids ([batch, sequence], int64, dynamic batch and sequence axes, named batch_size /
sequence_length as optimum names them) and returns logits [batch, sequence, vocab], exported either by
torch.onnx.export(dynamo=True) (`_dynamo`, opset 20, weights as external data) or by the TorchScript exporter
(`_ts`, dynamo=False, opset 17, weights inline: the form of most published exports and of optimum's).
A name ending in `_present` (llama_ts_present) also returns each layer's present key and value
(present.<layer>.key / .value, use_cache=True), as optimum's decoder_model.onnx does; one ending in `_fp16`
(llama_ts_fp16) is the model in float16 (model.half(), fp16 weights, inputs int64, logits fp16; the
references are PyTorch's fp16 results; the export must match them within 2e-3).
OUT_DIR/<name>/ gets model.onnx (+ model.onnx.data for dynamo), input_ids.npy (int64 [2, 16],
torch.manual_seed(1)), expected_output.npy (PyTorch's float32 logits for a mask of ones and positions
0..15), attention_mask_padded.npy / position_ids_padded.npy / expected_output_padded.npy (the first row
left-padded by 3: mask zeros and position 0 there, positions 0..12 after; PyTorch's logits) and
expected_generate.npy (int64 [2, 40]: the prompt and 24 greedy new tokens from Hugging Face
`generate`, do_sample=False, KV cache on, no stop token). The script checks each export with onnxruntime
against PyTorch, with a mask of ones and with the first row left-padded by 3 (mask zeros, positions from
the first real token), and prints the largest differences; it writes nothing for a model whose export
differs by more than 1e-4.
"""
import argparse
import os
import sys

import numpy as np
import torch
import transformers

COMMON = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64)

ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(intermediate_size=172, num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(intermediate_size=172, num_key_value_heads=2, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(intermediate_size=172, num_key_value_heads=2, sliding_window=None)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, n_positions=64)),
}
MODELS = [f"{a}_{e}" for a in ARCHS for e in ("dynamo", "ts")]


class WithInputs(torch.nn.Module):
    """logits, or with `present` (use_cache=True, as optimum's decoder_model.onnx) the logits followed by each
    layer's present key and value [B, kv heads, S, head dim]."""

    def __init__(self, m, present=False):
        super().__init__()
        self.m = m
        self.present = present

    def forward(self, input_ids, attention_mask, position_ids):
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     use_cache=self.present)
        if not self.present:
            return out.logits
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


def build(arch):
    cfg_name, model_name, extra = ARCHS[arch]
    fields = dict(COMMON) if arch != "gpt2" else dict(vocab_size=512)
    fields.update(extra)
    config = getattr(transformers, cfg_name)(**fields)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config).eval()


def feeds(ids, pad=0):
    b, s = ids.shape
    mask = torch.ones(b, s, dtype=torch.int64)
    pos = torch.arange(s, dtype=torch.int64).expand(b, s).clone()
    if pad:
        mask[0, :pad] = 0
        pos[0] = (torch.arange(s) - pad).clamp(min=0)
    return ids, mask, pos


def export(name, out_root):
    fp16 = name.endswith("_fp16")
    name_ = name.removesuffix("_fp16")
    present = name_.endswith("_present")
    arch, exporter = name_.removesuffix("_present").rsplit("_", 1)
    model = build(arch)
    if fp16:
        model = model.half()
    torch.manual_seed(1)
    ids = torch.randint(0, 512, (2, 16), dtype=torch.int64)
    wrapped = WithInputs(model, present).eval()

    def logits(out):
        return (out[0] if present else out).float().numpy()

    with torch.no_grad():
        ref = logits(wrapped(*feeds(ids)))
        ref_pad = logits(wrapped(*feeds(ids, pad=3)))
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24,
                             min_new_tokens=24, eos_token_id=None, pad_token_id=0).numpy()
    assert gen.shape == (2, 40), gen.shape

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    names = ["input_ids", "attention_mask", "position_ids"]
    outputs = ["logits"] + ([f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")] if present else [])
    if exporter == "dynamo":
        batch, seq = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length", max=64)
        dims = {n: {0: batch, 1: seq} for n in names}
        torch.onnx.export(wrapped, feeds(ids), path, dynamo=True, external_data=True, input_names=names,
                          output_names=outputs, dynamic_shapes=dims)
        # The nodes' metadata holds the exporting machine's source paths (stack traces): dropped.
        import onnx
        proto = onnx.load(path)
        for node in proto.graph.node:
            del node.metadata_props[:]
        os.remove(path + ".data")
        onnx.save(proto, path, save_as_external_data=True, location="model.onnx.data")
    else:
        dims = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
        dims["logits"] = {0: "batch_size", 1: "sequence_length"}
        dims.update({o: {0: "batch_size", 2: "sequence_length"} for o in outputs[1:]})
        torch.onnx.export(wrapped, feeds(ids), path, dynamo=False, opset_version=17, input_names=names,
                          output_names=outputs, dynamic_axes=dims)

    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def run(*t):
        return sess.run(None, {n: x.numpy() for n, x in zip(names, t)})[0]

    assert [o.name for o in sess.get_outputs()] == outputs, sess.get_outputs()
    diff = float(np.abs(run(*feeds(ids)) - ref).max())
    diff_pad = float(np.abs(run(*feeds(ids, pad=3))[:, 3:] - ref_pad[:, 3:]).max())
    print(f"{name}: {type(model).__name__} -> {out}: onnxruntime vs PyTorch {diff:.2g}, "
          f"left-padded {diff_pad:.2g}", flush=True)
    if max(diff, diff_pad) > (2e-3 if fp16 else 1e-4):
        raise RuntimeError(f"the export differs from PyTorch by {max(diff, diff_pad)}")
    np.save(os.path.join(out, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(out, "expected_output.npy"), ref)
    _, mask, pos = feeds(ids, pad=3)
    np.save(os.path.join(out, "attention_mask_padded.npy"), mask.numpy())
    np.save(os.path.join(out, "position_ids_padded.npy"), pos.numpy())
    np.save(os.path.join(out, "expected_output_padded.npy"), ref_pad)
    np.save(os.path.join(out, "expected_generate.npy"), gen.astype(np.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failed = []
    for name in args.models.split(","):
        try:
            export(name, args.out)
        except Exception as e:  # one model's failure must not hide the others
            print(f"{name}: FAILED: {type(e).__name__}: {str(e)[:2000]}", flush=True)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
