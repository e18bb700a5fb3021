"""zplan.Engine on one rank, against independent oracles: PyTorch's logits and training losses stored with
the shared gpt2 export (tests/models/README.md), and zrun's output, losses and checkpoints on the same plan.
Bad input is refused before anything runs, with a message naming the argument or the file."""
import os
import socket

import numpy as np
import pytest

import zplan
from conftest import BIN, MODELS, load, run

RECIPE = dict(train=True, batch=2, seq=16, clip_grad=1.0, restore_zero_biases=True)  # PyTorch's recipe


class DLPackOnly:
    """An array that offers only the DLPack protocol (as a torch CPU tensor does)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.fixture(scope="module")
def forward_plan(tmp_path_factory):
    return zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), batch=2, seq=16,
                         out=tmp_path_factory.mktemp("fwd") / "fwd.zplan")


@pytest.fixture(scope="module")
def train_plan(tmp_path_factory):
    return zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), out=tmp_path_factory.mktemp("tr") / "t.zplan",
                         **RECIPE)


def test_forward_equals_pytorch_and_zrun(gpt2, forward_plan, tmp_path):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(forward_plan) as engine:
        assert (engine.rank, engine.world, engine.tp, engine.dp) == (0, 1, 1, 1)
        out = engine.forward(ids)
        assert list(out) == ["logits"] and out["logits"].dtype == np.float32
        np.testing.assert_allclose(out["logits"], load(gpt2, "expected_output.npy"), atol=1e-4, rtol=0)
        # DLPack producers and keyword inputs give the same bytes.
        assert np.array_equal(engine.forward(DLPackOnly(ids))["logits"], out["logits"])
        assert np.array_equal(engine(input_ids=ids.astype(np.int32))["logits"], out["logits"])
    run([os.path.join(BIN, "zrun"), forward_plan.path, "--input", f"input_ids={gpt2}/input_ids.npy",
         "--output", f"logits={tmp_path}/zrun.npy"])
    assert np.array_equal(out["logits"], np.load(tmp_path / "zrun.npy"))


def test_training_equals_pytorch_and_zrun(gpt2, train_plan, tmp_path):
    ids = load(gpt2, "input_ids.npy")
    engine = zplan.Engine(train_plan)
    assert engine.is_training and engine.batch_shape == (2, 16) and engine.id_range == (0, 512)
    losses, norms = [], []
    for _ in range(5):
        losses.append(engine.step(ids))
        norms.append(engine.grad_norm)
    engine.close()
    np.testing.assert_allclose(losses, load(gpt2, "train_losses.npy"), rtol=1e-4)
    np.testing.assert_allclose(norms, load(gpt2, "train_grad_norms.npy"), rtol=1e-4)
    run([os.path.join(BIN, "zrun"), train_plan.path, "--train", "--data", f"{gpt2}/input_ids.npy", "--steps", "5",
         "--losses-out", f"{tmp_path}/losses.npy", "--grad-norms-out", f"{tmp_path}/norms.npy"])
    assert np.array_equal(losses, np.load(tmp_path / "losses.npy"))
    assert np.array_equal(norms, np.load(tmp_path / "norms.npy"))


def test_checkpoint_resume_equals_straight_and_zrun_resumes_it(gpt2, train_plan, tmp_path):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(train_plan) as straight:
        want = [straight.step(ids) for _ in range(5)]
    with zplan.Engine(train_plan) as first:
        got = [first.step(ids) for _ in range(3)]
        first.save_checkpoint(tmp_path / "ckpt")
    with zplan.Engine(train_plan) as second:
        info = second.load_checkpoint(tmp_path / "ckpt")
        assert info["step"] == 3 and info["samples"] == 6 and info["same_plan"]
        assert second.global_step == 3
        got += [second.step(ids) for _ in range(2)]
    assert got == want  # the same plan on the same rank: bit for bit
    # zrun reads the checkpoint the engine wrote and continues the same way.
    run([os.path.join(BIN, "zrun"), train_plan.path, "--train", "--data", f"{gpt2}/input_ids.npy", "--steps", "5",
         "--resume", str(tmp_path / "ckpt"), "--losses-out", f"{tmp_path}/losses.npy"])
    assert np.array_equal(np.load(tmp_path / "losses.npy"), want[3:])


def test_bad_batches_are_refused_before_running(train_plan, gpt2):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(train_plan) as engine:
        with pytest.raises(ValueError, match=r"batch: 1 rows; the plan's global batch is 2"):
            engine.step(ids[:1])
        with pytest.raises(ValueError, match=r"\[batch, 16\] token ids .* got \[2, 8\]"):
            engine.step(ids[:, :8])
        with pytest.raises(TypeError, match="token ids must be integers, got float32"):
            engine.step(ids.astype(np.float32))
        bad = ids.copy()
        bad[1, 3] = 512
        with pytest.raises(ValueError, match=r"input_ids\[1, 3\] is token id 512, outside the vocabulary \[0, 512\)"):
            engine.step(bad)
        with pytest.raises(zplan.ZplanError, match="no forward program"):
            engine.forward(ids)
        with pytest.raises(ValueError, match="lr must be a number"):
            engine.lr = -1
        assert engine.global_step == 0  # nothing ran
        with pytest.raises(zplan.ZplanError, match="missing-ckpt") as e:
            engine.load_checkpoint("missing-ckpt")
        assert e.value.code == "not_found"
    with pytest.raises(ValueError, match="closed"):
        engine.step(ids)


def test_bad_forward_inputs(forward_plan, gpt2):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(forward_plan) as engine:
        with pytest.raises(ValueError, match=r"input 'input_ids' has shape \[1, 16\]; the plan expects \[2, 16\]"):
            engine.forward(ids[:1])
        with pytest.raises(KeyError, match="no input named 'ids'"):
            engine.forward({"ids": ids})
        with pytest.raises(KeyError, match="input 'input_ids' is not given"):
            engine.forward({})
        with pytest.raises(TypeError, match="takes integers"):
            engine.forward(ids.astype(np.float64))
        with pytest.raises(zplan.ZplanError, match="no training program"):
            engine.step(ids)
        with pytest.raises(ValueError, match="root must be a rank"):
            engine.forward(ids, root=1)


def test_bad_plans_and_launchers(tmp_path, forward_plan, monkeypatch):
    with pytest.raises(FileNotFoundError, match="nothing.zplan"):
        zplan.Engine(tmp_path / "nothing.zplan")
    bad = tmp_path / "bad.zplan"
    bad.write_bytes(b"garbage" * 64)
    with pytest.raises(zplan.ZplanError, match="bad.zplan.*not a zplan plan file") as e:
        zplan.Engine(bad)
    assert e.value.code == "plan_invalid"
    with pytest.raises(ValueError, match="backend must be"):
        zplan.Engine(forward_plan, backend="tpu")
    # A cuda plan given by its path opens on the cpu backend unless told: the runtime names the mismatch.
    cuda_plan = zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), batch=2, seq=16, target="cuda",
                              out=tmp_path / "cuda.zplan")
    with pytest.raises(zplan.ZplanError, match="the plan is for backend 'cuda' but this launch runs backend 'cpu'"):
        zplan.Engine(cuda_plan.path)
    # torchrun's variables without an MPI launcher start the TCP communicator (tests/test_torchrun.py runs
    # such jobs); a missing variable, or a rank 0 that never comes, is a clear error naming it.
    # The MPI singleton of the engines above put Open MPI's variables into the C environment, where os.environ
    # does not see them: set then delete, so that unsetenv() runs.
    for v in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MASTER_ADDR",
              "MASTER_PORT", "ZRT_COMM", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.setenv(v, "")
        monkeypatch.delenv(v)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert zplan.world_size() == 2 and zplan.rank() == 1
    with pytest.raises(zplan.ZplanError, match=r"torchrun's environment\): MASTER_ADDR is not set") as e:
        zplan.Engine(forward_plan)
    assert e.value.code == "invalid_argument"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("ZRT_TCP_TIMEOUT_S", "1")
    with pytest.raises(zplan.ZplanError, match=rf"rank 1 could not reach rank 0 at 127.0.0.1:{port} .* within 1 s"):
        zplan.Engine(forward_plan)


def test_initialize_with_the_recipes_ds_config_equals_pytorch(gpt2):
    # PyTorch's recipe (tests/models/README.md) as a DeepSpeed config: the same losses.
    ds = {"train_batch_size": 2, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                                    "weight_decay": 0.01}}}
    engine = zplan.initialize(os.path.join(gpt2, "model.onnx"), config=ds, seq=16, restore_zero_biases=True)
    assert engine.world == 1 and engine.batch_shape == (2, 16)
    losses = [engine.step(load(gpt2, "input_ids.npy")) for _ in range(5)]
    engine.close()
    np.testing.assert_allclose(losses, load(gpt2, "train_losses.npy"), rtol=1e-4)
