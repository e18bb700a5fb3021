"""zplan.Engine and zrun under torchrun's environment, without MPI: the ranks get RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT as torchrun gives them (tests/tcp/torchrun_env.py sets them without torch) and
the runtime connects them over TCP. Two ZeRO-1 ranks train as PyTorch and as zrun on the same plan under the
same launcher (the same bits: the TCP reductions are deterministic), and as the same plan under mpirun; tensor-
parallel logits equal PyTorch's."""
import os
import subprocess
import sys
import time

import numpy as np

import zplan
from conftest import BIN, CLEAN_ENV, MPIRUN, SRC, load, mpirun_python, run

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
TORCHRUN_ENV = [sys.executable, os.path.join(SRC, "tests", "tcp", "torchrun_env.py"), "--env",
                "ZRT_CHECK_COLLECTIVES=1"]
RECIPE = dict(train=True, batch=2, seq=16, clip_grad=1.0, restore_zero_biases=True)


def torchrun_python(world, script, *args):
    """What `torchrun --nproc-per-node WORLD SCRIPT ARGS` starts, with this interpreter and package."""
    e = dict(CLEAN_ENV)
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(zplan.__file__)))
    return run(TORCHRUN_ENV + ["-np", str(world), sys.executable, script, *map(str, args)], env=e)


def test_two_ranks_train_as_pytorch_zrun_and_mpirun(gpt2, tmp_path):
    model, ids = os.path.join(gpt2, "model.onnx"), os.path.join(gpt2, "input_ids.npy")
    plan = zplan.compile(model, zero=1, world=2, out=tmp_path / "z1.zplan", **RECIPE)
    torchrun_python(2, WORKER, "train", plan.path, ids, 5, tmp_path / "py.npy")
    two = np.load(tmp_path / "py.npy")
    np.testing.assert_allclose(two, load(gpt2, "train_losses.npy"), rtol=1e-4)
    run(TORCHRUN_ENV + ["-np", "2", os.path.join(BIN, "zrun"), plan.path, "--train", "--data", ids, "--steps", "5",
                        "--losses-out", str(tmp_path / "zrun.npy")])
    assert np.array_equal(two, np.load(tmp_path / "zrun.npy"))
    mpirun_python(2, WORKER, "train", plan.path, ids, 5, tmp_path / "mpi.npy")
    np.testing.assert_allclose(two, np.load(tmp_path / "mpi.npy"), rtol=1e-5)


def test_tensor_parallel_forward(gpt2, tmp_path):
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), tp=2, batch=2, seq=16, out=tmp_path / "tp2.zplan")
    torchrun_python(2, WORKER, "forward", plan.path, os.path.join(gpt2, "input_ids.npy"), tmp_path / "out.npy")
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), load(gpt2, "expected_output.npy"), atol=1e-4, rtol=0)


def test_a_failing_rank_ends_the_job_naming_it(gpt2, tmp_path):
    # Rank 1 is given a batch of the wrong shape; it raises before the step's first collective and exits (the
    # abort hook); rank 0, already waiting in that step, fails naming rank 1 instead of hanging.
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), zero=1, world=2, out=tmp_path / "z1.zplan", **RECIPE)
    script = tmp_path / "bad_rank.py"
    script.write_text(
        "import numpy as np, sys, zplan\n"
        "e = zplan.Engine(sys.argv[1])\n"
        "ids = np.load(sys.argv[2])\n"
        "e.step(ids if e.rank == 0 else ids[:1])\n")
    e = dict(CLEAN_ENV, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(zplan.__file__))),
             ZRT_TCP_TIMEOUT_S="60")
    start = time.monotonic()
    p = subprocess.run(TORCHRUN_ENV + ["--keep-going", "-np", "2", sys.executable, str(script), plan.path,
                                       os.path.join(gpt2, "input_ids.npy")],
                       capture_output=True, text=True, env=e, timeout=120)
    assert p.returncode != 0
    assert "ValueError: batch: 1 rows" in p.stderr, p.stderr
    assert "rank 1 closed its connection during" in p.stderr, p.stderr
    assert time.monotonic() - start < 30, "rank 0 waited for the timeout instead of seeing rank 1 leave"
