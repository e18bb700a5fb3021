"""Independent checker of a zplan plan file, used by the lit tests.

Reads the 24-byte header and checks magic, length and CRC-32 (zlib), then
reads the FlatBuffer through flatc's JSON output (flatc is the reference
FlatBuffers reader, independent of zplan's code) and checks what plan.fbs
promises:
  - every tensor lies inside its arena, 256-byte aligned; an alias has its
    base's offset and bytes;
  - tensors that are live at the same instruction never share a byte
    (liveness recomputed here from the instruction list);
  - the planned peak is the device arena and is at least the largest sum of
    live bytes at any instruction;
  - the collective hash recomputed from the instructions (first, so that
    reordered collectives are named as such);
  - every event signalled by one instruction, and waited on after it;
  - under concurrent streams (in-order streams plus the waits and signals,
    as vector clocks), every read happens after the write it reads, and a
    tensor reusing bytes of an earlier one is written only after every
    instruction touching the earlier one;
  - every weight binding has one slice per rank, and ZeRO shards have
    disjoint flat ranges that cover the tp-local tensor;
  - the bindings and IO named on the command line.
Prints a short summary that FileCheck can match.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

OPS_COMM = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
            "barrier", "gather_param"}
DTYPES = {"f32": 0, "bf16": 1, "f16": 2, "i64": 3, "i32": 4, "bool8": 5}
AXES = {"none": 0, "tp": 1, "dp": 2, "world": 3}
WHOLE_RUN = {"input", "output", "weight", "weight_shard", "constant",
             "grad", "master", "moment", "state"}
# Written in place and kept between runs (format 2).
PERSISTENT = {"weight", "weight_shard", "grad", "master", "moment", "state"}


def fail(msg):
    print("check_plan: FAIL: " + msg)
    sys.exit(1)


def read_plan(path, schema):
    data = open(path, "rb").read()
    if len(data) < 24 or data[:8] != b"ZPLANv1\n":
        fail("bad header magic")
    n, crc, reserved = struct.unpack("<QII", data[8:24])
    payload = data[24:]
    if n != len(payload):
        fail("payload length %d != %d" % (n, len(payload)))
    if zlib.crc32(payload) & 0xFFFFFFFF != crc:
        fail("CRC mismatch")
    if reserved != 0:
        fail("reserved header word is not 0")
    with tempfile.TemporaryDirectory() as d:
        binp = os.path.join(d, "plan.bin")
        open(binp, "wb").write(payload)
        subprocess.run(["flatc", "--json", "--strict-json", "--defaults-json",
                        "--raw-binary", "-o", d, schema, "--", binp],
                       check=True)
        return json.load(open(os.path.join(d, "plan.json")))


def op_names(schema):
    """Opcode number -> name, read from the op registry (runtime/include/zrt/ops.def) beside the schema:
    plan.fbs stores Instr.op as a plain number that the registry defines."""
    path = os.path.join(os.path.dirname(os.path.abspath(schema)), "..", "include", "zrt", "ops.def")
    names = {}
    for line in open(path):
        m = re.match(r'\s*ZRT_OP\(\s*\w+\s*,\s*"(\w+)"\s*,\s*(\d+)\s*,', line)
        if m:
            names[int(m.group(2))] = m.group(1)
    if not names:
        fail("no ZRT_OP entries in " + path)
    return names


def elements(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("--schema", required=True)
    ap.add_argument("--ints", action="append", default=[],
                    help="print how many instructions of this op carry each ints list")
    ap.add_argument("--early", action="store_true",
                    help="print the steps marked early per program and op (plan 2.18)")
    args = ap.parse_args()
    p = read_plan(args.plan, args.schema)
    tensors = p["tensors"]
    # Format 2: named programs run one at a time. Liveness is checked on the
    # programs laid end to end (whole-plan kinds span all of them); hashes,
    # events and stream ordering per program.
    programs = p.get("programs", [])
    if not programs:
        fail("the plan has no programs")
    if p.get("instrs") or p.get("inputs") or p.get("outputs"):
        fail("format 2 keeps instructions and bindings in programs only")
    names = op_names(args.schema)
    codes = {name: code for code, name in names.items()}
    instrs = []
    for prog in programs:
        for ins in prog.get("instrs", []):
            if ins["op"] not in names:
                fail("unknown opcode %s" % ins["op"])
            ins["op"] = names[ins["op"]]
            instrs.append(ins)
    fp = p["fingerprint"]
    world, tp, dp = fp["world"], fp["tp"], fp["dp"]
    if world != tp * dp:
        fail("world != tp * dp")
    mem = p["memory"]
    if len(mem) != world:
        fail("memory has %d entries, world is %d" % (len(mem), world))
    arena = [int(x) for x in mem[0]["arena_bytes"]]

    # Collective hash, first: a plan whose collectives were reordered after scheduling is refused for that,
    # before the storage and ordering checks below report a consequence of it.
    for prog in programs:
        h = 0xcbf29ce484222325
        for ins in prog.get("instrs", []):
            if ins["op"] not in OPS_COMM:
                continue
            if ins["op"] == "barrier":
                dt, n = 0, 0
            else:
                t = tensors[ins["inputs"][0]]
                dt, n = DTYPES[t["dtype"]], elements(t.get("shape", []))
            for byte in struct.pack("<HBBQ", codes[ins["op"]], AXES[ins["axis"]],
                                    dt, n):
                h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        if h != prog["collective_hash"]:
            fail("collective hash %d != recomputed %d" % (prog["collective_hash"], h))

    # Storage: root of each tensor, alignment and arena bounds.
    def root(i):
        while tensors[i]["alias_of"] >= 0:
            i = tensors[i]["alias_of"]
        return i

    for i, t in enumerate(tensors):
        space = {"device": 0, "host": 1, "nvme": 2}[t["space"]]
        if t["offset"] % 256:
            fail("tensor %s offset not aligned" % t["name"])
        if t["offset"] + t["bytes"] > arena[space]:
            fail("tensor %s ends past its arena" % t["name"])
        if t["alias_of"] >= 0:
            b = tensors[root(i)]
            if (b["offset"], b["bytes"]) != (t["offset"], t["bytes"]):
                fail("alias %s differs from its base" % t["name"])
        size = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4,
                "bool8": 1}[t["dtype"]]
        if t["kind"] != "weight_shard" and \
                t["bytes"] < elements(t.get("shape", [])) * size:
            fail("tensor %s reserves fewer bytes than it holds" % t["name"])

    # Liveness from the instruction stream.
    last = max(len(instrs) - 1, 0)
    begin = {}
    end = {}
    for i, t in enumerate(tensors):
        if t["kind"] in WHOLE_RUN:
            begin[i], end[i] = 0, last
    for step, ins in enumerate(instrs):
        for o in ins.get("outputs", []):
            r = root(o)
            begin.setdefault(r, step)
            end[r] = max(end.get(r, step), step)
        for o in ins.get("inputs", []):
            r = root(o)
            if r not in begin:
                fail("tensor %s read before it is written" % tensors[r]["name"])
            end[r] = max(end[r], step)
    for i, t in enumerate(tensors):
        if t["kind"] == "output":
            r = root(i)
            begin[r], end[r] = 0, last
    owners = [i for i in begin if tensors[i]["alias_of"] < 0
              and tensors[i]["bytes"] > 0]
    owners.sort(key=lambda i: (tensors[i]["space"], tensors[i]["offset"]))
    # Sweep by address within each space: any two overlapping ranges must
    # have disjoint lifetimes.
    for a_idx in range(len(owners)):
        a = owners[a_idx]
        ta = tensors[a]
        for b in owners[a_idx + 1:]:
            tb = tensors[b]
            if tb["space"] != ta["space"] or \
                    tb["offset"] >= ta["offset"] + ta["bytes"]:
                break
            if not (end[a] < begin[b] or end[b] < begin[a]):
                fail("tensors %s and %s overlap while both live" %
                     (ta["name"], tb["name"]))
    peak = 0
    for step in range(last + 1):
        live = sum(tensors[i]["bytes"] for i in owners
                   if tensors[i]["space"] == "device"
                   and begin[i] <= step <= end[i])
        peak = max(peak, live)
    # Planned peak = device arena + workspace + runtime reserve (plan 1.1); on the cpu target the last two
    # are 0.
    reserve = mem[0].get("runtime_reserve_bytes", 0) or 0
    workspace = mem[0].get("workspace_bytes", 0) or 0
    if mem[0]["planned_peak_bytes"] != arena[0] + workspace + reserve:
        fail("planned peak != device arena + workspace + runtime reserve")
    if arena[0] < peak:
        fail("device arena %d below the live peak %d" % (arena[0], peak))

    instrs_all = instrs
    for prog in programs:
        instrs = prog.get("instrs", [])
        # Events: every wait names an event some earlier instruction signals.
        signalled = set()
        for ins in instrs:
            for e in ins.get("waits", []):
                if e not in signalled:
                    fail("instruction %s waits on event %d before it is signalled"
                         % (ins.get("name", "?"), e))
            if ins["signal"] >= 0:
                if ins["signal"] >= prog["num_events"]:
                    fail("event id out of range")
                # One signaller per event: a wait must name one instruction, or the order it gives depends on
                # which record the waiter happens to see.
                if ins["signal"] in signalled:
                    fail("event %d is signalled twice (again by instruction %s)"
                         % (ins["signal"], ins.get("name", "?")))
                signalled.add(ins["signal"])

        # Ordering under concurrent streams: each stream runs its instructions in
        # order; a wait orders an instruction after the signalling one. Vector
        # clocks give happens-before. Every read must happen after the write of
        # what it reads, and a tensor that reuses bytes of an earlier one must be
        # written only after every instruction touching the earlier one is done.
        streams = {"compute": 0, "comm": 1, "copy": 2, "io": 3}
        seq_on_stream = [0, 0, 0, 0]
        clock = []
        pos = []
        signaller = {}
        for step, ins in enumerate(instrs):
            st = streams[ins["stream"]]
            vc = [0, 0, 0, 0]
            # Previous instruction on the same stream.
            for prev in range(step - 1, -1, -1):
                if streams[instrs[prev]["stream"]] == st:
                    vc = list(clock[prev])
                    break
            for e in ins.get("waits", []):
                vc = [max(x, y) for x, y in zip(vc, clock[signaller[e]])]
            seq_on_stream[st] += 1
            vc[st] = seq_on_stream[st]
            clock.append(vc)
            pos.append((st, seq_on_stream[st]))
            if ins["signal"] >= 0:
                signaller[ins["signal"]] = step

        def before(x, y):
            """Instruction x happens before instruction y (or is y)."""
            st, n = pos[x]
            return x == y or clock[y][st] >= n

        writer = {}
        touch = {}
        for step, ins in enumerate(instrs):
            for o in ins.get("outputs", []):
                writer.setdefault(root(o), step)
            for o in ins.get("inputs", []) + ins.get("outputs", []):
                touch.setdefault(root(o), []).append(step)
        for step, ins in enumerate(instrs):
            for o in ins.get("inputs", []):
                r = root(o)
                w = writer.get(r)
                # Persistent state read before this run writes it holds the
                # value from before the run: nothing to order there.
                if w is not None and w > step and tensors[r]["kind"] in PERSISTENT:
                    continue
                if w is not None and not before(w, step):
                    fail("instruction %d (%s) may read %s before it is written"
                         % (step, ins["op"], tensors[r]["name"]))
        # Persistent state is written in place: every write must be ordered
        # after each earlier touch of it (write-after-read) and before each
        # later one.
        for step, ins in enumerate(instrs):
            for o in ins.get("outputs", []):
                r = root(o)
                if tensors[r]["kind"] not in PERSISTENT:
                    continue
                for t in touch[r]:
                    if t < step and not before(t, step):
                        fail("instruction %d (%s) may write %s before instruction %d (%s) has read it"
                             % (step, ins["op"], tensors[r]["name"], t, instrs[t]["op"]))
                    if t > step and not before(step, t):
                        fail("instruction %d (%s) may touch %s before instruction %d (%s) has written it"
                             % (t, instrs[t]["op"], tensors[r]["name"], step, ins["op"]))
        transient = [i for i in owners if tensors[i]["kind"] not in WHOLE_RUN
                     and tensors[i]["kind"] != "output" and i in writer]
        for a in transient:
            for b in transient:
                ta, tb = tensors[a], tensors[b]
                if a == b or ta["space"] != tb["space"] or end[a] >= begin[b]:
                    continue
                if ta["offset"] >= tb["offset"] + tb["bytes"] or \
                        tb["offset"] >= ta["offset"] + ta["bytes"]:
                    continue
                for t in touch[a]:
                    if not before(t, writer[b]):
                        fail("%s reuses bytes of %s while instruction %d (%s) "
                             "may still touch them" % (tb["name"], ta["name"], t,
                                                       instrs[t]["op"]))

    instrs = instrs_all

    # Plan 2.18: a step marked early loads some operands before it waits for the previous kernel on its stream,
    # so no step may write them meanwhile. Restated here from zrt/ops.def's op comments, not from zrt/ops.h:
    # the products' weights, decode_layer's weights and second norm (inputs 8 to 15) must be written by no
    # instruction of the plan; rope_attention's caches and positions (5 to 7) by no other instruction of its
    # program, and some instruction of its program that launches work (not a reshape or release) must come
    # before it on its stream.
    def early_inputs(op, n):
        if op in ("matmul", "linear"):
            return "plan", [1]
        if op == "linear_multi":
            return "plan", list(range(1, n))
        if op == "linear_gated":
            return "plan", [1, 2]
        if op == "norm_products":
            return "plan", list(range(3, n))
        if op == "decode_layer":
            return "plan", list(range(8, 16))
        if op == "rope_attention":
            return "program", [5, 6, 7]
        return None, []

    def overlaps(a, b):
        ta, tb = tensors[a], tensors[b]
        return ta["space"] == tb["space"] and ta["offset"] < tb["offset"] + tb["bytes"] and \
            tb["offset"] < ta["offset"] + ta["bytes"]

    early = {}
    for prog in programs:
        seen_streams = set()
        pinstrs = prog.get("instrs", [])
        for step, ins in enumerate(pinstrs):
            if ins.get("early"):
                scope, which = early_inputs(ins["op"], len(ins["inputs"]))
                if scope is None:
                    fail("%s step %d (%s) is marked early but loads nothing early" %
                         (prog["name"], step, ins["op"]))
                if scope == "program" and ins["stream"] not in seen_streams:
                    fail("%s step %d (%s) is marked early but is the first on its stream" %
                         (prog["name"], step, ins["op"]))
                writers = [(q, j, w) for q in programs for j, w in enumerate(q.get("instrs", []))
                           if scope == "plan" or (q is prog and j != step)]
                for k in which:
                    t = ins["inputs"][k]
                    if t < 0 or tensors[t]["bytes"] == 0:
                        continue
                    for q, j, w in writers:
                        if any(overlaps(o, t) for o in w.get("outputs", [])):
                            fail("%s step %d (%s) is marked early but its input %d (%s) is written by %s step %d (%s)" %
                                 (prog["name"], step, ins["op"], k, tensors[t]["name"], q["name"], j, w["op"]))
                early.setdefault(prog["name"], {})
                early[prog["name"]][ins["op"]] = early[prog["name"]].get(ins["op"], 0) + 1
            if ins["op"] not in ("reshape", "release"):
                seen_streams.add(ins["stream"])

    # Weight bindings. ZeRO's master parts are loaded like shards but count as
    # master weights.
    masters = {e["tensor"] for e in p.get("state", []) if e["kind"] == "master"}
    resident = 0
    counted = set()
    for b in p.get("bindings", []):
        t = tensors[b["tensor"]]
        if len(b["ranks"]) != world:
            fail("binding %s has %d rank slices" % (t["name"], len(b["ranks"])))
        local = elements(b["local_shape"])
        size = t["bytes"]
        if t["kind"] == "weight_shard":
            shard = elements(t["shape"])
            for tpi in range(tp):
                ranges = sorted((b["ranks"][d * tp + tpi]["flat_begin"],
                                 b["ranks"][d * tp + tpi]["flat_end"])
                                for d in range(dp))
                pos = 0
                for lo, hi in ranges:
                    if lo != pos or hi - lo != shard:
                        fail("shard ranges of %s do not tile" % t["name"])
                    pos = hi
                if pos < local:
                    fail("shards of %s do not cover it" % t["name"])
        else:
            for s in b["ranks"]:
                if (s["flat_begin"], s["flat_end"]) != (0, local):
                    fail("resident weight %s is not whole" % t["name"])
        dsize = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4,
                 "bool8": 1}[t["dtype"]]
        # A merged weight's parts are several bindings of one tensor: count
        # its bytes once.
        if b["tensor"] not in masters and b["tensor"] not in counted:
            resident += elements(t["shape"]) * dsize
            counted.add(b["tensor"])
    if resident != mem[0]["resident_weight_bytes"]:
        fail("resident weight bytes %d != %d recomputed" %
             (mem[0]["resident_weight_bytes"], resident))

    ops = {}
    for ins in instrs:
        ops[ins["op"]] = ops.get(ins["op"], 0) + 1
    print("plan: world %d tp %d dp %d dtype %s" % (world, tp, dp, fp["dtype"]))
    for prog in programs:
        if len(programs) > 1:
            print("program %s: %d instructions, %d scalars" %
                  (prog["name"], len(prog.get("instrs", [])),
                   len(prog.get("scalars", []))))
        for io in ("inputs", "outputs"):
            for b in prog.get(io, []):
                print("%s %s %s [%s] split=%s" % (io[:-1], b["name"], b["dtype"],
                      ",".join(str(x) for x in b["global_shape"]),
                      str(b["batch_split"]).lower()))
    print("ops: " + " ".join("%s=%d" % kv for kv in sorted(ops.items())))
    for name in args.ints:
        lists = {}
        for ins in instrs:
            if ins["op"] == name:
                key = "[" + ",".join(str(v) for v in ins.get("ints", [])) + "]"
                lists[key] = lists.get(key, 0) + 1
        print("ints %s: %s" % (name, " ".join("%s=%d" % kv for kv in sorted(lists.items()))))
    if args.early:
        if not early:
            print("early: none")
        for prog in programs:
            if prog["name"] in early:
                print("early %s: %s" % (prog["name"], " ".join(
                    "%s=%d" % kv for kv in sorted(early[prog["name"]].items()))))
    print("weights: %d sources, %d bindings" % (len(p.get("weights", [])),
                                               len(p.get("bindings", []))))
    # The state table names every persistent tensor once.
    state = p.get("state", [])
    named = set()
    for e in state:
        if e["tensor"] in named:
            fail("tensor %d has two state entries" % e["tensor"])
        named.add(e["tensor"])
        if len(e["ranks"]) != world:
            fail("state %s has %d rank slices" % (e["name"], len(e["ranks"])))
    for i, t in enumerate(tensors):
        if t["kind"] in ("weight", "weight_shard", "grad", "master", "moment",
                         "state") and i not in named:
            fail("persistent tensor %s has no state entry" % t["name"])
    if len(programs) > 1:
        print("state: %d entries" % len(state))
    print("check_plan: OK")


if __name__ == "__main__":
    main()
