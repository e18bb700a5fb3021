#!/usr/bin/env python3
"""Generates the small ONNX models of the importer's lit tests.

Run with the project's venv (onnx from PyPI):
    .venv/bin/python tests/lit/Inputs/import/gen_models.py
Every model is tiny and deterministic; the generated files are committed so
that the tests need no Python. Each model exercises one importer feature or
one recognised pattern; the bad_* models are the negative cases.
"""
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def save(name, nodes, inputs, outputs, inits=(), opset=20, ir=10):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.save(m, os.path.join(HERE, name + ".onnx"))
    return m


def x_in(shape=("batch", "seq", 8), name="x", dtype=F):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def y_out(name="y", dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


N = helper.make_node

# --- linear: MatMul + Add with W [in, out]; Gemm with transB (W [out, in])
# around reshapes of 3-D activations; Transpose(W) -> MatMul.
save("linear_matmul_add",
     [N("MatMul", ["x", "W"], ["m"], name="mm"), N("Add", ["m", "b"], ["y"], name="bias")],
     [x_in()], [y_out()], [w("W", 8, 16), w("b", 16)])
save("linear_gemm",
     [N("Shape", ["x"], ["s"], name="shape"),
      N("Reshape", ["x", "flat"], ["x2"], name="flatten"),
      N("Gemm", ["x2", "W", "b"], ["g"], name="gemm", transB=1),
      N("Slice", ["s", "zero", "two"], ["lead"], name="lead"),
      N("Concat", ["lead", "sixteen"], ["oshape"], name="oshape", axis=0),
      N("Reshape", ["g", "oshape"], ["y"], name="unflatten")],
     [x_in()], [y_out()],
     [w("W", 16, 8), w("b", 16), c("flat", [-1, 8], np.int64), c("zero", [0], np.int64),
      c("two", [2], np.int64), c("sixteen", [16], np.int64)])
save("linear_transposed_weight",
     [N("Transpose", ["W"], ["Wt"], name="wt", perm=[1, 0]), N("MatMul", ["x", "Wt"], ["y"], name="mm")],
     [x_in()], [y_out()], [w("W", 16, 8)])
# Not a linear: both operands are activations.
save("matmul_activations",
     [N("MatMul", ["x", "z"], ["y"], name="mm")],
     [x_in(("batch", 4, 8)), x_in(("batch", 8, 4), "z")], [y_out()])

# --- GELU: the Gelu op, the erf form (Div by sqrt 2) and the tanh form (Pow 3).
save("gelu_op", [N("Gelu", ["x"], ["y"], name="gelu")], [x_in()], [y_out()])
save("gelu_erf",
     [N("Div", ["x", "sqrt2"], ["d"], name="div"), N("Erf", ["d"], ["e"], name="erf"),
      N("Add", ["e", "one"], ["a"], name="add1"), N("Mul", ["x", "a"], ["m"], name="mulx"),
      N("Mul", ["m", "half"], ["y"], name="half")],
     [x_in()], [y_out()], [c("sqrt2", math.sqrt(2.0)), c("one", 1.0), c("half", 0.5)])
save("gelu_tanh",
     [N("Pow", ["x", "three"], ["p"], name="cube"), N("Mul", ["p", "k"], ["pk"], name="k"),
      N("Add", ["x", "pk"], ["inner"], name="inner"), N("Mul", ["inner", "s2pi"], ["t0"], name="s2pi"),
      N("Tanh", ["t0"], ["t"], name="tanh"), N("Add", ["t", "one"], ["a"], name="add1"),
      N("Mul", ["x", "half"], ["hx"], name="halfx"), N("Mul", ["hx", "a"], ["y"], name="out")],
     [x_in()], [y_out()],
     [c("three", 3.0), c("k", 0.044715), c("s2pi", math.sqrt(2 / math.pi)), c("one", 1.0), c("half", 0.5)])
# Not GELU: the erf argument is scaled by 0.5 instead of 1/sqrt(2).
save("gelu_wrong_constant",
     [N("Mul", ["x", "half"], ["d"], name="scale"), N("Erf", ["d"], ["e"], name="erf"),
      N("Add", ["e", "one"], ["a"], name="add1"), N("Mul", ["x", "a"], ["m"], name="mulx"),
      N("Mul", ["m", "half"], ["y"], name="half")],
     [x_in()], [y_out()], [c("one", 1.0), c("half", 0.5)])

# --- SiLU, layer norm (op and decomposed), RMS norm (decomposed), softmax (decomposed).
save("silu", [N("Sigmoid", ["x"], ["s"], name="sig"), N("Mul", ["x", "s"], ["y"], name="mul")],
     [x_in()], [y_out()])
save("layer_norm_op",
     [N("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5)],
     [x_in()], [y_out()], [w("g", 8), w("b", 8)], opset=17)
save("layer_norm_decomposed",
     [N("ReduceMean", ["x", "axes"], ["mu"], name="mean", keepdims=1),
      N("Sub", ["x", "mu"], ["d"], name="centre"), N("Pow", ["d", "two"], ["d2"], name="sq"),
      N("ReduceMean", ["d2", "axes"], ["var"], name="var", keepdims=1),
      N("Add", ["var", "eps"], ["ve"], name="eps"), N("Sqrt", ["ve"], ["sd"], name="sqrt"),
      N("Div", ["d", "sd"], ["n"], name="norm"), N("Mul", ["n", "g"], ["ng"], name="scale"),
      N("Add", ["ng", "b"], ["y"], name="shift")],
     [x_in()], [y_out()],
     [c("axes", [-1], np.int64), c("two", 2.0), c("eps", 1e-5), w("g", 8), w("b", 8)], opset=18)
save("rms_norm",
     [N("Pow", ["x", "two"], ["p"], name="sq"),
      N("ReduceMean", ["p", "axes"], ["m"], name="mean", keepdims=1),
      N("Add", ["m", "eps"], ["a"], name="eps"), N("Sqrt", ["a"], ["s"], name="sqrt"),
      N("Reciprocal", ["s"], ["r"], name="rsqrt"), N("Mul", ["x", "r"], ["n"], name="norm"),
      N("Mul", ["g", "n"], ["y"], name="scale")],
     [x_in()], [y_out()], [c("two", 2.0), c("axes", [-1], np.int64), c("eps", 1e-6), w("g", 8)])
# Opset 13: ReduceMean takes axes as an attribute.
save("rms_norm_opset13",
     [N("Mul", ["x", "x"], ["p"], name="sq"),
      N("ReduceMean", ["p"], ["m"], name="mean", axes=[-1], keepdims=1),
      N("Add", ["m", "eps"], ["a"], name="eps"), N("Sqrt", ["a"], ["s"], name="sqrt"),
      N("Div", ["x", "s"], ["y"], name="norm")],
     [x_in()], [y_out()], [c("eps", 1e-6)], opset=13, ir=7)
# Not an RMS norm: the mean runs over the first axis.
save("rms_norm_wrong_axis",
     [N("Pow", ["x", "two"], ["p"], name="sq"),
      N("ReduceMean", ["p", "axes"], ["m"], name="mean", keepdims=1),
      N("Add", ["m", "eps"], ["a"], name="eps"), N("Sqrt", ["a"], ["s"], name="sqrt"),
      N("Reciprocal", ["s"], ["r"], name="rsqrt"), N("Mul", ["x", "r"], ["y"], name="norm")],
     [x_in()], [y_out()], [c("two", 2.0), c("axes", [0], np.int64), c("eps", 1e-6)])
save("softmax_decomposed",
     [N("ReduceMax", ["x", "axes"], ["mx"], name="max", keepdims=1),
      N("Sub", ["x", "mx"], ["d"], name="sub"), N("Exp", ["d"], ["e"], name="exp"),
      N("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
      N("Div", ["e", "s"], ["y"], name="div")],
     [x_in()], [y_out()], [c("axes", [-1], np.int64)])

# --- attention: q/k/v [B, H, S, D] as inputs. Causal mask built from shapes
# (Range, Unsqueeze, LessOrEqual, Where) as the exporters do.
def causal_nodes(seq_src):
    return [
        N("Shape", [seq_src], ["qs"], name="qshape", start=2, end=3),
        N("Squeeze", ["qs"], ["s"], name="seqlen"),
        N("Range", ["z", "s", "o"], ["r"], name="arange"),
        N("Unsqueeze", ["r", "ax0"], ["row"], name="row"),
        N("Unsqueeze", ["r", "ax1"], ["col"], name="col"),
        N("LessOrEqual", ["row", "col"], ["keep"], name="keep"),
        N("Where", ["keep", "zero", "ninf"], ["mask"], name="mask"),
    ]


attn_inits = [c("z", 0, np.int64), c("o", 1, np.int64), c("ax0", [0], np.int64),
              c("ax1", [1], np.int64), c("zero", 0.0), c("ninf", -np.inf), c("scale", 0.25)]
qkv = [x_in(("batch", 4, "seq", 16), n) for n in ("q", "k", "v")]
save("attention_causal",
     causal_nodes("q") + [
         N("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
         N("MatMul", ["q", "kt"], ["qk"], name="qk"), N("Mul", ["qk", "scale"], ["sc"], name="scale"),
         N("Add", ["sc", "mask"], ["sm_in"], name="addmask"),
         N("Softmax", ["sm_in"], ["p"], name="softmax", axis=-1),
         N("MatMul", ["p", "v"], ["y"], name="pv")],
     qkv, [y_out()], attn_inits)
# Boolean mask from a graph input, scale as division, NaN guard after softmax.
save("attention_bool_mask",
     [N("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
      N("MatMul", ["q", "kt"], ["qk"], name="qk"), N("Div", ["qk", "four"], ["sc"], name="scale"),
      N("Where", ["keep", "sc", "ninf"], ["sm_in"], name="mask"),
      N("Softmax", ["sm_in"], ["p0"], name="softmax", axis=-1),
      N("IsNaN", ["p0"], ["nan"], name="isnan"), N("Where", ["nan", "zero", "p0"], ["p"], name="guard"),
      N("MatMul", ["p", "v"], ["y"], name="pv")],
     qkv + [x_in(("batch", 1, "seq", "seq"), "keep", TensorProto.BOOL)], [y_out()],
     [c("four", 4.0), c("ninf", -np.inf), c("zero", 0.0)])
# Grouped-query attention: 2 kv heads repeated twice (Unsqueeze, Expand, Reshape).
gqa_kv = [x_in(("batch", 2, "seq", 16), n) for n in ("k", "v")]
def repeat(src, dst):
    return [N("Unsqueeze", [src], [src + "_u"], name=src + "_unsq", axes=None) if False else
            N("Unsqueeze", [src, "ax2"], [src + "_u"], name=src + "_unsq"),
            N("Shape", [src], [src + "_s"], name=src + "_shape"),
            N("Gather", [src + "_s", "i0"], [src + "_b"], name=src + "_b", axis=0),
            N("Gather", [src + "_s", "i2"], [src + "_t"], name=src + "_t", axis=0),
            N("Concat", [src + "_b", "two_heads", "rep", src + "_t", "dh"], [src + "_es"], name=src + "_es", axis=0),
            N("Expand", [src + "_u", src + "_es"], [src + "_e"], name=src + "_expand"),
            N("Concat", [src + "_b", "four_heads", src + "_t", "dh"], [src + "_rs"], name=src + "_rs", axis=0),
            N("Reshape", [src + "_e", src + "_rs"], [dst], name=src + "_reshape")]
save("attention_gqa",
     causal_nodes("q") + repeat("k", "kr") + repeat("v", "vr") + [
         N("Transpose", ["kr"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
         N("MatMul", ["q", "kt"], ["qk"], name="qk"), N("Mul", ["qk", "scale"], ["sc"], name="scale"),
         N("Add", ["sc", "mask"], ["sm_in"], name="addmask"),
         N("Softmax", ["sm_in"], ["p"], name="softmax", axis=-1),
         N("MatMul", ["p", "vr"], ["y"], name="pv")],
     [qkv[0]] + gqa_kv, [y_out()],
     attn_inits + [c("ax2", [2], np.int64), c("i0", [0], np.int64), c("i2", [2], np.int64),
                   c("two_heads", [2], np.int64), c("rep", [2], np.int64), c("four_heads", [4], np.int64),
                   c("dh", [16], np.int64)])
# Not attention: softmax over axis 2.
save("attention_wrong_axis",
     [N("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
      N("MatMul", ["q", "kt"], ["qk"], name="qk"),
      N("Softmax", ["qk"], ["p"], name="softmax", axis=2),
      N("MatMul", ["p", "v"], ["y"], name="pv")],
     qkv, [y_out()])

# --- embedding and the tied LM head.
save("embedding_tied",
     [N("Gather", ["E", "ids"], ["h"], name="embed", axis=0),
      N("Transpose", ["E"], ["Et"], name="et", perm=[1, 0]),
      N("MatMul", ["h", "Et"], ["logits"], name="lm_head")],
     [x_in(("batch", "seq"), "ids", I64)], [y_out("logits")], [w("E", 32, 8)])

# --- opset handling: Split by sizes input (13) and by num_outputs (18),
# Squeeze / Unsqueeze axes as inputs (13+), ReduceSum axes input (13+).
save("split_opset13",
     [N("Split", ["x", "sizes"], ["a", "b"], name="split", axis=-1),
      N("Add", ["a", "b"], ["y"], name="add")],
     [x_in()], [y_out()], [c("sizes", [4, 4], np.int64)], opset=13, ir=7)
save("split_opset18",
     [N("Split", ["x"], ["a", "b"], name="split", axis=-1, num_outputs=2),
      N("Add", ["a", "b"], ["y"], name="add")],
     [x_in()], [y_out()], opset=18)
save("squeeze_reduce",
     [N("Unsqueeze", ["x", "ax"], ["u"], name="unsq"),
      N("ReduceSum", ["u", "rax"], ["r"], name="sum", keepdims=0),
      N("Squeeze", ["r"], ["y"], name="sq")],
     [x_in((1, "seq", 8))], [y_out()], [c("ax", [0], np.int64), c("rax", [-1], np.int64)], opset=13, ir=7)

# --- dims: named dims and --dim.
save("dims_named", [N("Relu", ["x"], ["y"], name="relu")],
     [x_in(("batch", "seq", "hidden"))], [y_out()])

# --- external data: a good model and every way to get it wrong.
def external_model(name, location, offset=0, length=None, write=True, size=None):
    t = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8), "W")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    save(name, [N("MatMul", ["x", "W"], ["y"], name="mm")], [x_in(("batch", 4))], [y_out()], [t])


with open(os.path.join(HERE, "weights.bin"), "wb") as f:
    f.write(np.arange(64, dtype=np.float32).tobytes())  # 256 bytes
external_model("ext_ok", "weights.bin", 128, 128)
external_model("bad_ext_missing", "no_such_file.bin", 0, 128)
external_model("bad_ext_range", "weights.bin", 200, 128)
external_model("bad_ext_length", "weights.bin", 0, 100)
external_model("bad_ext_absolute", "/etc/passwd", 0, 128)
external_model("bad_ext_escape", "../../../Inputs/import/weights.bin", 0, 128)

# --- structural errors.
save("bad_unsupported",
     [N("Relu", ["x"], ["a"], name="ok"), N("NonMaxSuppression", ["a"], ["b"], name="nms"),
      N("TopK", ["b", "k"], ["y", "i"], name="topk"), N("Foo", ["x"], ["z"], name="custom", domain="my.domain")],
     [x_in()], [y_out()], [c("k", [1], np.int64)])
save("bad_undefined", [N("Add", ["x", "ghost"], ["y"], name="add")], [x_in()], [y_out()])
save("bad_cycle",
     [N("Add", ["x", "b"], ["a"], name="first"), N("Relu", ["a"], ["b"], name="second"),
      N("Relu", ["a"], ["y"], name="out")],
     [x_in()], [y_out()])
save("bad_negative_dim", [N("Relu", ["x"], ["y"], name="relu")],
     [x_in((2, -3, 8))], [y_out()])
save("bad_overflow", [N("Relu", ["x"], ["y"], name="relu")],
     [x_in((2**40, 2**40, 8))], [y_out()])
save("bad_shape_mismatch", [N("Add", ["x", "z"], ["y"], name="add")],
     [x_in(("batch", "seq", 8)), x_in(("batch", "seq", 5), "z")], [y_out()])
save("bad_opset", [N("Relu", ["x"], ["y"], name="relu")], [x_in()], [y_out()], opset=6, ir=3)
# Opset 11: Softmax coerces to 2-D at axis 1 and normalises dims 1 and 2 together.
save("softmax_opset11", [N("Softmax", ["x"], ["y"], name="softmax", axis=1)], [x_in()], [y_out()],
     opset=11, ir=6)
# Opset 20: Pow with an int64 exponent; LayerNormalization with its Mean and InvStdDev outputs.
save("pow_int_exponent", [N("Pow", ["x", "e"], ["y"], name="pow")], [x_in()], [y_out()],
     [c("e", 2, np.int64)])
save("layer_norm_stats",
     [N("LayerNormalization", ["x", "g"], ["y", "mean", "inv"], name="ln", axis=-1)],
     [x_in()], [y_out(), y_out("mean"), y_out("inv")], [w("g", 8)], opset=17)
# Folding limits: an int64 shape computation that overflows, a constant too
# large to fold.
save("bad_fold_overflow",
     [N("Mul", ["big", "four"], ["s"], name="mul"), N("Reshape", ["x", "s"], ["y"], name="reshape")],
     [x_in()], [y_out()], [c("big", [2**62], np.int64), c("four", [4], np.int64)])
save("bad_fold_huge",
     [N("ConstantOfShape", ["shape"], ["z"], name="zeros"), N("Add", ["x", "z"], ["y"], name="add")],
     [x_in()], [y_out()], [c("shape", [2**20, 2**20], np.int64)])
# A truncated copy of a valid model.
data = open(os.path.join(HERE, "linear_matmul_add.onnx"), "rb").read()
open(os.path.join(HERE, "bad_truncated.onnx"), "wb").write(data[: len(data) // 2])
open(os.path.join(HERE, "bad_garbage.onnx"), "wb").write(b"\xff\xfe this is not a protobuf \x00\x01" * 4)
# Run-time forms: each op reads the activation x (or the int64 ids), so none of them folds. Range's start
# depends on ids, so its length comes from the declared shape of its output (a graph output here); without
# one it is refused.
save("runtime_ops",
     [N("Floor", ["x"], ["fl"], name="floor"), N("Ceil", ["x"], ["ce"], name="ceil"),
      N("Mod", ["x", "md"], ["mo"], name="mod", fmod=1),
      N("ReduceMin", ["x", "ax"], ["rmin"], name="rmin", keepdims=0),
      N("ReduceProd", ["x", "ax"], ["rprod"], name="rprod", keepdims=1),
      N("CumSum", ["x", "one"], ["cs"], name="cumsum", exclusive=1),
      N("Tile", ["x", "reps"], ["ti"], name="tile"),
      N("GatherElements", ["x", "gi"], ["ge"], name="gather_elements", axis=2),
      N("GatherND", ["x", "ni"], ["gn"], name="gather_nd", batch_dims=1),
      N("ReduceMin", ["ids"], ["s"], name="start", keepdims=0),
      N("Add", ["s", "four"], ["l"], name="limit"),
      N("Range", ["s", "l", "onei"], ["r"], name="range")],
     [x_in((2, 4, 8)), x_in((2, 4), "ids", I64)],
     [y_out("fl"), y_out("ce"), y_out("mo"), y_out("rmin"), y_out("rprod"), y_out("cs"), y_out("ti"),
      y_out("ge"), y_out("gn"), y_out("r", I64, [4])],
     [c("md", 1.5), c("ax", [-1], np.int64), c("one", 1, np.int64), c("reps", [1, 2, 1], np.int64),
      c("gi", [[[0, -1]] * 4] * 2, np.int64), c("ni", [[[1], [3]], [[0], [-1]]], np.int64),
      c("four", 4, np.int64), c("onei", 1, np.int64)], opset=18)
save("bad_range_length",
     [N("ReduceMin", ["ids"], ["s"], name="start", keepdims=0),
      N("Add", ["s", "four"], ["l"], name="limit"),
      N("Range", ["s", "l", "onei"], ["r"], name="range"),
      N("Cast", ["r"], ["y"], name="cast", to=F)],
     [x_in((2, 4), "ids", I64)], [y_out()],
     [c("four", 4, np.int64), c("onei", 1, np.int64)], opset=18)

# --- generation (tests/lit/generate): causal language models of one attention (q = k = v, one head) whose
# positions reach the embedding in different ways.
def one_head_lm(position_nodes, inits):
    return ([N("Gather", ["E", "ids"], ["tok"], name="embed", axis=0),
             N("Shape", ["ids"], ["ss"], name="ids_shape", start=1, end=2),
             N("Squeeze", ["ss"], ["sl"], name="ids_seq"),
             N("Range", ["z", "sl", "o"], ["ar"], name="positions")] + position_nodes +
            causal_nodes("q") + [
             N("Transpose", ["q"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
             N("MatMul", ["q", "kt"], ["qk"], name="qk"), N("Mul", ["qk", "scale"], ["sc"], name="scale"),
             N("Add", ["sc", "mask"], ["sm_in"], name="addmask"),
             N("Softmax", ["sm_in"], ["p"], name="softmax", axis=-1),
             N("MatMul", ["p", "q"], ["att"], name="pv"),
             N("Squeeze", ["att", "ax1"], ["ho"], name="merge_head"),
             N("MatMul", ["ho", "H"], ["logits"], name="lm_head")],
            [x_in(("batch", "seq"), "ids", I64)], [y_out("logits")], attn_inits + inits)


# Position ids arange(seq) plus a per-sequence offset ([[0], [1]] at batch 2): a position table [2, seq] whose
# rows differ, which --generate cannot offset by each cached length (generate-invalid.test).
save("generate_position_rows",
     *one_head_lm([N("Unsqueeze", ["ar", "ax0"], ["ar0"], name="positions_row"),
                   N("Add", ["ar0", "offsets"], ["pos"], name="positions_per_sequence"),
                   N("Gather", ["P", "pos"], ["pe"], name="position_embed", axis=0),
                   N("Add", ["tok", "pe"], ["h"], name="embed_sum"),
                   N("Unsqueeze", ["h", "ax1"], ["q"], name="one_head")],
                  [w("E", 32, 8), w("P", 64, 8), w("H", 8, 32), c("offsets", [[0], [1]], np.int64)]))
# nanoGPT's positions: wte(ids) + wpe(arange(seq)), the position ids [seq] without a batch dim, the
# embedding's rows [seq, 8] broadcast over the batch by the add (generate-positions.test).
save("generate_position_vector",
     *one_head_lm([N("Gather", ["P", "ar"], ["pe"], name="position_embed", axis=0),
                   N("Add", ["tok", "pe"], ["h"], name="embed_sum"),
                   N("Unsqueeze", ["h", "ax1"], ["q"], name="one_head")],
                  [w("E", 32, 8), w("P", 64, 8), w("H", 8, 32)]))
# Not offset per sequence: a table [seq, 1] of the positions as floats scales q [batch, 1, seq, 8], which
# broadcasts more than a leading batch dim over it, as a rotary table [seq, dim] would (generate-invalid.test).
save("generate_position_scale",
     *one_head_lm([N("Cast", ["ar"], ["arf"], name="positions_float", to=F),
                   N("Unsqueeze", ["arf", "ax1"], ["pcol"], name="positions_column"),
                   N("Unsqueeze", ["tok", "ax1"], ["t4"], name="one_head"),
                   N("Mul", ["t4", "pcol"], ["q"], name="position_scale")],
                  [w("E", 32, 8), w("H", 8, 32)]))
