#!/usr/bin/env python3
"""The copy stream's idle time that a scheduled program implies: a prediction, not a measurement.

Replays one program of a scheduled module (the IR after --zplan-schedule and --zplan-memory-plan, whose
zplan.stream / zplan.signal / zplan.waits attributes are the plan's streams and events) on two streams:
each op starts when its stream is free and every event it waits on has fired. Host -> device copies take
their bytes at --rate; compute ops take a share of a measured resident forward's time (--total-ms), the
products by FLOPs out of --linear-ms, the attention by FLOPs out of --attention-ms, every other op by the
bytes it reads and writes out of the rest. Views and releases take no time; launch gaps, the events' own
latency and the copies' pull on memory bandwidth are left out. Prints the predicted step, the copies' busy
time (the floor), how long the copy stream idles between its first and last copy, and the compute after
the last copy. Checks nothing: docs/gpu-plan-runs.md says how it compares with the calls' measurements.

    zplan import tests/models/bench/llama-1b/model.onnx --batch 8 --seq 1024 --graph-only -o l1b.mlir
    zplan-opt l1b.mlir --zplan-sharding=offload-param=cpu --zplan-materialize-outputs \\
        --zplan-fold-transpose --zplan-prefetch-gathers --zplan-fuse --zplan-schedule=dtype=bf16 \\
        --zplan-memory-plan=dtype=bf16 -o l1b-offload.mlir
    python3 bench/gpu/offload_timeline.py l1b-offload.mlir

(--zplan-prefetch-gathers=window-bytes=0 gives the placement of one parameter ahead.) The pass list is the
driver's for a one-GPU cuda forward (compiler/driver/Compile.cpp).
"""
import argparse
import math
import re

# The element types of the IR and the bytes each holds in the plan (--bytes-per-float for floats).
INT_BYTES = {"i64": 8, "i32": 4, "i1": 1}
TENSOR = re.compile(r"tensor<((?:\d+x)*)(f32|f16|bf16|i64|i32|i1)>")


def parse(path, program):
    text = open(path).read()
    start = text.index(f"func.func @{program}(")
    body = text[text.index("\n", start) + 1:]
    ops = []
    for line in body.split("\n"):
        s = line.strip()
        if s.startswith("return"):
            break
        if not s or " zg.weight " in f" {s}" or "zg.constant" in s or "zd.weight_shard" in s:
            continue
        m = re.match(r"((?:%[\w]+(?:, )?)+) = ([\w.]+)", s)
        name = m.group(2) if m else s.split()[0]
        stream = re.search(r'zplan.stream = "(\w+)"', s)
        signal = re.search(r"zplan.signal = (\d+)", s)
        waits = re.search(r"zplan.waits = array<i64: ([\d, ]+)>", s)
        types = s.rsplit(" : ", 1)[-1]
        ins, outs = types.split("->") if "->" in types else ("", types)
        shape = lambda t: ([int(d) for d in t[0].split("x") if d], t[1])
        ops.append(dict(name=name, stream=stream.group(1) if stream else "compute",
                        signal=int(signal.group(1)) if signal else None,
                        waits=[int(w) for w in waits.group(1).split(",")] if waits else [],
                        ins=[shape(t) for t in TENSOR.findall(ins)],
                        outs=[shape(t) for t in TENSOR.findall(outs)]))
    return ops


def cost(op, fbytes):
    """(kind, amount): bytes for copies and memory-bound ops, FLOPs for products and attention."""
    nbytes = lambda t: math.prod(t[0]) * INT_BYTES.get(t[1], fbytes)
    name = op["name"]
    if name in ("zg.reshape", "zd.release"):
        return "none", 0
    if name == "zd.prefetch":
        return "copy", nbytes(op["outs"][0])
    if name == "zg.linear":
        x, y = op["ins"][0][0], op["outs"][0][0]
        n = y[-1]
        return "linear", 2 * (math.prod(y) // n) * x[-1] * n
    if name == "zg.attention":
        b, h, s, d = op["ins"][0][0]
        return "attention", 2 * b * h * s * s * d  # causal: half of the 4 * B * H * S^2 * D of a full one
    if name == "zg.rotary":  # the tables are broadcast over the batch: read once
        return "memory", 2 * nbytes(op["ins"][0])
    return "memory", sum(map(nbytes, op["ins"])) + sum(map(nbytes, op["outs"]))


def simulate(ops, a):
    costs = [cost(o, a.bytes_per_float) for o in ops]
    total = {k: sum(c for kk, c in costs if kk == k) for k in ("linear", "attention", "memory")}
    share = {"linear": a.linear_ms, "attention": a.attention_ms,
             "memory": a.total_ms - a.linear_ms - a.attention_ms}

    def duration(kind, amount):
        if kind == "copy":
            return amount / a.rate * 1e3
        if kind in total and total[kind]:
            return amount / total[kind] * share[kind]
        return 0.0

    free, fired, busy, first = {}, {}, {}, {}
    for op, (kind, amount) in zip(ops, costs):
        s = op["stream"]
        d = duration(kind, amount)
        start = max([free.get(s, 0.0)] + [fired[e] for e in op["waits"]])
        free[s] = start + d
        busy[s] = busy.get(s, 0.0) + d
        first.setdefault(s, start)
        if op["signal"] is not None:
            fired[op["signal"]] = free[s]
    step = max(free.values())
    copy_end = free.get("copy", 0.0)
    return dict(step_ms=step, copies_ms=busy.get("copy", 0.0),
                copy_idle_ms=copy_end - first.get("copy", 0.0) - busy.get("copy", 0.0),
                compute_ms=busy.get("compute", 0.0), after_last_copy_ms=step - copy_end)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ir", nargs="+", help="scheduled and memory-planned modules (zplan-opt output)")
    ap.add_argument("--program", default="main")
    ap.add_argument("--rate", type=float, default=55.3e9, help="host -> device bytes/s (pinned, measured)")
    # llama-1b, bf16, batch 8, seq 1024, resident, one H200 (docs/gpu-plan-runs.md): 25.3 ms a step, of which
    # the products about 15.5 ms and the attention about 4.8 ms (the FWD call's profile, scaled to the graph).
    ap.add_argument("--total-ms", type=float, default=25.3)
    ap.add_argument("--linear-ms", type=float, default=15.5)
    ap.add_argument("--attention-ms", type=float, default=4.8)
    ap.add_argument("--compute-scale", type=float, default=1.0,
                    help="multiply every compute time (how the prediction holds if compute is slower)")
    ap.add_argument("--bytes-per-float", type=int, default=2, help="the plan dtype's width (bf16: 2)")
    a = ap.parse_args()
    a.total_ms *= a.compute_scale
    a.linear_ms *= a.compute_scale
    a.attention_ms *= a.compute_scale
    for path in a.ir:
        r = simulate(parse(path, a.program), a)
        print(path + ": " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
