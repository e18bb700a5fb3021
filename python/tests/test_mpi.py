"""zplan.Engine on an mpirun world of 2 ranks: the same losses as one rank and as PyTorch, zrun's losses on
the same plan under the same mpirun, tensor-parallel logits equal to PyTorch's, and a checkpoint saved by two
ZeRO-1 ranks resumed by one rank at ZeRO 0 (resharded) continuing the straight run; tp 2 generation gives
Hugging Face's greedy tokens."""
import os

import numpy as np

import zplan
from conftest import BIN, MPIRUN, load, mpirun_python, run

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
RECIPE = dict(train=True, batch=2, seq=16, clip_grad=1.0, restore_zero_biases=True)


def test_two_ranks_train_as_one_and_as_zrun(gpt2, tmp_path):
    model, ids = os.path.join(gpt2, "model.onnx"), os.path.join(gpt2, "input_ids.npy")
    plan = zplan.compile(model, zero=1, world=2, out=tmp_path / "z1.zplan", **RECIPE)
    mpirun_python(2, WORKER, "train", plan.path, ids, 5, tmp_path / "py.npy", tmp_path / "ckpt", 3)
    two = np.load(tmp_path / "py.npy")
    np.testing.assert_allclose(two, load(gpt2, "train_losses.npy"), rtol=1e-4)
    with zplan.Engine(zplan.compile(model, **RECIPE)) as one:
        single = [one.step(load(gpt2, "input_ids.npy")) for _ in range(5)]
    np.testing.assert_allclose(two, single, rtol=1e-5)
    run(MPIRUN + ["-np", "2", os.path.join(BIN, "zrun"), plan.path, "--train", "--data", ids, "--steps", "5",
                  "--losses-out", str(tmp_path / "zrun.npy")])
    assert np.array_equal(two, np.load(tmp_path / "zrun.npy"))
    # The two ranks' ZeRO-1 checkpoint of step 3, resumed on one rank by a ZeRO-0 plan.
    with zplan.Engine(zplan.compile(model, **RECIPE)) as resumed:
        info = resumed.load_checkpoint(tmp_path / "ckpt")
        assert (info["step"], info["world"], info["zero_stage"], info["same_plan"]) == (3, 2, 1, False)
        tail = [resumed.step(load(gpt2, "input_ids.npy")) for _ in range(2)]
    np.testing.assert_allclose(tail, two[3:], rtol=1e-5)


def test_tensor_parallel_generation(gpt2, tmp_path):
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), tp=2, generate=True, max_seq=40, batch=2,
                         out=tmp_path / "gen.zplan")
    mpirun_python(2, WORKER, "generate", plan.path, os.path.join(gpt2, "input_ids.npy"), 24, tmp_path / "t.npy")
    assert np.array_equal(np.load(tmp_path / "t.npy"), load(gpt2, "expected_generate.npy"))


def test_tensor_parallel_forward(gpt2, tmp_path):
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), tp=2, batch=2, seq=16, out=tmp_path / "tp2.zplan")
    mpirun_python(2, WORKER, "forward", plan.path, os.path.join(gpt2, "input_ids.npy"), tmp_path / "out.npy")
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), load(gpt2, "expected_output.npy"), atol=1e-4, rtol=0)
