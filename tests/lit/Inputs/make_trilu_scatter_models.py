#!/usr/bin/env python3
"""Small models with Trilu and ScatterND (tests/lit/import/trilu-scatternd.test), each with inputs and
onnxruntime's outputs as .npy files beside it.

    python make_trilu_scatter_models.py OUT_DIR

- runtime.onnx: x [2, 3, 4, 6], u [2, 3, 4, 2] (float) -> lower = Trilu(x, k=-1, upper=0),
  upper = Trilu(x) (k 0, upper), written = ScatterND(x, I, u): I the constant indices of x[:, :, :, 1:3]
  (as torch's `mask[:, :, :, :n] = ...` exports, here columns 1 and 2), and first = ScatterND(x, J, r) with
  J [[1], [0]] writing whole [3, 4, 6] slices r = x[::-1] + 1 at batch rows 1 and 0.
- folded.onnx: x [4, 6] -> y = x + ScatterND(Trilu(C, k=1), I2, D): C, D Constant nodes (transformers 4's causal mask:
  a full tensor of min, its upper triangle kept, then a column slice written back).
- reduction.onnx: a ScatterND with reduction 'add' (refused, naming the node).
- indices_input.onnx: a ScatterND whose indices are an input (refused, naming the node and the indices).
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def save(model, out, name, feeds):
    onnx.checker.check_model(model)
    path = os.path.join(out, name + ".onnx")
    onnx.save(model, path)
    if feeds is None:
        return
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k, v in feeds.items():
        np.save(os.path.join(out, f"{name}.{k}.npy"), v)
    for o, v in zip(sess.get_outputs(), sess.run(None, feeds)):
        np.save(os.path.join(out, f"{name}.expected.{o.name}.npy"), v)


def column_indices(shape, lo, hi):
    """The ScatterND indices of x[..., lo:hi] for x of `shape`: [*shape[:-1], hi - lo, rank]."""
    grids = np.meshgrid(*[np.arange(s) for s in shape[:-1]], np.arange(lo, hi), indexing="ij")
    return np.stack(grids, axis=-1).astype(np.int64)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    opset = [helper.make_opsetid("", 17)]

    # runtime.onnx
    idx = column_indices((2, 3, 4, 6), 1, 3)
    nodes = [
        helper.make_node("Trilu", ["x", "km1"], ["lower"], name="lower", upper=0),
        helper.make_node("Trilu", ["x"], ["upper"], name="upper"),
        helper.make_node("ScatterND", ["x", "I", "u"], ["written"], name="columns"),
        helper.make_node("Slice", ["x", "s0", "s1", "s2", "sm1"], ["rev"], name="reverse"),
        helper.make_node("Add", ["rev", "one"], ["r"], name="plus_one"),
        helper.make_node("ScatterND", ["x", "J", "r"], ["first"], name="rows"),
    ]
    inits = [numpy_helper.from_array(np.array(-1, np.int64), "km1"), numpy_helper.from_array(idx, "I"),
             numpy_helper.from_array(np.array([1, 0], np.int64).reshape(2, 1), "J"),
             numpy_helper.from_array(np.array([-1], np.int64), "s0"),
             numpy_helper.from_array(np.array([-3], np.int64), "s1"),
             numpy_helper.from_array(np.array([0], np.int64), "s2"),
             numpy_helper.from_array(np.array([-1], np.int64), "sm1"),
             numpy_helper.from_array(np.array(1, np.float32), "one")]
    x4 = [2, 3, 4, 6]
    g = helper.make_graph(nodes, "runtime",
                          [helper.make_tensor_value_info("x", f32, x4),
                           helper.make_tensor_value_info("u", f32, [2, 3, 4, 2])],
                          [helper.make_tensor_value_info(n, f32, x4) for n in ("lower", "upper", "written", "first")],
                          inits)
    save(helper.make_model(g, opset_imports=opset), out, "runtime",
         {"x": rng.standard_normal(x4).astype(np.float32), "u": rng.standard_normal((2, 3, 4, 2)).astype(np.float32)})

    # folded.onnx
    lo = np.finfo(np.float32).min
    c = np.full((4, 6), lo, np.float32)
    d = rng.standard_normal((4, 2)).astype(np.float32)
    # Constant nodes, not initializers: a float initializer is a parameter, which the importer does not fold.
    nodes = [helper.make_node("Constant", [], ["C"], name="full", value=numpy_helper.from_array(c)),
             helper.make_node("Constant", [], ["D"], name="padding", value=numpy_helper.from_array(d)),
             helper.make_node("Trilu", ["C", "k1"], ["tri"], name="triu"),
             helper.make_node("ScatterND", ["tri", "I2", "D"], ["mask"], name="write"),
             helper.make_node("Add", ["x", "mask"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "k1"),
             numpy_helper.from_array(column_indices((4, 6), 0, 2), "I2")]
    g = helper.make_graph(nodes, "folded", [helper.make_tensor_value_info("x", f32, [4, 6])],
                          [helper.make_tensor_value_info("y", f32, [4, 6])], inits)
    save(helper.make_model(g, opset_imports=opset), out, "folded",
         {"x": rng.standard_normal((4, 6)).astype(np.float32)})

    # reduction.onnx
    nodes = [helper.make_node("ScatterND", ["x", "J", "u"], ["y"], name="accumulate", reduction="add")]
    g = helper.make_graph(nodes, "reduction",
                          [helper.make_tensor_value_info("x", f32, [2, 3]), helper.make_tensor_value_info("u", f32, [2, 3])],
                          [helper.make_tensor_value_info("y", f32, [2, 3])],
                          [numpy_helper.from_array(np.array([[1], [0]], np.int64), "J")])
    save(helper.make_model(g, opset_imports=opset), out, "reduction", None)

    # indices_input.onnx
    nodes = [helper.make_node("ScatterND", ["x", "J", "u"], ["y"], name="dynamic")]
    g = helper.make_graph(nodes, "indices_input",
                          [helper.make_tensor_value_info("x", f32, [2, 3]),
                           helper.make_tensor_value_info("J", TensorProto.INT64, [2, 1]),
                           helper.make_tensor_value_info("u", f32, [2, 3])],
                          [helper.make_tensor_value_info("y", f32, [2, 3])])
    save(helper.make_model(g, opset_imports=opset), out, "indices_input", None)


if __name__ == "__main__":
    main(sys.argv[1])
