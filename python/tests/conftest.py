"""Shared fixtures of the Python package's tests. ctest (python/tests/CMakeLists.txt) runs each file with
the build folder's package on PYTHONPATH and names the build's tools, the test models and mpirun in the
environment."""
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

import zplan

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.environ.get("ZPLAN_MODELS", os.path.join(SRC, "tests", "models"))
BIN = os.environ.get("ZPLAN_BIN_DIR", os.path.join(SRC, "build", "bin"))
MPIRUN = shlex.split(os.environ.get("ZPLAN_MPIRUN", "mpirun --allow-run-as-root --oversubscribe"))
# The environment before this process started MPI: an Engine makes the test process an MPI singleton, which
# puts Open MPI's and PMIx's variables into os.environ, and an mpirun or zrun started with those would take
# itself for a member of this process's job.
CLEAN_ENV = dict(os.environ)


@pytest.fixture
def gpt2():
    """The shared gpt2 export: its folder, with PyTorch's outputs and training losses beside it."""
    return os.path.join(MODELS, "gpt2")


def load(model_dir, name):
    return np.load(os.path.join(model_dir, name))


def run(cmd, **kw):
    """Runs a command, failing the test with its output when it fails."""
    kw.setdefault("env", CLEAN_ENV)
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def mpirun_python(world, script, *args, env=None):
    """`mpirun -np WORLD python SCRIPT ARGS` with this interpreter and the package this test imports."""
    e = dict(CLEAN_ENV if env is None else env)
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(zplan.__file__)))
    return run(MPIRUN + ["-np", str(world), "-x", "PYTHONPATH", sys.executable, script, *map(str, args)], env=e)
