"""Writes a wide causal LM as ONNX for the consolidation memory test: an embedding, L residual ReLU MLP
blocks and an LM head, every weight in one external-data file. Its parameters are many times the largest
tensor, so a writer that holds the model (not one tensor) shows in the peak RSS.
Usage: make_wide_model.py VOCAB D FFN LAYERS OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

vocab, d, ffn, layers = (int(a) for a in sys.argv[1:5])
out = sys.argv[5]
rng = np.random.default_rng(0)
inits, nodes = [], []


def weight(name, shape):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name))


weight("emb.weight", [vocab, d])
nodes.append(helper.make_node("Gather", ["emb.weight", "input_ids"], ["h0"], name="embed"))
h = "h0"
for l in range(layers):
    weight(f"layers.{l}.up.weight", [d, ffn])
    weight(f"layers.{l}.down.weight", [ffn, d])
    nodes += [helper.make_node("MatMul", [h, f"layers.{l}.up.weight"], [f"u{l}"], name=f"up{l}"),
              helper.make_node("Relu", [f"u{l}"], [f"r{l}"], name=f"relu{l}"),
              helper.make_node("MatMul", [f"r{l}", f"layers.{l}.down.weight"], [f"dn{l}"], name=f"down{l}"),
              helper.make_node("Add", [h, f"dn{l}"], [f"h{l + 1}"], name=f"res{l}")]
    h = f"h{l + 1}"
weight("head.weight", [d, vocab])
nodes.append(helper.make_node("MatMul", [h, "head.weight"], ["logits"], name="head"))
graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
name = out.rsplit("/", 1)[-1]
onnx.save(model, out, save_as_external_data=True, all_tensors_to_one_file=True, location=name + ".data",
          size_threshold=0)
