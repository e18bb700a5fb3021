"""Writes a tiny decoder-like ONNX model whose vocabulary (10) no tp of 3 or 4
divides, its input ids and the logits numpy computes in float64.

Usage: make_vocab_model.py OUT_DIR
The model: token embedding (Gather) -> MLP pair (first bias a Constant node)
with a residual -> LM head (MatMul), weights as external data, dynamic batch
and sequence.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
V, D, F = 10, 8, 12
wte = rng.standard_normal((V, D)).astype(np.float32)
w1 = (rng.standard_normal((D, F)) * 0.5).astype(np.float32)
w2 = (rng.standard_normal((F, D)) * 0.5).astype(np.float32)
head = rng.standard_normal((D, V)).astype(np.float32)
bias1 = rng.standard_normal(F).astype(np.float32)

nodes = [
    helper.make_node("Gather", ["wte", "input_ids"], ["emb"], axis=0),
    helper.make_node("MatMul", ["emb", "w1"], ["h0"]),
    # A Constant node (not an initializer): the importer keeps it as a
    # zg.constant, which tp must slice like a weight.
    helper.make_node("Constant", [], ["bias1"],
                     value=numpy_helper.from_array(bias1, "bias1")),
    helper.make_node("Add", ["h0", "bias1"], ["h1"]),
    helper.make_node("Relu", ["h1"], ["a1"]),
    helper.make_node("MatMul", ["a1", "w2"], ["h2"]),
    helper.make_node("Add", ["emb", "h2"], ["res"]),
    helper.make_node("MatMul", ["res", "head"], ["logits"]),
]
graph = helper.make_graph(
    nodes, "vocab",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", V])],
    [numpy_helper.from_array(a, n) for a, n in
     [(wte, "wte"), (w1, "w1"), (w2, "w2"), (head, "head")]])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.save_model(model, os.path.join(out, "model.onnx"), save_as_external_data=True,
                all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)

ids = rng.integers(0, V, size=(2, 3)).astype(np.int64)
ids[0, 0], ids[1, 2] = V - 1, V - 2  # rows held by the last ranks, next to the padding
np.save(os.path.join(out, "input_ids.npy"), ids)
e = wte.astype(np.float64)[ids]
r = e + np.maximum(e @ w1 + bias1, 0) @ w2
np.save(os.path.join(out, "expected.npy"), (r @ head).astype(np.float32))
