"""One rank of the multi-rank tests (test_mpi.py), started by mpirun:

    mpi_worker.py train PLAN IDS.npy STEPS OUT.npy [SAVE_DIR SAVE_AT]
        steps, rank 0 writes the losses (float64); with SAVE_DIR, a checkpoint after step SAVE_AT.
    mpi_worker.py forward PLAN IDS.npy OUT.npy
        rank 0 writes the first output; every other rank checks that it got None.
    mpi_worker.py generate PLAN IDS.npy N OUT.npy
        N new tokens; rank 0 writes them, every rank checks it has the same.
"""
import sys

import numpy as np

import zplan

mode, plan, ids_path = sys.argv[1], sys.argv[2], sys.argv[3]
ids = np.load(ids_path)
engine = zplan.Engine(plan)
assert engine.world == zplan.world_size() and engine.rank == zplan.rank()
if mode == "train":
    steps, out = int(sys.argv[4]), sys.argv[5]
    save_dir, save_at = (sys.argv[6], int(sys.argv[7])) if len(sys.argv) > 6 else (None, 0)
    losses = []
    for k in range(1, steps + 1):
        losses.append(engine.step(ids))
        if save_dir and k == save_at:
            engine.save_checkpoint(save_dir)
    if engine.rank == 0:
        np.save(out, np.array(losses, dtype=np.float64))
elif mode == "forward":
    out = engine.forward(ids)
    if engine.rank == 0:
        np.save(sys.argv[4], next(iter(out.values())))
    else:
        assert out is None
elif mode == "generate":
    tokens = engine.generate(ids, int(sys.argv[4]))
    if engine.rank == 0:
        np.save(sys.argv[5], tokens)
engine.close()
