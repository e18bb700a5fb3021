#!/usr/bin/env python3
"""Runs the ONNX project's own backend node tests through zplan and zrun.

The cases are the ones the `onnx` package ships as generators (onnx.backend.test.case.node: the same models,
inputs and numpy-computed outputs that onnx/backend/test/data/node/ holds; the PyPI wheel carries the
generators rather than the data files). For every case whose ops zplan accepts, the model is compiled at
tp=1 (`zplan model.onnx -o plan`), run by zrun on one rank, and every output compared with the stored one.

A case counts as "not accepted" only when zplan's importer refuses the case's ops themselves: an op that is
not in its op table (or not at this opset), a non-default domain, or an opset outside the range it imports.
Any other refusal of a case whose ops zplan accepts (an attribute, a dtype, an operand it cannot take at run
time) is a failure of that op, like a wrong output. zplan compiles static graphs, so operands that fix
shapes (axes, starts, split sizes, target shapes) must be constants: when the importer says such an operand
does not fold, the case is retried with its integer inputs bound as initializers (the values the data set
gives). Every other case must pass, unless tests/onnx_node/exceptions.txt lists it by name with a reason.
fp16 cases run too (plans carry f16), compared at fp16's precision.

The number of passing cases is a floor (tests/onnx_node/pass_floor.txt) that may only rise: fewer passes
fail the run, more print the new figure to record.
"""
import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
import onnx.backend.test.case.node as node_cases  # noqa: E402

# Importer messages that put a case outside what zplan accepts (see the module docstring): the op table's
# refusal ("N unsupported op(s):") and the model-level opset and domain checks. Nothing else.
OUT_OF_SCOPE = re.compile(r"\d+ unsupported ops?:|unsupported opset \d+; zplan imports|"
                          r"imports no opset of the default")
NOT_FOLDED = re.compile(r"does not fold to a constant")
SUPPORTED_DTYPES = {np.dtype(t) for t in ("float32", "float16", "int64", "int32", "bool")}


def load_exceptions(path):
    exc = {}
    if path and os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                exc[name] = reason.strip()
    return exc


def run(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s: {' '.join(cmd)}"


def run_case(case, args):
    """Returns (status, detail): status in pass, fail, not-accepted, skipped."""
    work = os.path.join(args.work, case.name)
    os.makedirs(work, exist_ok=True)
    model_path = os.path.join(work, "model.onnx")
    with open(model_path, "wb") as f:
        f.write(case.model.SerializeToString())
    if not case.data_sets:
        return "skipped", "no data set"
    inputs, outputs = case.data_sets[0]
    graph = case.model.graph
    # Graph inputs that are not initializers, in order, as the data set gives them.
    init_names = {i.name for i in graph.initializer}
    in_names = [i.name for i in graph.input if i.name not in init_names]
    for arr in list(inputs) + list(outputs):
        if not isinstance(arr, np.ndarray):
            return "skipped", "non-tensor input or output (sequence/map/optional)"
        if arr.dtype not in SUPPORTED_DTYPES:
            return "skipped", f"dtype {arr.dtype} (plans carry f32/bf16/f16/i64/i32/bool; .npy has no bf16)"
    # One zplan run per case: the compile imports first, so an importer refusal ends it with the importer's
    # message (OUT_OF_SCOPE and NOT_FOLDED match only those), as a separate `zplan import` would.
    plan = os.path.join(work, "model.zplan")
    # A model computing in fp16 compiles to an fp16 plan (zplan stores floats as --dtype says).
    fp16 = any(a.dtype == np.float16 for a in list(inputs) + list(outputs))
    compile_cmd = [args.zplan, model_path, "-o", plan] + (["--dtype", "fp16"] if fp16 else [])
    code, log = run(compile_cmd)
    if code != 0 and NOT_FOLDED.search(log):
        # Bind the integer inputs as initializers and compile again.
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        keep_in, keep_arr, bound = [], [], set()
        for name, arr in zip(in_names, inputs):
            if arr.dtype.kind in "iub":
                model.graph.initializer.append(numpy_helper.from_array(arr, name))
                bound.add(name)
            else:
                keep_in.append(name)
                keep_arr.append(arr)
        # A graph input that also has an initializer is still an input (the initializer is its default):
        # the bound ones leave the input list, so that they are constants.
        kept = [i for i in model.graph.input if i.name not in bound]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        in_names, inputs = keep_in, keep_arr
        with open(model_path, "wb") as f:
            f.write(model.SerializeToString())
        code, log = run(compile_cmd)
    if code != 0:
        if OUT_OF_SCOPE.search(log):
            return "not-accepted", log.strip().splitlines()[-1] if log.strip() else ""
        return "fail", "compile: " + log.strip()[-400:]
    cmd = [args.zrun, plan, "--timeout", "30"]
    for name, arr in zip(in_names, inputs):
        p = os.path.join(work, f"in_{len(cmd)}.npy")
        np.save(p, arr)
        cmd += ["--input", f"{name}={p}"]
    out_paths = []
    for i, o in enumerate(graph.output):
        p = os.path.join(work, f"out_{i}.npy")
        out_paths.append(p)
        cmd += ["--output", f"{o.name}={p}"]
    code, log = run(cmd)
    if code != 0:
        return "fail", "run: " + log.strip()[-400:]
    for p, ref, o in zip(out_paths, outputs, graph.output):
        got = np.load(p)
        if got.shape != ref.shape:
            return "fail", f"output {o.name}: shape {got.shape} != {ref.shape}"
        if ref.dtype == np.bool_ or ref.dtype.kind in "iu":
            if not np.array_equal(got.astype(ref.dtype), ref):
                return "fail", f"output {o.name}: values differ"
        elif not np.allclose(got.astype(np.float64), ref.astype(np.float64),
                             rtol=args.rtol if ref.dtype != np.float16 else 2e-3,
                             atol=args.atol if ref.dtype != np.float16 else 2e-3, equal_nan=True):
            err = np.nanmax(np.abs(got.astype(np.float64) - ref.astype(np.float64)))
            return "fail", f"output {o.name}: max abs error {err:.3g}"
    return "pass", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--zplan", required=True)
    ap.add_argument("--zrun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--exceptions", default=os.path.join(os.path.dirname(__file__), "exceptions.txt"))
    ap.add_argument("--floor", default=os.path.join(os.path.dirname(__file__), "pass_floor.txt"))
    ap.add_argument("--filter", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()

    cases = [c for c in node_cases.collect_testcases(None) if re.search(args.filter, c.name)]
    exceptions = load_exceptions(args.exceptions)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(run_case, c, args): c for c in cases}
        for f in concurrent.futures.as_completed(futs):
            c = futs[f]
            results[c.name] = (f.result(), sorted({n.op_type for n in c.model.graph.node}))

    per_op = collections.defaultdict(collections.Counter)
    unexpected = []
    for name, ((status, detail), ops) in sorted(results.items()):
        for op in ops:
            per_op[op][status] += 1
        if status == "fail":
            if name in exceptions:
                per_op[ops[0]]["excepted"] += 1
            else:
                unexpected.append((name, detail))
    accepted = {op: c for op, c in per_op.items() if c["pass"] + c["fail"] > 0}
    print(f"{'op':24} {'pass':>5} {'fail':>5} {'skip':>5}")
    for op, c in sorted(accepted.items()):
        print(f"{op:24} {c['pass']:5} {c['fail']:5} {c['skipped']:5}")
    tot = collections.Counter(s for (s, _), _ in results.values())
    print(f"\nnode tests: {len(results)} cases; for accepted ops: {tot['pass']} pass, {tot['fail']} fail "
          f"({tot['fail'] - len(unexpected)} listed in exceptions.txt), {tot['skipped']} skipped (dtype/"
          f"non-tensor); {tot['not-accepted']} use an op zplan does not accept")
    for name, reason in sorted(exceptions.items()):
        if name in results and results[name][0][0] == "pass":
            print(f"note: {name} is listed as an exception but passes now")
    for name, detail in unexpected:
        print(f"FAIL {name}: {detail}")
    bad = bool(unexpected)
    if not args.filter and not os.path.exists(args.floor):
        # The floor is what makes a drop of passes (an op newly refused, say) fail: without it the run
        # checks only the cases that still compile.
        print(f"FAIL: no pass floor at {args.floor}")
        bad = True
    elif not args.filter:
        floor = int(open(args.floor).read().split()[0])
        if tot["pass"] < floor:
            print(f"FAIL: {tot['pass']} cases pass, below the recorded floor of {floor} ({args.floor})")
            bad = True
        elif tot["pass"] > floor:
            print(f"note: {tot['pass']} cases pass, above the floor of {floor}: record {tot['pass']} in {args.floor}")
        else:
            print(f"pass count {tot['pass']} = the recorded floor")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
