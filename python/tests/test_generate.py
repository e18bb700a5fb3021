"""Engine.generate with a generate=True plan: greedy tokens equal Hugging Face generate's (stored with the
shared gpt2 export) and zrun --generate's on the same plan, prompts of different lengths as zrun gives them,
the sampler reproducible by its seed, and bad requests refused before anything runs."""
import os

import numpy as np
import pytest

import zplan
from conftest import BIN, MODELS, load, run


@pytest.fixture(scope="module")
def gen_plan(tmp_path_factory):
    return zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), generate=True, max_seq=40, batch=2,
                         out=tmp_path_factory.mktemp("gen") / "gen.zplan")


def test_greedy_equals_hugging_face_and_zrun(gpt2, gen_plan, tmp_path):
    ids = load(gpt2, "input_ids.npy")
    lengths = np.array([16, 9])
    with zplan.Engine(gen_plan) as engine:
        tokens = engine.generate(ids, 24)
        ragged = engine.generate(ids, 10, prompt_lengths=lengths)
    assert tokens.dtype == np.int64 and np.array_equal(tokens, load(gpt2, "expected_generate.npy"))
    np.save(tmp_path / "lengths.npy", lengths)
    run([os.path.join(BIN, "zrun"), gen_plan.path, "--generate", "--prompt", f"{gpt2}/input_ids.npy",
         "--prompt-lengths", str(tmp_path / "lengths.npy"), "--max-new-tokens", "10",
         "--tokens-out", str(tmp_path / "zrun.npy")])
    assert np.array_equal(ragged, np.load(tmp_path / "zrun.npy"))


def test_sampler(gpt2, gen_plan):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(gen_plan) as engine:
        # top_k 1 keeps only the best token: greedy, whatever the temperature.
        assert np.array_equal(engine.generate(ids, 24, temperature=0.7, top_k=1), load(gpt2, "expected_generate.npy"))
        a = engine.generate(ids, 12, temperature=1.0, seed=5)
        assert np.array_equal(a, engine.generate(ids, 12, temperature=1.0, seed=5))
        assert not np.array_equal(a, engine.generate(ids, 12, temperature=1.0, seed=6))


def test_bad_requests(gpt2, gen_plan):
    ids = load(gpt2, "input_ids.npy")
    with zplan.Engine(gen_plan) as engine:
        with pytest.raises(ValueError, match=r"needs 41 cache positions; the plan has 40 \(max_seq=\): at most 25"):
            engine.generate(ids, 26)
        with pytest.raises(ValueError, match="prompt holds 3 prompts; the plan was made for at most 2"):
            engine.generate(np.concatenate([ids, ids[:1]]), 4)
        bad = ids.copy()
        bad[0, 2] = 9999
        with pytest.raises(ValueError, match=r"prompt\[0, 2\] is token id 9999, outside the vocabulary"):
            engine.generate(bad, 4)
        with pytest.raises(ValueError, match=r"prompt_lengths\[1\] is 17, outside \[1, 16\]"):
            engine.generate(ids, 4, prompt_lengths=[16, 17])
        with pytest.raises(TypeError, match="must be integers"):
            engine.generate(ids.astype(np.float32), 4)
    fwd = zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), batch=2, seq=16)
    with zplan.Engine(fwd) as engine:
        with pytest.raises(zplan.ZplanError, match="generate=True"):
            engine.generate(ids, 4)


def test_export_with_attention_mask_and_position_ids(tmp_path):
    """An export that takes attention_mask and position_ids besides input_ids (tests/models/inputs/rotary):
    the compiler binds them to what generation feeds, so engine.generate needs only the ids; its tokens equal
    onnxruntime's greedy recompute of the export fed a mask of ones and positions from 0, each sequence alone."""
    ort = pytest.importorskip("onnxruntime")
    model = os.path.join(MODELS, "inputs", "rotary", "model.onnx")
    ids = np.load(os.path.join(MODELS, "inputs", "rotary", "input_ids.npy"))
    lengths = [8, 5]
    plan = zplan.compile(model, generate=True, max_seq=16, batch=2, out=tmp_path / "rotary.zplan")
    with zplan.Engine(plan) as engine:
        tokens = engine.generate(ids, 6, prompt_lengths=lengths)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for b, n in enumerate(lengths):
        seq = ids[b:b + 1, :n]
        for _ in range(6):
            s = seq.shape[1]
            logits = session.run(None, {"input_ids": seq, "attention_mask": np.ones_like(seq),
                                        "position_ids": np.arange(s, dtype=np.int64)[None, :]})[0]
            seq = np.concatenate([seq, logits[:, -1].argmax(-1)[:, None]], axis=1)
        assert np.array_equal(tokens[b, :n + 6], seq[0]), (b, tokens[b], seq[0])
