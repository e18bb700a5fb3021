#!/usr/bin/env python3
"""Checks `zplan estimate --json` against plain `zplan` compiles of the same configurations.

For a spread of the estimate's rows that compiled, runs `zplan MODEL <row args> --report-json R` and compares
every figure of the row with the report of that plan, field by field (device parts are the report's totals minus
its host parts). Rows the estimator marks refused must be refused by `zplan` too, with the same message. Also
checks the estimate's own bookkeeping: one row per (tp dividing world) x ZeRO stage x placement x recompute, NVMe
rows marked not supported yet, and "fits" equal to planned peak <= --gpu-mem. With --config-args (the flags of a
plain `zplan --ds-config FILE ...` compile), the one row the estimate marks as the config's own must hold that
plan's figures, and is always among the compared rows.

Prints "compare_estimate: OK" when everything agrees; each disagreement is a "MISMATCH ..." line.
"""
import argparse
import json
import os
import subprocess
import sys


def run_zplan(model, args, work, name):
    plan = os.path.join(work, name + ".zplan")
    report = os.path.join(work, name + ".json")
    proc = subprocess.run(["zplan", model, *args, "-o", plan, "--report-json", report],
                          capture_output=True, text=True)
    return proc, report


def expected_row_count(est):
    world = est["world"]
    tps = [t for t in range(1, world + 1) if world % t == 0]
    # Placements below stage 3 (none, cpu) and at stage 3 (those, plus cpu/cpu for training and nvme).
    if est["train"]:
        per_tp = 3 * 2 + 4
        recompute = 3  # none, selective, full
    else:
        per_tp = 3 * 2 + 3
        recompute = 1
    return len(tps) * per_tp * recompute


def compare(row, report, problems, swept_from_flags=True):
    r = report["ranks"][0]
    dev, host, comm = row["device"], row["host"], row["comm"]
    # The NVMe parts (docs/nvme.md) are neither on the device nor in host memory.
    nv = {k: r.get("nvme_" + k + "_bytes", 0) for k in ("param", "master", "moment", "state")}
    pairs = {
        "device.param_bytes": (dev["param_bytes"], r["param_bytes"] - r["host_param_bytes"] - nv["param"]),
        "device.grad_bytes": (dev["grad_bytes"], r["grad_bytes"] - r["host_grad_bytes"]),
        "device.master_bytes": (dev["master_bytes"], r["master_bytes"] - r["host_master_bytes"] - nv["master"]),
        "device.moment_bytes": (dev["moment_bytes"], r["moment_bytes"] - r["host_moment_bytes"] - nv["moment"]),
        "device.state_bytes": (dev["state_bytes"], r["state_bytes"] - r["host_state_bytes"] - nv["state"]),
        "device.optimizer_bytes": (dev["optimizer_bytes"],
                                   r["master_bytes"] - r["host_master_bytes"] - nv["master"] + r["moment_bytes"]
                                   - r["host_moment_bytes"] - nv["moment"]),
        "nvme.param_bytes": (row["nvme"]["param_bytes"], nv["param"]),
        "nvme.master_bytes": (row["nvme"]["master_bytes"], nv["master"]),
        "nvme.moment_bytes": (row["nvme"]["moment_bytes"], nv["moment"]),
        "nvme.file_bytes": (row["nvme"]["file_bytes"], r.get("nvme_file_bytes", 0)),
        "device.activation_bytes": (dev["activation_bytes"], r["activation_bytes"]),
        "device.peak_gathered_param_bytes": (dev["peak_gathered_param_bytes"], r["peak_gathered_param_bytes"]),
        "device.collective_buffer_bytes": (dev["collective_buffer_bytes"], r["collective_buffer_bytes"]),
        "device.bucket_bytes": (dev["bucket_bytes"], r["bucket_bytes"]),
        "device.buffer_bytes": (dev["buffer_bytes"], r["peak_gathered_param_bytes"] + r["collective_buffer_bytes"]
                                + r["bucket_bytes"]),
        "device.workspace_bytes": (dev["workspace_bytes"], r["workspace_bytes"]),
        "device.runtime_reserve_bytes": (dev["runtime_reserve_bytes"], r["runtime_reserve_bytes"]),
        "device.arena_bytes": (dev["arena_bytes"], r["device_arena_bytes"]),
        "device.planned_peak_bytes": (dev["planned_peak_bytes"], r["planned_peak_bytes"]),
        "host.param_bytes": (host["param_bytes"], r["host_param_bytes"]),
        "host.grad_bytes": (host["grad_bytes"], r["host_grad_bytes"]),
        "host.master_bytes": (host["master_bytes"], r["host_master_bytes"]),
        "host.moment_bytes": (host["moment_bytes"], r["host_moment_bytes"]),
        "host.state_bytes": (host["state_bytes"], r["host_state_bytes"]),
        "host.optimizer_bytes": (host["optimizer_bytes"], r["host_master_bytes"] + r["host_moment_bytes"]),
        "host.arena_bytes": (host["arena_bytes"], r["planned_host_bytes"]),
        "comm.sent_bytes": (comm["sent_bytes"], sum(b for axes in r["comm"].values() for b in axes.values())),
        "comm.calls": (comm["calls"], sum(n for axes in r["comm_calls"].values() for n in axes.values())),
        "comm.sent_by_kind": (comm["sent_by_kind"], r["comm"]),
    }
    # The plan's mesh is the row's.
    pairs["tp"] = (row["tp"], report["tp"])
    pairs["dp"] = (row["dp"], report["dp"])
    name = " ".join(row["args"])
    for field, (mine, theirs) in pairs.items():
        if mine != theirs:
            problems.append(f"MISMATCH [{name}] {field}: estimate {mine}, zplan report {theirs}")
    # The swept settings came from the command line the estimator built.
    sources = {s["flag"]: s["source"] for s in report.get("settings", [])}
    for flag in ("--tp", "--zero", "--world") if swept_from_flags else ():
        if sources.get(flag) != "flag":
            problems.append(f"MISMATCH [{name}] settings: {flag} source {sources.get(flag)}, expected flag")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("estimate")
    ap.add_argument("--work", required=True)
    ap.add_argument("--max-rows", type=int, default=8, help="compiled rows to check with plain zplan")
    ap.add_argument("--perturb", help="add 1 to this device field of each compared row (the script must fail)")
    ap.add_argument("--config-args", help="flags of `zplan MODEL --ds-config FILE ...` whose plan is the marked row")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    with open(args.estimate) as f:
        est = json.load(f)
    rows = est["rows"]
    problems = []

    if len(rows) != expected_row_count(est):
        problems.append(f"MISMATCH row count {len(rows)}, expected {expected_row_count(est)}")
    for row in rows:
        # NVMe rows (docs/nvme.md) exist at stage 3 only and compile like the others.
        if "nvme" in (row["offload_param"], row["offload_optimizer"]) and row["zero"] != 3:
            problems.append(f"MISMATCH nvme row {row['args']} below stage 3")
        if row["status"] == "ok" and est["gpu_mem"]:
            fits = row["device"]["planned_peak_bytes"] <= est["gpu_mem"] and (
                not est["host_mem"] or row["host"]["arena_bytes"] <= est["host_mem"])
            if row["fits"] != fits:
                problems.append(f"MISMATCH fits {row['args']}: {row['fits']}, expected {fits}")

    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        problems.append("MISMATCH no row compiled")
    # An even spread over the compiled rows, always including the first and the last.
    step = max(1, (len(ok) - 1) // max(1, args.max_rows - 1))
    indices = sorted(set(list(range(0, len(ok), step))[: args.max_rows - 1] + [len(ok) - 1]))
    picked = [ok[i] for i in indices]
    marked = [r for r in rows if r.get("ds_config_row")]
    if est.get("ds_config") and len(marked) != 1:
        problems.append(f"MISMATCH {len(marked)} rows marked as the config's, expected 1")
    if not est.get("ds_config") and marked:
        problems.append("MISMATCH a row is marked as the config's without --ds-config")
    for row in marked:
        if row["status"] == "ok" and row not in picked:
            picked.append(row)
    if args.perturb:
        # The check of the check: one figure off by one byte in every compared row must be caught.
        for row in picked:
            row["device"][args.perturb] += 1
    for i, row in enumerate(picked):
        proc, report_path = run_zplan(est["model"], row["args"], args.work, f"row{i}")
        if proc.returncode != 0:
            problems.append(f"MISMATCH [{' '.join(row['args'])}] zplan failed: {proc.stderr.strip()}")
            continue
        with open(report_path) as f:
            compare(row, json.load(f), problems)

    if args.config_args:
        # The config's own row against `zplan --ds-config`: the same figures.
        proc, report_path = run_zplan(est["model"], args.config_args.split(), args.work, "config")
        if proc.returncode != 0 or len(marked) != 1:
            problems.append(f"MISMATCH zplan {args.config_args}: rc {proc.returncode}, {proc.stderr.strip()}")
        else:
            with open(report_path) as f:
                report = json.load(f)
            compare(marked[0], report, problems, swept_from_flags=False)

    refused = [r for r in rows if r["status"] == "refused"]
    for i, row in enumerate(refused[:2]):
        proc, _ = run_zplan(est["model"], row["args"], args.work, f"refused{i}")
        if proc.returncode == 0 or row["reason"] not in proc.stderr:
            problems.append(f"MISMATCH [{' '.join(row['args'])}] refused by the estimate ({row['reason']}) "
                            f"but zplan said: rc {proc.returncode}, {proc.stderr.strip()}")

    for p in problems:
        print(p)
    print(f"compare_estimate: {len(rows)} rows, {len(picked)} compared with zplan, {min(2, len(refused))} refusals")
    if not problems:
        print("compare_estimate: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
