#!/usr/bin/env python3
"""Writes the hostile-model corpus: one folder per case under OUT, each holding model.onnx (and whatever
files the case needs beside it), plus OUT/outside/, a folder beside the cases holding the files that a
traversal would reach.

    gen_hostile.py OUT

Every case starts from the same small valid model (x[2,4] @ W[4,4] + b -> y, W in external data) and breaks
one thing, so that the error a case gets can only come from that one thing. `control` is the valid model
itself: it must compile, which proves that the harness can tell success from failure.

Refused-without-opening cases point their external data at OUT/outside/fifo, a named pipe: opening a FIFO
for reading blocks until a writer appears, so an importer that opened it would hang past the 2 s limit
instead of reporting the location. Other cases point at a path that does not exist and must get the
traversal error, not "not found".
"""
import os
import random
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def base_graph(w_ext=None, w_raw=None, nodes=None, inputs=None, extra_inits=None, outputs=None):
    """The valid model's graph with optional replacements."""
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16.0
    if w_ext is not None:
        wt = TensorProto()
        wt.name = "W"
        wt.data_type = TensorProto.FLOAT
        wt.dims.extend(w_ext.get("dims", [4, 4]))
        wt.data_location = TensorProto.EXTERNAL
        for k, v in w_ext["kv"]:
            e = wt.external_data.add()
            e.key, e.value = k, v
    elif w_raw is not None:
        wt = TensorProto()
        wt.name = "W"
        wt.data_type = TensorProto.FLOAT
        wt.dims.extend(w_raw[0])
        wt.raw_data = w_raw[1]
    else:
        wt = numpy_helper.from_array(w, "W")
    b = numpy_helper.from_array(np.ones(4, dtype=np.float32), "b")
    inits = [wt, b] + (extra_inits or [])
    if nodes is None:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul0"),
                 helper.make_node("Add", ["xw", "b"], ["y"], name="add0")]
    if inputs is None:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])]
    if outputs is None:
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]
    return helper.make_graph(nodes, "hostile", inputs, outputs, inits)


def model_bytes(graph, opset=OPSET):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="zplan-hostile")
    m.ir_version = 8
    # The checker is not run: most of these models are invalid on purpose.
    return m.SerializeToString()


def ext(location, offset=None, length=None, dims=None):
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    d = {"kv": kv}
    if dims is not None:
        d["dims"] = dims
    return d


def main():
    out = os.path.abspath(sys.argv[1])
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    outside = os.path.join(out, "outside")
    os.makedirs(outside)
    fifo = os.path.join(outside, "fifo")
    os.mkfifo(fifo)
    with open(os.path.join(outside, "secret.bin"), "wb") as f:
        f.write(b"\x00" * 64)
    w_bytes = (np.arange(16, dtype=np.float32).reshape(4, 4) / 16.0).tobytes()

    def case(name, data=None, graph=None, files=(), links=()):
        d = os.path.join(out, name)
        os.makedirs(d)
        if data is None:
            data = model_bytes(graph)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(data)
        for fname, content in files:
            with open(os.path.join(d, fname), "wb") as f:
                f.write(content)
        for fname, target in links:
            os.symlink(target, os.path.join(d, fname))

    weights = [("weights.bin", w_bytes)]
    case("control", graph=base_graph(w_ext=ext("weights.bin", 0, 64)), files=weights)

    # External data that leaves the model's folder: refused before any file is opened.
    case("ext_absolute_missing", graph=base_graph(w_ext=ext("/nonexistent-zplan-hostile/secret.bin", 0, 64)))
    case("ext_absolute_fifo", graph=base_graph(w_ext=ext(fifo, 0, 64)))
    case("ext_dotdot_missing", graph=base_graph(w_ext=ext("../../nonexistent-zplan-hostile/secret.bin", 0, 64)))
    case("ext_dotdot_fifo", graph=base_graph(w_ext=ext("../outside/fifo", 0, 64)))
    case("ext_dotdot_hidden", graph=base_graph(w_ext=ext("sub/../../outside/fifo", 0, 64)))
    case("ext_symlink_out", graph=base_graph(w_ext=ext("link.bin", 0, 64)),
         links=[("link.bin", os.path.join(outside, "secret.bin"))])
    case("ext_symlink_dir", graph=base_graph(w_ext=ext("linkdir/secret.bin", 0, 64)),
         links=[("linkdir", outside)])
    case("ext_symlink_fifo", graph=base_graph(w_ext=ext("link.bin", 0, 64)), links=[("link.bin", fifo)])
    case("ext_fifo_inside", graph=base_graph(w_ext=ext("weights.bin", 0, 64)))
    os.mkfifo(os.path.join(out, "ext_fifo_inside", "weights.bin"))
    case("ext_missing_file", graph=base_graph(w_ext=ext("no_such_weights.bin", 0, 64)))

    # Ranges and lengths.
    case("ext_offset_past_end", graph=base_graph(w_ext=ext("weights.bin", 1000, 64)), files=weights)
    case("ext_range_past_end", graph=base_graph(w_ext=ext("weights.bin", 32, 64)), files=weights)
    case("ext_offset_overflow", graph=base_graph(w_ext=ext("weights.bin", 2**63 - 8, 64)), files=weights)
    case("ext_offset_negative", graph=base_graph(w_ext=ext("weights.bin", -8, 64)), files=weights)
    case("ext_offset_not_number", graph=base_graph(w_ext=ext("weights.bin", "12abc", 64)), files=weights)
    case("ext_length_mismatch", graph=base_graph(w_ext=ext("weights.bin", 0, 60)), files=weights)
    case("raw_length_mismatch", graph=base_graph(w_raw=([4, 4], w_bytes[:60])))

    # Dims.
    case("dims_negative", graph=base_graph(w_raw=([4, -4], b"")))
    case("dims_overflow", graph=base_graph(w_raw=([2**40, 2**40], b"")))
    case("dims_overflow_ext", graph=base_graph(w_ext=ext("weights.bin", 0, 64, dims=[2**62, 4])), files=weights)
    case("input_dim_negative", graph=base_graph(inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [-2, 4])]))
    case("input_dim_overflow", graph=base_graph(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**40, 2**40, 2**40])]))

    # Graph structure.
    case("unknown_op", graph=base_graph(nodes=[
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul0"),
        helper.make_node("FrobnicateXYZ", ["xw", "b"], ["y"], name="frob0")]))
    case("cycle", graph=base_graph(nodes=[
        helper.make_node("Add", ["x", "c2"], ["c1"], name="cycle_a"),
        helper.make_node("Add", ["c1", "b"], ["c2"], name="cycle_b"),
        helper.make_node("MatMul", ["c2", "W"], ["y"], name="matmul0")]))
    case("self_loop", graph=base_graph(nodes=[
        helper.make_node("Add", ["x", "s"], ["s"], name="self_add"),
        helper.make_node("MatMul", ["s", "W"], ["y"], name="matmul0")]))
    case("undefined_value", graph=base_graph(nodes=[
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul0"),
        helper.make_node("Add", ["xw", "nosuch_value"], ["y"], name="add0")]))
    case("undefined_output", graph=base_graph(
        outputs=[helper.make_tensor_value_info("nosuch_output", TensorProto.FLOAT, [2, 4])]))
    case("duplicate_definition", graph=base_graph(nodes=[
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul0"),
        helper.make_node("Add", ["x", "b"], ["xw"], name="add_dup"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add0")]))
    case("shape_mismatch", graph=base_graph(
        nodes=[helper.make_node("MatMul", ["x", "W5"], ["xw"], name="matmul_bad"),
               helper.make_node("Add", ["xw", "b"], ["y"], name="add0")],
        extra_inits=[numpy_helper.from_array(np.ones((5, 3), dtype=np.float32), "W5")]))
    case("missing_input_operand", graph=base_graph(nodes=[
        helper.make_node("MatMul", ["x"], ["xw"], name="matmul_one"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add0")]))
    unsupported_opset = model_bytes(base_graph(w_raw=([4, 4], w_bytes)), opset=999)
    case("opset_unsupported", data=unsupported_opset)

    # Not a model at all.
    valid = model_bytes(base_graph(w_raw=([4, 4], w_bytes)))
    case("truncated", data=valid[: len(valid) // 2 + 3])
    rng = random.Random(20261129)
    case("random_bytes", data=bytes(rng.getrandbits(8) for _ in range(4096)))
    case("empty", data=b"")
    # Not a regular file: a folder named model.onnx, and a link to an endless device.
    os.makedirs(os.path.join(out, "dir_as_model", "model.onnx"))
    os.makedirs(os.path.join(out, "dev_zero"))
    os.symlink("/dev/zero", os.path.join(out, "dev_zero", "model.onnx"))
    # The first half of a real export (tests/models/gpt2), when the models are present.
    gpt2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "gpt2", "model.onnx")
    if os.path.exists(gpt2):
        with open(gpt2, "rb") as f:
            real = f.read()
        case("truncated_gpt2", data=real[: len(real) // 2 + 1])
    print(f"gen_hostile: wrote the cases to {out}")


if __name__ == "__main__":
    main()
