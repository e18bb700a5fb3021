"""A runtime-only install (no compiler module, as on a machine without MLIR): the package imports, the
engine runs a plan compiled elsewhere, and zplan.compile says what is missing. The install is simulated by a
copy of the package without _compiler, loaded in a fresh interpreter."""
import os
import shutil
import sys

import zplan
from conftest import CLEAN_ENV, MODELS, run


def test_runtime_only_package(tmp_path):
    plan = zplan.compile(os.path.join(MODELS, "gpt2", "model.onnx"), batch=2, seq=16, out=tmp_path / "p.zplan")
    pkg = os.path.dirname(os.path.abspath(zplan.__file__))
    shutil.copytree(pkg, tmp_path / "site" / "zplan", ignore=shutil.ignore_patterns("_compiler*", "__pycache__"))
    script = f"""
import numpy as np, zplan
assert zplan.runtime_available() and not zplan.compiler_available()
try:
    zplan.compile({os.path.join(MODELS, "gpt2", "model.onnx")!r})
except zplan.ZplanError as e:
    assert "zplan._compiler" in str(e) and e.code == "not_found", e
else:
    raise SystemExit("compile did not fail")
ids = np.load({os.path.join(MODELS, "gpt2", "input_ids.npy")!r})
with zplan.Engine({plan.path!r}) as engine:
    out = engine.forward(ids)["logits"]
ref = np.load({os.path.join(MODELS, "gpt2", "expected_output.npy")!r})
print("max abs difference", float(np.abs(out - ref).max()))
assert np.abs(out - ref).max() < 1e-4
"""
    env = dict(CLEAN_ENV, PYTHONPATH=str(tmp_path / "site"))
    assert "max abs difference" in run([sys.executable, "-c", script], env=env).stdout
