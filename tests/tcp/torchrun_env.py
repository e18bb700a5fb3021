#!/usr/bin/env python3
"""Starts N processes the way torchrun does, without torch: each gets RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a free port of the
loopback), and no MPI launcher's variables. Like torchrun, when one process fails the others are stopped,
unless --keep-going (a test that wants to see how the others end by themselves). The exit status is the first
failure's, or 0.

    torchrun_env.py [--env VAR=VALUE]... [--keep-going] -np N PROGRAM ARGS...

The -np spelling lets the end-to-end scripts take it in place of "mpirun ..." (tests/e2e/run_model.sh).
"""

import os
import signal
import socket
import subprocess
import sys
import time


def main(argv):
    extra = {}
    n = None
    keep_going = False
    while argv and argv[0].startswith("-"):
        flag = argv.pop(0)
        if flag == "--env":
            k, _, v = argv.pop(0).partition("=")
            extra[k] = v
        elif flag == "--keep-going":
            keep_going = True
        elif flag in ("-np", "--nproc-per-node"):
            n = int(argv.pop(0))
        else:
            sys.exit(f"torchrun_env.py: unknown flag {flag}")
    if n is None or n < 1 or not argv:
        sys.exit("usage: torchrun_env.py [--env VAR=VALUE]... [--keep-going] -np N PROGRAM ARGS...")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_"))}
    base.update(extra)
    procs = []
    for r in range(n):
        env = dict(base, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0",
                   ROLE_RANK=str(r), ROLE_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(argv, env=env))
    status = 0
    live = set(range(n))
    while live:
        for r in sorted(live):
            rc = procs[r].poll()
            if rc is None:
                continue
            live.discard(r)
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 128 - rc
                print(f"torchrun_env.py: rank {r} exited with {rc}" + ("" if keep_going else "; stopping the others"),
                      file=sys.stderr)
                for k in () if keep_going else live:
                    procs[k].send_signal(signal.SIGTERM)
                deadline = time.monotonic() + 5
                for k in live:
                    try:
                        procs[k].wait(max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        procs[k].kill()
        time.sleep(0.02)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
