#!/usr/bin/env python3
"""The table of bench/gpu/fwd_call.sh, from the logs in DIR (zrun.log, torch.log, profile.log, kbench.log): each
zrun run's median ms, tokens/s, ratio to torch.compile of the same model, planned against measured process peak;
the PyTorch peers; the offload run against its PCIe floor (the report's host parameter bytes over the measured
pinned host-to-device rate).
  fwd_summary.py DIR [OFFLOAD_REPORT]"""
import json
import os
import re
import sys

RUN = re.compile(r"run ([\d.]+) ms \(mean of (\d+), min ([\d.]+) ms, median ([\d.]+) ms\)")
PLANNED = re.compile(r"planned process peak (\d+) B")
MEM = re.compile(r"device memory in use \(cudaMemGetInfo\) peak ([\d.]+) MiB")
HOST_PARAMS = re.compile(r"of which in host memory\s+params (\d+)")
TOKENS = {"gpt2-350m": 8 * 1024, "llama-1b": 8 * 1024, "llama-1b-offload": 8 * 1024, "llama2-7b-b4": 4 * 1024}


def main():
    d = sys.argv[1]
    report = sys.argv[2] if len(sys.argv) > 2 else None
    torch_rows, h2d = [], None
    tl = os.path.join(d, "torch.log")
    if os.path.exists(tl):
        for line in open(tl):
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("impl") == "h2d-pinned":
                    h2d = r["bytes_per_s"]
                else:
                    torch_rows.append(r)
    compiled = {}
    print(f"{'model':<17} {'how':<26} {'ms':>8} {'tokens/s':>10} {'x compile':>9} {'planned MiB':>11} {'measured MiB':>12}")
    for r in torch_rows:
        key = r["model"] + ("-b4" if r.get("batch") == 4 else "")
        if r["impl"] == "torch-compile":
            compiled[key] = r["ms"]
    for r in torch_rows:
        key = r["model"] + ("-b4" if r.get("batch") == 4 else "")
        x = compiled.get(key)
        print(f"{key:<17} {r['impl']:<26} {r['ms']:8.2f} {r['tokens_per_s']:10.0f} {x / r['ms'] if x else float('nan'):9.2f} "
              f"{'':>11} {r['peak_gib'] * 1024:9.1f} alloc")
    zl = os.path.join(d, "zrun.log")
    offload = {}
    if os.path.exists(zl):
        for block in open(zl).read().split("=== ")[1:]:
            label = block.split("\n", 1)[0].strip()
            how, model = label.split("/", 1)
            m = RUN.search(block)
            if not m:
                print(f"{model:<17} {how:<26} {'failed':>8}")
                continue
            ms = float(m.group(4))
            base = model.replace("-offload", "")
            x = compiled.get(base)
            pp, mm = PLANNED.search(block), MEM.search(block)
            planned = int(pp.group(1)) / 2**20 if pp else float("nan")
            measured = float(mm.group(1)) if mm else float("nan")
            tok = TOKENS.get(model, 8 * 1024) / (ms / 1e3)
            print(f"{model:<17} zplan {how:<20} {ms:8.2f} {tok:10.0f} {x / ms if x else float('nan'):9.2f} "
                  f"{planned:11.1f} {measured:12.1f}")
            if "offload" in model:
                offload[how] = ms
    if h2d:
        print(f"pinned host-to-device rate: {h2d / 1e9:.1f} GB/s")
        text = open(report).read() if report and os.path.exists(report) else ""
        hp = HOST_PARAMS.search(text)
        if hp:
            floor = int(hp.group(1)) / h2d * 1e3
            print(f"llama-1b --offload-param cpu: {int(hp.group(1))} B of parameters moved a step; PCIe floor {floor:.2f} ms")
            for how, ms in offload.items():
                print(f"  zplan {how}: {ms:.2f} ms = {ms / floor:.2f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
