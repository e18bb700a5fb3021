#!/usr/bin/env python3
"""Small models with an If node, for tests/lit/import/if.test.

    make_if_models.py OUT_DIR

Each takes x [2, 3] float and returns y [2, 3]; the If's then branch is x + z, its else branch x * x, where z
(x - 1) is made by a node of the outer graph listed after the If (a branch reads it from outside, so the
importer must order the If after it):
- if_true.onnx / if_false.onnx: the condition is a Constant true / false;
- if_input.onnx: the condition is a graph input c [1] bool, known only at run time;
- if_unsupported_then.onnx / if_unsupported_else.onnx: the condition false, with an op the importer does not
  take (Foo, custom domain) in the then / else branch.
"""
import os
import sys

import onnx
from onnx import TensorProto, helper


def branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])])


def model(path, cond, unsupported=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    inputs = [x]
    nodes = []
    if cond is None:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, [1]))
    else:
        nodes.append(helper.make_node("Constant", [], ["c"], name="cond",
                                      value=helper.make_tensor("v", TensorProto.BOOL, [1], [cond])))
    then_nodes = [helper.make_node("Add", ["x", "z"], ["t"], name="then_add")]
    else_nodes = [helper.make_node("Mul", ["x", "x"], ["e"], name="else_mul")]
    if unsupported:
        target = then_nodes if unsupported == "then" else else_nodes
        out = target[0].output[0]
        target[0].output[0] = out + "_pre"
        target.append(helper.make_node("Foo", [out + "_pre"], [out], name=unsupported + "_foo", domain="custom"))
    nodes.append(helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch("then", then_nodes, "t"),
                                  else_branch=branch("else", else_nodes, "e")))
    nodes.append(helper.make_node("Sub", ["x", "one"], ["z"], name="outer_sub"))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
    onnx.save(m, path)


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
model(os.path.join(out, "if_true.onnx"), True)
model(os.path.join(out, "if_false.onnx"), False)
model(os.path.join(out, "if_input.onnx"), None)
model(os.path.join(out, "if_unsupported_then.onnx"), False, "then")
model(os.path.join(out, "if_unsupported_else.onnx"), False, "else")
