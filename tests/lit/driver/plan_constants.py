#!/usr/bin/env python3
"""Sums the inline constants of zplan plans (Plan.constants) and checks them against a bound.

For each plan prints "NAME: N constants, B bytes" and its largest constants; fails (exit 1, "FAIL ...") when the
constant bytes exceed --max-bytes or the file exceeds --max-file. Reads the plan with check_plan.py's FlatBuffers
reader (tests/lit/plan).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plan"))
from check_plan import read_plan  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--schema", required=True)
    ap.add_argument("--max-bytes", type=int, required=True, help="bound on the constants' bytes of each plan")
    ap.add_argument("--max-file", type=int, required=True, help="bound on each plan file's size")
    args = ap.parse_args()
    problems = []
    for path in args.plans:
        p = read_plan(path, args.schema)
        consts = p.get("constants", []) or []
        sizes = [len(c.get("data", []) or []) for c in consts]
        total = sum(sizes)
        by_index = {t.get("constant"): t for t in p["tensors"] if t["kind"] == "constant"}
        name = os.path.basename(path)
        print(f"{name}: {len(consts)} constants, {total} bytes; file {os.path.getsize(path)} bytes")
        for size, i in sorted(((s, i) for i, s in enumerate(sizes)), reverse=True)[:3]:
            t = by_index.get(i, {})
            print(f"  {size} bytes: {t.get('name')} {t.get('shape')} {t.get('dtype')}")
        if total > args.max_bytes:
            problems.append(f"FAIL {name}: {total} bytes of constants, more than {args.max_bytes}")
        if os.path.getsize(path) > args.max_file:
            problems.append(f"FAIL {name}: the file has {os.path.getsize(path)} bytes, more than {args.max_file}")
    for line in problems:
        print(line)
    if not problems:
        print("plan_constants: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
