"""Breaks an emitted zplan plan in one named way, for the plan checker's negative tests.

    mutate_plan.py MUTATION IN.zplan OUT.zplan --schema plan.fbs

The plan goes through flatc (to JSON and back), so the mutation edits fields by name and survives changes
of the schema's layout; the header (magic copied from the input, payload length, CRC-32) is rewritten.
Plans with named programs (format 2) are edited in their first program that has what the mutation needs.
Mutations, each chosen deterministically from the plan's own contents:
  drop-wait      removes a wait that orders a read after a write made on another stream
  double-signal  makes a second instruction signal an event that another one already signals
  overlap        moves a transient tensor onto the bytes of another tensor live at the same time
  swap-collectives  swaps two collectives of different kinds (op, axis, dtype or size) in the list
  claim-early    marks early (plan 2.18) the first step that could load weights before its wait but is not
                 marked (its weights are written by some step: a ZeRO-3 gather, an offload copy)
Prints what it changed; exits 2 when the plan has nothing the mutation can break.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

from check_plan import op_names, read_plan

WHOLE_RUN = {"input", "output", "weight", "weight_shard", "constant"}


def die(msg, code=2):
    print("mutate_plan: " + msg)
    sys.exit(code)


def to_binary(p, schema, d):
    jp = os.path.join(d, "mutated.json")
    json.dump(p, open(jp, "w"))
    subprocess.run(["flatc", "--binary", "-o", d, schema, jp], check=True)
    # flatc names the output after the JSON file, with the schema's file_extension.
    out = [f for f in os.listdir(d) if f.startswith("mutated.") and f != "mutated.json"]
    if len(out) != 1:
        die("flatc wrote %s" % out)
    return open(os.path.join(d, out[0]), "rb").read()


def programs(p):
    """The instruction lists of the plan: the top-level one (format 1) or each program's (format 2)."""
    lists = []
    if p.get("instrs"):
        lists.append(p["instrs"])
    for prog in p.get("programs", []) or []:
        if prog.get("instrs"):
            lists.append(prog["instrs"])
    return lists


def root(tensors, i):
    while tensors[i].get("alias_of", -1) >= 0:
        i = tensors[i]["alias_of"]
    return i


def drop_wait(p, instrs, tensors):
    signaller = {}
    for step, ins in enumerate(instrs):
        if ins.get("signal", -1) >= 0:
            signaller.setdefault(ins["signal"], step)
    for step, ins in enumerate(instrs):
        for e in ins.get("waits", []) or []:
            w = signaller.get(e)
            if w is None or instrs[w]["stream"] == ins["stream"]:
                continue
            written = {root(tensors, o) for o in instrs[w].get("outputs", [])}
            read = {root(tensors, o) for o in ins.get("inputs", [])}
            if written & read:
                # Later waits of the same stream would not help an instruction that runs before them.
                ins["waits"] = [x for x in ins["waits"] if x != e]
                return "instruction %d (%s) no longer waits on event %d of instruction %d" % (
                    step, ins.get("name", "?"), e, w)
    return None


def double_signal(p, instrs, tensors):
    first = None
    for step, ins in enumerate(instrs):
        if ins.get("signal", -1) >= 0:
            first = step
            break
    if first is None:
        return None
    e = instrs[first]["signal"]
    for step, ins in enumerate(instrs):
        if step != first and ins.get("signal", -1) < 0:
            ins["signal"] = e
            return "instruction %d also signals event %d (signalled by instruction %d)" % (step, e, first)
    return None


def overlap(p, instrs, tensors):
    begin, end = {}, {}
    for step, ins in enumerate(instrs):
        for o in ins.get("outputs", []) + ins.get("inputs", []):
            r = root(tensors, o)
            begin.setdefault(r, step)
            end[r] = step
    cands = [i for i in begin if tensors[i].get("alias_of", -1) < 0 and tensors[i]["kind"] not in WHOLE_RUN
             and tensors[i]["bytes"] > 0]
    for a in cands:
        for b in cands:
            ta, tb = tensors[a], tensors[b]
            if a == b or ta["space"] != tb["space"] or ta["offset"] == tb["offset"]:
                continue
            if end[a] < begin[b] or end[b] < begin[a]:
                continue
            if tb["bytes"] > ta["bytes"]:
                continue  # keep b inside the arena: it moves onto a's bytes
            old = tb["offset"]
            tb["offset"] = ta["offset"]
            for t in tensors:  # aliases follow their base
                if t.get("alias_of", -1) >= 0 and root(tensors, tensors.index(t)) == b:
                    t["offset"] = ta["offset"]
            return "tensor %s moved from offset %d onto %s at %d (both live at step %d)" % (
                tb["name"], old, ta["name"], ta["offset"], max(begin[a], begin[b]))
    return None


def swap_collectives(p, instrs, tensors, codes):
    comm = {codes[n] for n in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                               "gather_param") if n in codes}

    def sig(ins):
        t = tensors[ins["inputs"][0]] if ins.get("inputs") else {}
        return (ins["op"], ins.get("axis"), t.get("dtype"), tuple(t.get("shape", [])))

    idx = [i for i, ins in enumerate(instrs) if ins["op"] in comm]
    for x in idx:
        for y in idx:
            if y > x and sig(instrs[x]) != sig(instrs[y]):
                instrs[x], instrs[y] = instrs[y], instrs[x]
                return "collectives at instructions %d and %d swapped" % (x, y)
    return None


def claim_early(p, instrs, tensors, codes):
    names = {c: n for n, c in codes.items()}
    for i, ins in enumerate(instrs):
        op = names.get(ins["op"], "?")
        ints = ins.get("ints", [])
        few_rows = (op == "linear" and len(ints) == 2 and ints[1] > 0) or \
            (op == "matmul" and len(ints) == 3 and ints[2] > 0)
        if (few_rows or op in ("linear_multi", "linear_gated", "norm_products", "decode_layer")) and \
                not ins.get("early"):
            ins["early"] = True
            return "marked instruction %d (%s '%s') early" % (i, op, ins.get("name", ""))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mutation", choices=["drop-wait", "double-signal", "overlap", "swap-collectives",
                                         "claim-early"])
    ap.add_argument("plan")
    ap.add_argument("out")
    ap.add_argument("--schema", required=True)
    args = ap.parse_args()
    # read_plan checks the header (magic, length, CRC) before reading the FlatBuffer through flatc.
    p = read_plan(args.plan, args.schema)
    codes = {name: code for code, name in op_names(args.schema).items()}
    with tempfile.TemporaryDirectory() as d:
        tensors = p["tensors"]
        what = None
        for instrs in programs(p):
            if args.mutation == "drop-wait":
                what = drop_wait(p, instrs, tensors)
            elif args.mutation == "double-signal":
                what = double_signal(p, instrs, tensors)
            elif args.mutation == "overlap":
                what = overlap(p, instrs, tensors)
            elif args.mutation == "claim-early":
                what = claim_early(p, instrs, tensors, codes)
            else:
                what = swap_collectives(p, instrs, tensors, codes)
            if what:
                break
        if not what:
            die("nothing to %s in %s" % (args.mutation, args.plan))
        payload = to_binary(p, args.schema, d)
    header = open(args.plan, "rb").read(8) + struct.pack("<QII", len(payload), zlib.crc32(payload) & 0xFFFFFFFF, 0)
    open(args.out, "wb").write(header + payload)
    print("mutate_plan: " + what)


if __name__ == "__main__":
    main()
