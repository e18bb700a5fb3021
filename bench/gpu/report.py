#!/usr/bin/env python3
"""Prints bench/gpu/run.sh's table from the logs in --dir: zrun-<model>.log / profile-<model>.log (zplan on the
cuda backend) and torch.json (the PyTorch peers). Tokens per step are batch x sequence (8 x 1024); TFLOP/s uses
BASELINES.md's 2 N + 4 L d s FLOP per token, with N, L, d from the Hugging Face config (counted on the meta
device when the PyTorch half did not run)."""
import argparse
import glob
import json
import os
import re
import sys

LINE = re.compile(r"planned arena device (\d+) B host (\d+) B; measured device (\d+) B.*runtime scratch (\d+) B; "
                  r"run ([\d.]+) ms \(mean of (\d+), min ([\d.]+) ms, median ([\d.]+) ms\)")
# The plan's own prediction of the whole process's device peak (arena + workspace + CUDA context; plan 1.1).
PLANNED = re.compile(r"planned process peak (\d+) B")
MEM = re.compile(r"zrt cuda: device memory in use \(cudaMemGetInfo\) peak ([\d.]+) MiB \(at start ([\d.]+) MiB\)")
PROF = re.compile(r"zrt cuda: profile over \d+ runs, per run: total ([\d.]+) ms(.*)")


def model_shape(name, torch_rows):
    for r in torch_rows:
        if r["model"] == name:
            return r["params"], r["layers"], r["width"]
    try:
        import torch
        sys.path.insert(0, os.path.dirname(__file__))
        import torch_baseline
        with torch.device("meta"):
            m, layers, width, _ = torch_baseline.build(name)
        return sum(p.numel() for p in m.parameters()), layers, width
    except Exception as e:  # no torch: no TFLOP/s
        print(f"report: cannot count {name}'s parameters ({e})", file=sys.stderr)
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    tokens = a.batch * a.seq
    torch_rows = []
    tj = os.path.join(a.dir, "torch.json")
    if os.path.exists(tj):
        torch_rows = json.load(open(tj))
    rows = []
    for r in torch_rows:
        rows.append(dict(model=r["model"], impl=r["impl"], tok=r["tokens_per_s"], tflops=r["tflops"],
                         planned=None, measured=r["peak_gib"], shares=""))
    for log in sorted(glob.glob(os.path.join(a.dir, "zrun-*.log"))):
        key = os.path.basename(log)[5:-4]
        model = key.replace("-offload", "")
        text = open(log).read()
        m = LINE.search(text)
        if not m:
            print(f"report: no zrun summary line in {log}", file=sys.stderr)
            continue
        # The median of the timed runs (after the warm-up runs), as the PyTorch peers report theirs.
        best_ms = float(m.group(8))
        pp = PLANNED.search(text)
        planned = int(pp.group(1)) / 2**30 if pp else (int(m.group(1)) + int(m.group(4))) / 2**30
        mm = MEM.search(text)
        measured = (float(mm.group(1)) / 1024) if mm else None
        tok = tokens / (best_ms / 1e3)
        shape = model_shape(model, torch_rows)
        tflops = tok * (2.0 * shape[0] + 4.0 * shape[1] * shape[2] * a.seq) / 1e12 if shape else float("nan")
        shares = ""
        pl = os.path.join(a.dir, f"profile-{key}.log")
        if os.path.exists(pl):
            p = PROF.search(open(pl).read())
            if p:
                parts = dict((k.strip(), float(v)) for k, v in re.findall(r"; ([a-z/]+) [\d.]+ ms \(([\d.]+)%\)", p.group(2)))
                other = 100.0 - parts.get("gemm", 0) - parts.get("attention", 0)
                shares = f"gemm {parts.get('gemm', 0):.0f}% attn {parts.get('attention', 0):.0f}% other {other:.0f}%"
        rows.append(dict(model=model, impl="zplan" + ("+offload" if "offload" in key else ""), tok=tok, tflops=tflops,
                         planned=planned, measured=measured, shares=shares))
    peers = {(r["model"], r["impl"]): r["tok"] for r in rows if r["impl"].startswith("torch")}
    hdr = f"{'model':<11} {'impl':<14} {'tokens/s':>10} {'TFLOP/s':>8} {'x eager':>8} {'x compile':>9} " \
          f"{'planned GiB':>11} {'measured GiB':>12}  time shares"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        e = peers.get((r["model"], "torch-eager"))
        c = peers.get((r["model"], "torch-compile"))
        fmt = lambda v, f: (f % v) if v is not None else "-"
        print(f"{r['model']:<11} {r['impl']:<14} {r['tok']:>10,.0f} {r['tflops']:>8.1f} "
              f"{fmt(r['tok'] / e if e else None, '%.2f'):>8} {fmt(r['tok'] / c if c else None, '%.2f'):>9} "
              f"{fmt(r['planned'], '%.2f'):>11} {fmt(r['measured'], '%.2f'):>12}  {r['shares']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
