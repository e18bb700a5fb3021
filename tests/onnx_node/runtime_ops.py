#!/usr/bin/env python3
"""Run-time forms of the ONNX ops that decoder exports use on values that do not fold.

Each case is a small graph built with onnx.helper in which the op under test reads a run-time value (a graph
input, or something computed from one), so the importer must lower it to a plan op instead of folding it.
onnxruntime runs the same model on the same inputs and is the oracle. zplan compiles the model at tp 1 and,
where the case has a weight in front of the op (so that the op sees a tensor split by tensor parallelism), at
tp 2 over two MPI ranks too; zrun runs each plan and every output must match onnxruntime's.

Usage: runtime_ops.py --zplan ZPLAN --zrun ZRUN --work DIR [--mpirun "MPIRUN ARGS"] [--filter SUBSTRING]
"""
import argparse
import os
import shlex
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
rng = np.random.default_rng(13)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=18, value_info=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


X = rng.standard_normal((2, 8, 6)).astype(np.float32)
W = (rng.standard_normal((6, 16)) * 0.5).astype(np.float32)
IDS = rng.integers(-20, 20, size=(2, 8)).astype(np.int64)
MASK = np.array([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]], dtype=np.int64)


def with_linear(op_nodes, out_name, out_elem, out_shape, extra_inits=(), opset=18, value_info=()):
    """x [2,8,6] -> h = x @ W [2,8,16] -> the op nodes (reading h) -> out. At tp 2 the linear is split by
    columns, so the op reads h split along its last dim."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj")] + op_nodes
    return model(nodes, [vi("x", F, [2, 8, 6])], [vi(out_name, out_elem, out_shape)],
                 [const("W", W)] + list(extra_inits), opset, value_info), {"x": X}


def cases():
    c = {}
    # Elementwise: Floor, Ceil, Sign, Mod (fmod 1 and numpy's fmod 0 on floats, integer Mod), Xor.
    c["floor"] = with_linear([helper.make_node("Mul", ["h", "three"], ["h3"]),
                              helper.make_node("Floor", ["h3"], ["y"])], "y", F, [2, 8, 16],
                             [const("three", np.float32(3))])
    c["ceil"] = with_linear([helper.make_node("Mul", ["h", "three"], ["h3"]),
                             helper.make_node("Ceil", ["h3"], ["y"])], "y", F, [2, 8, 16],
                            [const("three", np.float32(3))])
    c["sign"] = with_linear([helper.make_node("Floor", ["h"], ["hf"]),
                             helper.make_node("Sign", ["hf"], ["y"])], "y", F, [2, 8, 16])
    divisor = np.array([1.7, -1.7, 0.9, -0.4] * 4, dtype=np.float32)
    c["mod_fmod1"] = with_linear([helper.make_node("Mod", ["h", "d"], ["y"], fmod=1)], "y", F, [2, 8, 16],
                                 [const("d", divisor)])
    # numpy's mod on floats (fmod 0) is ONNX's from opset 28 on.
    c["mod_fmod0_float"] = with_linear([helper.make_node("Mod", ["h", "d"], ["y"], fmod=0)], "y", F,
                                       [2, 8, 16], [const("d", divisor)], opset=28)
    c["mod_int"] = (model([helper.make_node("Mod", ["ids", "k"], ["y"]),
                           helper.make_node("Mod", ["ids", "k"], ["z"], fmod=1)],
                          [vi("ids", I64, [2, 8])], [vi("y", I64, [2, 8]), vi("z", I64, [2, 8])],
                          [const("k", np.array([7, -3, 5, -6, 2, 9, -9, 4], dtype=np.int64))]), {"ids": IDS})
    c["xor"] = with_linear([helper.make_node("Greater", ["h", "zero"], ["p"]),
                            helper.make_node("Less", ["h", "half"], ["q"]),
                            helper.make_node("Xor", ["p", "q"], ["y"])], "y", B, [2, 8, 16],
                           [const("zero", np.float32(0)), const("half", np.float32(0.5))])
    # Reductions: opset 18 (axes as an input) and opset 13 (axes as an attribute), over the split dim and not.
    for kind in ("ReduceMin", "ReduceProd"):
        c[kind.lower() + "_last"] = with_linear(
            [helper.make_node(kind, ["h", "ax"], ["y"], keepdims=0)], "y", F, [2, 8],
            [const("ax", np.array([-1], dtype=np.int64))])
        c[kind.lower() + "_seq_opset13"] = with_linear(
            [helper.make_node(kind, ["h"], ["y"], axes=[1], keepdims=1)], "y", F, [2, 1, 16], opset=13)
    # CumSum along the sequence (the split last dim passes through), exclusive and reversed, and along the
    # split dim itself; and the position ids of a left-padded batch (HF: cumsum(mask) * mask - 1).
    for ex, rev in ((0, 0), (1, 0), (0, 1), (1, 1)):
        c[f"cumsum_seq_ex{ex}_rev{rev}"] = with_linear(
            [helper.make_node("CumSum", ["h", "axis"], ["y"], exclusive=ex, reverse=rev)], "y", F, [2, 8, 16],
            [const("axis", np.array(1, dtype=np.int64))])
    c["cumsum_last"] = with_linear([helper.make_node("CumSum", ["h", "axis"], ["y"])], "y", F, [2, 8, 16],
                                   [const("axis", np.array(-1, dtype=np.int64))])
    c["cumsum_position_ids"] = (model(
        [helper.make_node("CumSum", ["mask", "axis"], ["cs"]),
         helper.make_node("Mul", ["cs", "mask"], ["m"]),
         helper.make_node("Sub", ["m", "one"], ["y"])],
        [vi("mask", I64, [2, 8])], [vi("y", I64, [2, 8])],
        [const("axis", np.array(1, dtype=np.int64)), const("one", np.array(1, dtype=np.int64))]),
        {"mask": MASK})
    # Range with a run-time start: its length is the declared shape of its output.
    c["range_int_runtime_start"] = (model(
        [helper.make_node("ReduceMin", ["ids"], ["s"], keepdims=0),
         helper.make_node("Add", ["s", "five"], ["l"]),
         helper.make_node("Range", ["s", "l", "one"], ["r"]),
         helper.make_node("Concat", ["r", "r3"], ["r8"], axis=0),
         helper.make_node("Add", ["ids", "r8"], ["y"])],
        [vi("ids", I64, [2, 8])], [vi("y", I64, [2, 8]), vi("r", I64, [5])],
        [const("five", np.array(5, dtype=np.int64)), const("one", np.array(1, dtype=np.int64)),
         const("r3", np.array([0, 0, 0], dtype=np.int64))]), {"ids": IDS})
    c["range_float_runtime"] = (model(
        [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
         helper.make_node("Floor", ["m"], ["s"]),
         helper.make_node("Add", ["s", "lim"], ["l"]),
         helper.make_node("Range", ["s", "l", "d"], ["y"])],
        [vi("x", F, [2, 8, 6])], [vi("y", F, [5])],
        [const("lim", np.float32(2.5)), const("d", np.float32(0.5))]), {"x": X})
    # GatherND / GatherElements: run-time data with constant (also negative) indices, run-time indices.
    nd_idx = np.array([[[0, 1], [1, -2], [0, 7]], [[1, 0], [0, 3], [1, 5]]], dtype=np.int64)
    c["gathernd_const_indices"] = with_linear(
        [helper.make_node("GatherND", ["h", "ix"], ["y"])], "y", F, [2, 3, 16], [const("ix", nd_idx)])
    c["gathernd_batch_dims"] = with_linear(
        [helper.make_node("GatherND", ["h", "ix"], ["y"], batch_dims=1)], "y", F, [2, 3],
        [const("ix", np.array([[[3, 1], [7, -1], [0, 15]], [[1, 0], [2, 2], [6, 9]]], dtype=np.int64))])
    run_idx = rng.integers(0, 8, size=(2, 4, 1)).astype(np.int64)
    c["gathernd_runtime_indices"] = (model(
        [helper.make_node("GatherND", ["x", "ix"], ["y"], batch_dims=1)],
        [vi("x", F, [2, 8, 6]), vi("ix", I64, [2, 4, 1])], [vi("y", F, [2, 4, 6])]), {"x": X, "ix": run_idx})
    ge_idx = rng.integers(-16, 16, size=(2, 8, 3)).astype(np.int64)
    c["gather_elements_const_indices"] = with_linear(
        [helper.make_node("GatherElements", ["h", "ix"], ["y"], axis=2)], "y", F, [2, 8, 3],
        [const("ix", ge_idx)])
    c["gather_elements_seq"] = with_linear(
        [helper.make_node("GatherElements", ["h", "ix"], ["y"], axis=1)], "y", F, [2, 3, 16],
        [const("ix", rng.integers(0, 8, size=(2, 3, 16)).astype(np.int64))])
    c["gather_elements_runtime_indices"] = (model(
        [helper.make_node("GatherElements", ["x", "ix"], ["y"], axis=-1)],
        [vi("x", F, [2, 8, 6]), vi("ix", I64, [2, 8, 2])], [vi("y", F, [2, 8, 2])]),
        {"x": X, "ix": rng.integers(-6, 6, size=(2, 8, 2)).astype(np.int64)})
    # Tile: along the sequence (the split last dim passes through) and along the split dim.
    c["tile_seq"] = with_linear([helper.make_node("Tile", ["h", "reps"], ["y"])], "y", F, [2, 16, 16],
                                [const("reps", np.array([1, 2, 1], dtype=np.int64))])
    c["tile_all"] = with_linear([helper.make_node("Tile", ["h", "reps"], ["y"])], "y", F, [4, 8, 48],
                                [const("reps", np.array([2, 1, 3], dtype=np.int64))])
    c["tile_int"] = (model([helper.make_node("Tile", ["ids", "reps"], ["y"])], [vi("ids", I64, [2, 8])],
                           [vi("y", I64, [6, 16])], [const("reps", np.array([3, 2], dtype=np.int64))]),
                     {"ids": IDS})
    return c


def run(cmd, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def check(name, m, feeds, args, tp):
    work = os.path.join(args.work, f"{name}-tp{tp}")
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "model.onnx")
    onnx.save(m, path)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    plan = os.path.join(work, "model.zplan")
    cmd = [args.zplan, path, "-o", plan] + (["--tp", str(tp), "--world", str(tp)] if tp > 1 else [])
    code, log = run(cmd)
    if code != 0:
        return f"compile failed: {log.strip()[-600:]}"
    # The op under test must have stayed in the plan as a run-time op: the imported graph holds it.
    run_cmd = [args.zrun, plan, "--timeout", "60"]
    for k, v in feeds.items():
        p = os.path.join(work, f"in_{k}.npy")
        np.save(p, v)
        run_cmd += ["--input", f"{k}={p}"]
    outs = []
    for o in m.graph.output:
        p = os.path.join(work, f"out_{o.name}.npy")
        outs.append(p)
        run_cmd += ["--output", f"{o.name}={p}"]
    if tp > 1:
        run_cmd = shlex.split(args.mpirun) + ["-np", str(tp)] + run_cmd
    code, log = run(run_cmd)
    if code != 0:
        return f"run failed: {log.strip()[-600:]}"
    for p, r, o in zip(outs, ref, m.graph.output):
        got = np.load(p)
        if got.shape != r.shape:
            return f"output {o.name}: shape {got.shape}, onnxruntime {r.shape}"
        if r.dtype.kind in "biu":
            if not np.array_equal(got.astype(r.dtype), r):
                return f"output {o.name}: values differ from onnxruntime's"
        elif not np.allclose(got, r, rtol=1e-5, atol=1e-5, equal_nan=True):
            return f"output {o.name}: max abs error {np.nanmax(np.abs(got - r)):.3g} against onnxruntime"
    return None


def imported_ops(m, args, work):
    """The zg ops of the imported module, to confirm that the op was not folded away."""
    path = os.path.join(work, "import.onnx")
    os.makedirs(work, exist_ok=True)
    onnx.save(m, path)
    code, log = run([args.zplan, "import", path])
    return log if code == 0 else ""


RUNTIME_OP = {"floor": "zg.floor", "ceil": "zg.floor", "sign": "zg.greater", "mod": "zg.mod", "xor": "zg.or",
              "reducemin": "zg.reduce_min", "reduceprod": "zg.reduce_prod", "cumsum": "zg.cumsum",
              "range": "zg.range", "gathernd": "zg.gather_nd", "gather_elements": "zg.gather_elements",
              "tile": "zg.tile"}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--zplan", required=True)
    ap.add_argument("--zrun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    failures, ran = [], 0
    for name, (m, feeds) in cases().items():
        if args.filter not in name:
            continue
        want = RUNTIME_OP[name.split("_")[0] if not name.startswith("gather_elements") else "gather_elements"]
        mlir = imported_ops(m, args, os.path.join(args.work, name + "-import"))
        if want not in mlir:
            failures.append(f"{name}: the imported graph holds no {want} (folded or refused)")
            print(f"FAIL {name}: no {want} in the imported graph", flush=True)
            continue
        # Cases with the weight in front of the op also run at tp 2.
        tps = [1, 2] if args.mpirun and any(i.name == "W" for i in m.graph.initializer) else [1]
        for tp in tps:
            ran += 1
            err = check(name, m, feeds, args, tp)
            print(f"{'FAIL' if err else 'ok  '} {name} tp{tp}{': ' + err if err else ''}", flush=True)
            if err:
                failures.append(f"{name} tp{tp}: {err}")
    print(f"{ran - len([f for f in failures if ' tp' in f])} of {ran} runs match onnxruntime")
    if failures:
        sys.exit("FAIL:\n  " + "\n  ".join(failures))


if __name__ == "__main__":
    main()
