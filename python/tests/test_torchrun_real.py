"""A real `torchrun --nproc-per-node 2` (torch.distributed.run) over zplan.Engine and over zrun: torchrun's
agent holds MASTER_PORT with its own store, so this checks the rendezvous rule of the TCP communicator
(docs/dist-contract.md, "TCP transport") with the launcher itself. tp 2 logits equal PyTorch's, and the two
ZeRO-1 ranks' losses equal zrun's under the same launcher bit for bit. ctest skips the file where torch is
not installed (CI has no torch; tests/tcp and python/torchrun cover the same paths with torchrun's variables
set by hand): run_pytest.py --needs torch, before pytest starts, so that no failure here reads as a skip."""
import os
import sys

import numpy as np

import zplan
from conftest import BIN, CLEAN_ENV, load, run

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def env():
    e = dict(CLEAN_ENV, ZRT_CHECK_COLLECTIVES="1", ZRT_TCP_TIMEOUT_S="120")
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(zplan.__file__)))
    return e


def test_engine_and_zrun_under_torchrun(gpt2, tmp_path):
    ids = os.path.join(gpt2, "input_ids.npy")
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), tp=2, world=2, batch=2, seq=16, out=tmp_path / "tp2.zplan")
    run(TORCHRUN + [WORKER, "forward", plan.path, ids, str(tmp_path / "out.npy")], env=env())
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), load(gpt2, "expected_output.npy"), atol=1e-4, rtol=0)
    train = zplan.compile(os.path.join(gpt2, "model.onnx"), train=True, zero=1, world=2, batch=2, seq=16,
                          clip_grad=1.0, restore_zero_biases=True, out=tmp_path / "z1.zplan")
    run(TORCHRUN + [WORKER, "train", train.path, ids, "5", str(tmp_path / "py.npy")], env=env())
    run(TORCHRUN + ["--no-python", os.path.join(BIN, "zrun"), train.path, "--train", "--data", ids, "--steps", "5",
                    "--losses-out", str(tmp_path / "zrun.npy")], env=env())
    py = np.load(tmp_path / "py.npy")
    np.testing.assert_allclose(py, load(gpt2, "train_losses.npy"), rtol=1e-4)
    assert np.array_equal(py, np.load(tmp_path / "zrun.npy"))
