"""zplan.export_hf where PyTorch, transformers and onnxscript are installed: small GPT-2 and Llama models
(built from a config, random weights) exported, compiled and run give the torch model's own logits, through
zplan.Engine on one rank and through zrun at tp 2 over two ranks under torchrun's variables. ctest skips the
file where one of them is not installed (CI has no torch): run_pytest.py --needs, before pytest starts, so
that inside the file a failed import is a failure."""
import os
import sys

import numpy as np
import onnxscript  # noqa: F401  (torch.onnx.export's exporter, which zplan.export_hf calls, needs it)
import pytest
import torch
import transformers

import zplan
from conftest import BIN, CLEAN_ENV, SRC, run

TORCHRUN_ENV = [sys.executable, os.path.join(SRC, "tests", "tcp", "torchrun_env.py"), "--env",
                "ZRT_CHECK_COLLECTIVES=1"]


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0))


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0))


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_export_compile_run(make, tmp_path):
    torch.manual_seed(0)
    model = make().eval()
    path = zplan.export_hf(model, tmp_path / "model" / "model.onnx", batch=2, seq=16)
    ids = np.random.default_rng(1).integers(0, 512, size=(2, 16))
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    with zplan.Engine(zplan.compile(path, batch=2, seq=16)) as engine:
        got = engine.forward(ids)["logits"]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # The same export at tp 2, run by zrun on two ranks of a torchrun-style job.
    plan = zplan.compile(path, tp=2, world=2, batch=2, seq=16, out=tmp_path / "tp2.zplan")
    np.save(tmp_path / "ids.npy", ids)
    run(TORCHRUN_ENV + ["-np", "2", os.path.join(BIN, "zrun"), plan.path, "--input",
                        f"input_ids={tmp_path / 'ids.npy'}", "--output", f"logits={tmp_path / 'out.npy'}"],
        env=CLEAN_ENV)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, atol=1e-4, rtol=0)
