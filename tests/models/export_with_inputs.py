#!/usr/bin/env python3
"""Real Hugging Face exports that take attention_mask and position_ids besides input_ids.

Run where torch, transformers and onnxruntime are installed (CPU is enough):

    python tests/models/export_with_inputs.py OUT_DIR [--models llama_dynamo,gpt2_ts,...]

(tests/models/hf_inputs holds llama_ts, gpt2_ts, qwen2_dynamo, llama_ts_present, llama_ts_fp16, llama_ts_past,
gpt2_ts_past and llama_ts_merged: `--models
llama_ts,gpt2_ts,qwen2_dynamo,llama_ts_present,llama_ts_fp16,llama_ts_past,gpt2_ts_past,llama_ts_merged`.)

Each model is a transformers *ForCausalLM built from a small config with torch.manual_seed(0) (2 layers,
hidden 64, 4 heads, vocab 512, eager attention), wrapped so that the export takes input_ids, attention_mask
and position_ids ([batch, sequence], int64, dynamic batch and sequence axes, named batch_size /
sequence_length as optimum names them) and returns logits [batch, sequence, vocab], exported either by
torch.onnx.export(dynamo=True) (`_dynamo`, opset 20, weights as external data) or by the TorchScript exporter
(`_ts`, dynamo=False, opset 17, weights inline: the form of most published exports and of optimum's).
A name ending in `_present` (llama_ts_present) also returns each layer's present key and value
(present.<layer>.key / .value, use_cache=True), as optimum's decoder_model.onnx does; one ending in `_fp16`
(llama_ts_fp16) is the model in float16 (model.half(), fp16 weights, inputs int64, logits fp16; the
references are PyTorch's fp16 results; the export must match them within 2e-3). One ending in `_past`
(llama_ts_past, gpt2_ts_past, llama_dynamo_past) also takes each layer's past key and value as inputs,
`past_key_values.<layer>.key` / `.value` [batch_size, kv heads, past_sequence_length, head dim] as optimum's
decoder_with_past_model.onnx names them, its attention_mask [batch_size, past_sequence_length +
sequence_length] (dynamo: its own dim, total, as torch.export takes no sum of dims) and position_ids counting
from the past length, and returns the logits and the present keys and values; it is traced with a past of 5
positions, so that the past length stays symbolic, and checked with onnxruntime against PyTorch both with that
past and with an empty one, and its greedy tokens by onnxruntime fed each step's present keys and values as the
next step's past against Hugging Face generate's. Its forward's references are for a past of 5 (the padded-mask
files are not written): <input>_past5.npy for each input but input_ids (the pasts torch.manual_seed(2) values)
and expected_output_past5.npy, PyTorch's logits. One ending in `_merged` (llama_ts_merged)
is optimum's decoder_model_merged.onnx form: the `_present` and `_past` exports of the model merged by optimum's
own merge_decoders (optimum.onnx; `pip install --no-deps optimum optimum-onnx` is enough), one If on the bool
input use_cache_branch [1] whose else branch is the graph without a past and whose then branch the one with a
past; checked with onnxruntime (use_cache_branch false and an empty past against PyTorch's logits; greedy
tokens, the first step without the cache, the others with it, against generate's).
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


class WithPast(torch.nn.Module):
    """As WithInputs with `present`, also taking each layer's past key and value (a DynamicCache built from
    them, as a caller of the model with use_cache=True passes it)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = transformers.DynamicCache(list(zip(past[0::2], past[1::2])))
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=cache, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


def drop_node_metadata(path):
    """A dynamo export's nodes carry the exporting machine's source paths (stack traces): dropped, the weights
    saved again as model.onnx.data beside it."""
    import onnx
    proto = onnx.load(path)
    for node in proto.graph.node:
        del node.metadata_props[:]
    os.remove(path + ".data")
    onnx.save(proto, path, save_as_external_data=True, location="model.onnx.data")


def past_of(model, batch, length):
    """Each layer's past key and value [batch, kv heads, length, head dim] (torch.manual_seed(2) values), in
    the order of the export's inputs."""
    c = model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    dim = c.hidden_size // c.num_attention_heads
    g = torch.Generator().manual_seed(2)
    return [torch.randn(batch, heads, length, dim, generator=g, dtype=next(model.parameters()).dtype)
            for _ in range(2 * c.num_hidden_layers)]


def export_past(name, exporter, model, ids, out_root):
    """The `_past` exports (see the module's docstring)."""
    wrapped = WithPast(model).eval()
    layers = model.config.num_hidden_layers
    b, s = ids.shape

    def feeds_past(p):
        mask = torch.ones(b, p + s, dtype=torch.int64)
        pos = torch.arange(p, p + s, dtype=torch.int64).expand(b, s).clone()
        return (ids, mask, pos, *past_of(model, b, p))

    with torch.no_grad():
        ref = wrapped(*feeds_past(0))[0].numpy()
        ref_past = wrapped(*feeds_past(5))[0].numpy()
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24,
                             min_new_tokens=24, eos_token_id=None, pad_token_id=0).numpy()
    assert gen.shape == (2, 40), gen.shape
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    kv = [f"past_key_values.{i}.{t}" for i in range(layers) for t in ("key", "value")]
    names = ["input_ids", "attention_mask", "position_ids"] + kv
    outputs = ["logits"] + [f"present.{i}.{t}" for i in range(layers) for t in ("key", "value")]
    total = "past_sequence_length + sequence_length"
    dims = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: total},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    dims.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in kv})
    dims.update({o: {0: "batch_size", 2: total} for o in outputs[1:]})
    with torch.no_grad():
        if exporter == "dynamo":
            # The mask's length gets a dim of its own: torch.export takes no sum of two dims.
            batch, seq = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length", max=64)
            past = torch.export.Dim("past_sequence_length", max=64)
            total_dim = torch.export.Dim("total", max=128)
            shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: total_dim},
                      "position_ids": {0: batch, 1: seq}, "past": tuple({0: batch, 2: past} for _ in kv)}
            torch.onnx.export(wrapped, feeds_past(5), path, dynamo=True, external_data=True, input_names=names,
                              output_names=outputs, dynamic_shapes=shapes)
            drop_node_metadata(path)
        else:
            torch.onnx.export(wrapped, feeds_past(5), path, dynamo=False, opset_version=17, input_names=names,
                              output_names=outputs, dynamic_axes=dims)

    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == names, sess.get_inputs()
    assert [o.name for o in sess.get_outputs()] == outputs, sess.get_outputs()

    def run(p):
        return sess.run(None, {n: x.numpy() for n, x in zip(names, feeds_past(p))})[0]

    diff, diff_past = float(np.abs(run(0) - ref).max()), float(np.abs(run(5) - ref_past).max())
    print(f"{name}: {type(model).__name__} -> {out}: onnxruntime vs PyTorch, empty past {diff:.2g}, "
          f"past of 5 {diff_past:.2g}", flush=True)
    if max(diff, diff_past) > 1e-4:
        raise RuntimeError(f"the export differs from PyTorch by {max(diff, diff_past)}")
    # The export's own cached path: onnxruntime's greedy tokens, each step fed the present keys and values of
    # the one before as its past, must be Hugging Face generate's.
    tokens = step = ids.numpy()
    past = [t.numpy() for t in past_of(model, b, 0)]
    for _ in range(24):
        p = past[0].shape[2]
        feed = [step, np.ones((b, p + step.shape[1]), np.int64),
                np.broadcast_to(np.arange(p, p + step.shape[1]), step.shape).astype(np.int64), *past]
        logits, *past = sess.run(None, dict(zip(names, feed)))
        step = logits[:, -1].argmax(axis=1)[:, None].astype(np.int64)
        tokens = np.concatenate([tokens, step], axis=1)
    print(f"{name}: onnxruntime's greedy tokens with the export's cache equal generate's: {(tokens == gen).all()}")
    if not (tokens == gen).all():
        raise RuntimeError(f"onnxruntime with the cache:\n{tokens}\ngenerate:\n{gen}")
    np.save(os.path.join(out, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(out, "expected_output.npy"), ref)
    np.save(os.path.join(out, "expected_generate.npy"), gen.astype(np.int64))
    # The forward with a past of 5 (its inputs as run inputs): each input but input_ids as <name>_past5.npy,
    # PyTorch's logits as expected_output_past5.npy.
    for n, x in list(zip(names, feeds_past(5)))[1:]:
        np.save(os.path.join(out, f"{n}_past5.npy"), x.numpy())
    np.save(os.path.join(out, "expected_output_past5.npy"), ref_past)


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


def export_merged(name, out_root):
    """The `_merged` exports (see the module's docstring)."""
    import shutil
    import tempfile

    from optimum.onnx import merge_decoders
    base = name.removesuffix("_merged")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        export(base + "_present", tmp)
        export(base + "_past", tmp)
        merge_decoders(os.path.join(tmp, base + "_present", "model.onnx"),
                       os.path.join(tmp, base + "_past", "model.onnx"), save_path=os.path.join(out, "model.onnx"))
        for f in ("input_ids.npy", "expected_output.npy", "expected_generate.npy"):
            shutil.copy(os.path.join(tmp, base + "_past", f), out)

    import onnxruntime as ort
    sess = ort.InferenceSession(os.path.join(out, "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    assert names[-1] == "use_cache_branch", names
    ids, ref, gen = (np.load(os.path.join(out, f)) for f in ("input_ids.npy", "expected_output.npy",
                                                              "expected_generate.npy"))
    b = ids.shape[0]
    past = [np.zeros((b, i.shape[1], 0, i.shape[3]), np.float32) for i in sess.get_inputs()[3:-1]]
    tokens = step = ids
    for k in range(24):
        p = past[0].shape[2]
        feed = [step, np.ones((b, p + step.shape[1]), np.int64),
                np.broadcast_to(np.arange(p, p + step.shape[1]), step.shape).astype(np.int64), *past,
                np.array([k > 0])]
        logits, *past = sess.run(None, dict(zip(names, feed)))
        if k == 0:
            diff = float(np.abs(logits - ref).max())
        step = logits[:, -1].argmax(axis=1)[:, None].astype(np.int64)
        tokens = np.concatenate([tokens, step], axis=1)
    same = bool((tokens == gen).all())
    print(f"{name}: onnxruntime, use_cache_branch false vs PyTorch {diff:.2g}; greedy tokens with the cache "
          f"branch equal generate's: {same}", flush=True)
    if diff > 1e-4 or not same:
        raise RuntimeError(f"{name}: the merged export differs (logits {diff}, tokens equal {same})")


def export(name, out_root):
    if name.endswith("_merged"):
        return export_merged(name, out_root)
    if name.endswith("_past"):
        arch, exporter = name.removesuffix("_past").rsplit("_", 1)
        torch.manual_seed(1)
        ids = torch.randint(0, 512, (2, 16), dtype=torch.int64)
        return export_past(name, exporter, build(arch), ids, out_root)
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
        drop_node_metadata(path)
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
