"""zplan.export_hf where PyTorch and transformers are installed: a small GPT-2 exported, compiled and run
gives PyTorch's logits. Skipped where they are not (the build machines have no torch)."""
import numpy as np
import pytest

import zplan

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_export_compile_run(tmp_path):
    config = transformers.GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    path = zplan.export_hf(model, tmp_path / "gpt2" / "model.onnx", batch=2, seq=16)
    ids = np.random.default_rng(1).integers(0, 512, size=(2, 16))
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    with zplan.Engine(zplan.compile(path, batch=2, seq=16)) as engine:
        got = engine.forward(ids)["logits"]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
