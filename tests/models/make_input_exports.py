#!/usr/bin/env python3
"""Writes small decoder exports that take the inputs Hugging Face / optimum exports carry besides input_ids.

    python tests/models/make_input_exports.py [OUT_DIR]     (default: tests/models/inputs)

No torch: the graphs are written node by node with onnx.helper, in the form torch.onnx.export gives the
Hugging Face code (the causal and padding masks combined from `attention_mask` as transformers'
masking_utils does, the position embedding or the rotary angles computed from `position_ids`), with dynamic
dims named `batch_size` and `sequence_length` as optimum names them. Each model: 2 layers, hidden 32, 4 heads
of 8, vocabulary 64, weights from numpy's default_rng(0), inline. Folders:

  learned/   input_ids, attention_mask, position_ids, token_type_ids -> logits [B, S, V] (GPT-2's form:
             wte(ids) + wpe(position_ids) + wte(token_type_ids), LayerNorm, GELU MLP, tied head)
  rotary/    input_ids, attention_mask, position_ids -> logits [B, S, V] (llama's form: RMSNorm, the rotary
             angles position_ids x inv_freq, cos/sin [B, 1, S, 8] against q/k [B, 4, S, 8], SiLU-gated MLP)
  last/      as learned/ without token_type_ids, the head applied to the last position only: logits [B, 1, V]
             (the hidden states sliced at -1 along the sequence, as `logits_to_keep=1` exports do)
  gathered/  as last/, the last position taken by a Gather at -1 (`hidden[:, -1, :]`): logits [B, V]
  rotary_table/  input_ids, attention_mask -> logits [B, S, V]: as rotary/ without position_ids, cos/sin
             [S, 8] for arange(S), without a batch dim, broadcast by the products with q/k [B, 4, S, 8]
  window/    as learned/ without token_type_ids, the mask also a sliding window of 4 positions (Mistral's)
  alibi/     as learned/ without token_type_ids, ALiBi's bias slope[h] * (kv - q) added to the mask (BLOOM's)
             (these two are what generation refuses: tests/lit/generate/generate-invalid.test)
  legacy/    as learned/ without token_type_ids, transformers 4's GPT-2 masking: where(causal, scores, min)
             plus (1 - attention_mask) * min

Each folder also gets input_ids.npy (int64 [2, 8], default_rng(1)) and the onnxruntime reference of
tests/lit/Inputs/ort_greedy.py is the oracle of the lit tests that run them (tests/lit/generate/
generate-inputs.test). Rerunning the script writes the same bytes.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
N = helper.make_node
V, D, H, DH, FF, LAYERS = 64, 32, 4, 8, 64, 2


class Graph:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def w(self, name, *shape, scale=None, mean=0.0):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        self.inits.append(numpy_helper.from_array(
            (mean + self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(self, value, dtype=np.int64):
        """A Constant node (how the dynamo exporter writes small constants)."""
        self.count += 1
        name = f"val_{self.count}"
        self.nodes.append(N("Constant", [], [name], name=f"const_{self.count}",
                            value=numpy_helper.from_array(np.array(value, dtype=dtype), name)))
        return name

    def op(self, kind, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_{k}" for k in range(n_out)]
        self.nodes.append(N(kind, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x, name, n_in, n_out, bias=True):
        y = self.op("MatMul", [x, self.w(name + ".weight", n_in, n_out)], name + "_mm")
        return self.op("Add", [y, self.w(name + ".bias", n_out, scale=0.1)], name) if bias else y


def dims_in(name, elem):
    return helper.make_tensor_value_info(name, elem, ["batch_size", "sequence_length"])


def mask(g, kind=None):
    """transformers' sdpa/eager mask from attention_mask: causal (kv <= q) and padding (attention_mask[b, kv]
    != 0), as an additive float mask [B, 1, S, S] (0 or the float minimum). kind "window": also kv > q - 4 (a
    sliding window of 4 positions, as Mistral's); "alibi": plus ALiBi's bias slope[h] * (kv - q) ([B, H, S, S],
    as BLOOM's)."""
    s = g.op("Shape", ["input_ids"], "seq_shape", start=1, end=2)
    sl = g.op("Squeeze", [s], "seq_len")
    ar = g.op("Range", [g.c(0), sl, g.c(1)], "cache_position")
    q_idx = g.op("Unsqueeze", [ar, g.c([1])], "q_idx")
    kv_idx = g.op("Unsqueeze", [ar, g.c([0])], "kv_idx")
    causal = g.op("LessOrEqual", [kv_idx, q_idx], "causal")
    if kind == "legacy":
        # transformers 4's GPT-2: the scores kept by the boolean causal mask, then the padding mask
        # (1 - attention_mask[:, None, None, :]) * min added (attention() takes both).
        amf = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.c([1, 2])], "padding_4d")], "padding_float",
                   to=F)
        pad = g.op("Mul", [g.op("Sub", [g.c(1.0, np.float32), amf], "padding_inverse"),
                           g.c(np.finfo(np.float32).min, np.float32)], "padding_additive")
        return causal, pad
    if kind == "window":
        inside = g.op("Greater", [kv_idx, g.op("Sub", [q_idx, g.c(4)], "window_start")], "inside_window")
        causal = g.op("And", [causal, inside], "sliding_window")
    pad = g.op("Cast", ["attention_mask"], "padding_bool", to=BOOL)
    pad4 = g.op("Unsqueeze", [pad, g.c([1, 2])], "padding_mask")
    keep = g.op("And", [causal, pad4], "mask_and")
    m = g.op("Where", [keep, g.c(0.0, np.float32), g.c(np.finfo(np.float32).min, np.float32)],
             "attention_mask_4d")
    if kind == "alibi":
        rel = g.op("Cast", [g.op("Sub", [kv_idx, q_idx], "relative")], "relative_float", to=F)
        slopes = g.c((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).reshape(1, H, 1, 1), np.float32)
        m = g.op("Add", [m, g.op("Mul", [slopes, rel], "alibi")], "attention_bias")
    return m


def heads(g, x, name):
    """[B, S, D] -> [B, H, S, DH]."""
    r = g.op("Reshape", [x, g.c([0, 0, H, DH])], name + "_split")
    return g.op("Transpose", [r], name + "_heads", perm=[0, 2, 1, 3])


def attention(g, q, k, v, m, name):
    kt = g.op("Transpose", [k], name + "_kt", perm=[0, 1, 3, 2])
    sc = g.op("Mul", [g.op("MatMul", [q, kt], name + "_qk"), g.c(1 / np.sqrt(DH), np.float32)],
              name + "_scale")
    if isinstance(m, tuple):  # mask(g, "legacy"): a boolean causal mask, then an additive padding mask
        sc = g.op("Where", [m[0], sc, g.c(np.finfo(np.float32).min, np.float32)], name + "_causal")
        m = m[1]
    p = g.op("Softmax", [g.op("Add", [sc, m], name + "_masked")], name + "_softmax", axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [p, v], name + "_pv")], name + "_merge", perm=[0, 2, 1, 3])
    return g.op("Reshape", [o, g.c([0, 0, D])], name + "_out")


def layer_norm(g, x, name):
    return g.op("LayerNormalization", [x, g.w(name + ".weight", D, scale=0.1, mean=1.0), g.w(name + ".bias", D, scale=0.1)],
                name, axis=-1, epsilon=1e-5)


def rms_norm(g, x, name):
    ms = g.op("ReduceMean", [g.op("Pow", [x, g.c(2.0, np.float32)], name + "_sq"), g.c([-1])], name + "_mean")
    r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.c(1e-6, np.float32)], name + "_eps")],
                                 name + "_sqrt")], name + "_rsqrt")
    return g.op("Mul", [g.op("Mul", [x, r], name + "_normed"), g.w(name + ".weight", D, scale=0.1, mean=1.0)], name)


def learned(last=None, token_types=True, mask_kind=None):
    g = Graph(0)
    wte, wpe = g.w("wte", V, D, scale=0.5), g.w("wpe", 32, D, scale=0.5)
    h = g.op("Add", [g.op("Gather", [wte, "input_ids"], "tok_embed"),
                     g.op("Gather", [wpe, "position_ids"], "pos_embed")], "embed_sum")
    if token_types:
        h = g.op("Add", [h, g.op("Gather", [wte, "token_type_ids"], "type_embed")], "embed_types")
    m = mask(g, mask_kind)
    for i in range(LAYERS):
        p = f"h{i}"
        x = layer_norm(g, h, p + ".ln_1")
        q, k, v = (heads(g, g.linear(x, f"{p}.{n}", D, D), f"{p}_{n}") for n in "qkv")
        h = g.op("Add", [h, g.linear(attention(g, q, k, v, m, p + "_attn"), p + ".proj", D, D)], p + "_res1")
        x = layer_norm(g, h, p + ".ln_2")
        f = g.op("Gelu", [g.linear(x, p + ".fc", D, FF)], p + "_gelu", approximate="tanh")
        h = g.op("Add", [h, g.linear(f, p + ".fc_out", FF, D)], p + "_res2")
    h = layer_norm(g, h, "ln_f")
    if last == "slice":
        h = g.op("Slice", [h, g.c([-1]), g.c([np.iinfo(np.int64).max]), g.c([1])], "last_position")
    elif last == "gather":
        h = g.op("Gather", [h, g.c(-1)], "last_position", axis=1)
    logits = g.op("MatMul", [h, g.op("Transpose", [wte], "wte_t", perm=[1, 0])], "logits")
    inputs = [dims_in("input_ids", I64), dims_in("attention_mask", I64), dims_in("position_ids", I64)]
    if token_types:
        inputs.append(dims_in("token_type_ids", I64))
    out = helper.make_tensor_value_info(logits, F, {None: ["batch_size", "sequence_length", V],
                                                    "slice": ["batch_size", 1, V], "gather": ["batch_size", V]}[last])
    return g, inputs, [out]


def rotary(table=False):
    g = Graph(0)
    h = g.op("Gather", [g.w("embed", V, D, scale=0.5), "input_ids"], "tok_embed")
    m = mask(g)
    if table:
        # Tables without a batch dim, as code that keeps cos/sin [S, 8] for arange(S) and lets the products
        # broadcast them over q/k [B, 4, S, 8] has them (no position_ids input).
        inv = g.c((1.0 / (10000 ** (np.arange(0, DH, 2) / DH)))[None, :], np.float32)
        s = g.op("Squeeze", [g.op("Shape", ["input_ids"], "table_seq_shape", start=1, end=2)], "table_seq")
        t = g.op("Cast", [g.op("Range", [g.c(0), s, g.c(1)], "table_positions")], "table_positions_float", to=F)
        freqs = g.op("Mul", [g.op("Unsqueeze", [t, g.c([1])], "table_column"), inv], "freqs")
        emb = g.op("Concat", [freqs, freqs], "emb", axis=-1)
        cos, sin = g.op("Cos", [emb], "cos"), g.op("Sin", [emb], "sin")
    else:
        # The angles as transformers' LlamaRotaryEmbedding computes them: inv_freq [1, 4, 1] expanded over the
        # batch, times position_ids [B, 1, S] as floats, transposed to [B, S, 4], doubled to [B, S, 8].
        inv = g.c((1.0 / (10000 ** (np.arange(0, DH, 2) / DH)))[None, :, None], np.float32)
        bsz = g.op("Shape", ["input_ids"], "batch_shape", start=0, end=1)
        inv_b = g.op("Expand", [inv, g.op("Concat", [bsz, g.c([DH // 2, 1])], "inv_shape", axis=0)],
                     "inv_freq_expanded")
        pos = g.op("Cast", [g.op("Unsqueeze", ["position_ids", g.c([1])], "pos_row")], "pos_float", to=F)
        freqs = g.op("Transpose", [g.op("MatMul", [inv_b, pos], "freqs_mm")], "freqs", perm=[0, 2, 1])
        emb = g.op("Concat", [freqs, freqs], "emb", axis=-1)
        cos = g.op("Unsqueeze", [g.op("Cos", [emb], "cos_raw"), g.c([1])], "cos")
        sin = g.op("Unsqueeze", [g.op("Sin", [emb], "sin_raw"), g.c([1])], "sin")

    def rope(x, name):
        x1 = g.op("Slice", [x, g.c([0]), g.c([DH // 2]), g.c([3])], name + "_x1")
        x2 = g.op("Slice", [x, g.c([DH // 2]), g.c([DH]), g.c([3])], name + "_x2")
        rot = g.op("Concat", [g.op("Neg", [x2], name + "_neg"), x1], name + "_rot", axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos], name + "_cos"), g.op("Mul", [rot, sin], name + "_sin")],
                    name + "_rope")

    for i in range(LAYERS):
        p = f"layers{i}"
        x = rms_norm(g, h, p + ".input_layernorm")
        q, k, v = (heads(g, g.linear(x, f"{p}.{n}_proj", D, D, bias=False), f"{p}_{n}") for n in "qkv")
        o = attention(g, rope(q, p + "_q"), rope(k, p + "_k"), v, m, p + "_attn")
        h = g.op("Add", [h, g.linear(o, p + ".o_proj", D, D, bias=False)], p + "_res1")
        x = rms_norm(g, h, p + ".post_attention_layernorm")
        gate = g.linear(x, p + ".gate_proj", D, FF, bias=False)
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate], p + "_sigmoid")], p + "_silu")
        up = g.op("Mul", [act, g.linear(x, p + ".up_proj", D, FF, bias=False)], p + "_gated")
        h = g.op("Add", [h, g.linear(up, p + ".down_proj", FF, D, bias=False)], p + "_res2")
    logits = g.linear(rms_norm(g, h, "norm"), "lm_head", D, V, bias=False)
    inputs = [dims_in("input_ids", I64), dims_in("attention_mask", I64)]
    if not table:
        inputs.append(dims_in("position_ids", I64))
    return g, inputs, [helper.make_tensor_value_info(logits, F, ["batch_size", "sequence_length", V])]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs")
    ids = np.random.default_rng(1).integers(0, V, (2, 8)).astype(np.int64)
    for folder, (g, inputs, outputs) in {"learned": learned(), "rotary": rotary(),
                                         "last": learned(last="slice", token_types=False),
                                         "gathered": learned(last="gather", token_types=False),
                                         "rotary_table": rotary(table=True),
                                         "window": learned(token_types=False, mask_kind="window"),
                                         "alibi": learned(token_types=False, mask_kind="alibi"),
                                         "legacy": learned(token_types=False, mask_kind="legacy")}.items():
        graph = helper.make_graph(g.nodes, folder, inputs, outputs, g.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                                  producer_name="make_input_exports.py")
        model.ir_version = 10
        onnx.checker.check_model(model, full_check=True)
        os.makedirs(os.path.join(out, folder), exist_ok=True)
        onnx.save(model, os.path.join(out, folder, "model.onnx"))
        np.save(os.path.join(out, folder, "input_ids.npy"), ids)
        print(f"{folder}: {len(g.nodes)} nodes, {sum(np.prod(t.dims) for t in g.inits)} weights, "
              f"inputs {[i.name for i in inputs]}")


if __name__ == "__main__":
    main()
