"""examples/python/train.py, the DeepSpeed-tutorial-style script, runs on one rank and on an mpirun world of
two, learns (its toy language's loss falls), and writes a loadable checkpoint."""
import os
import re
import sys

import zplan
from conftest import CLEAN_ENV, SRC, mpirun_python, run

EXAMPLE = os.path.join(SRC, "examples", "python", "train.py")


def losses(stdout):
    return [float(x) for x in re.findall(r"step \d+: loss ([0-9.]+)", stdout)]


def test_example_on_one_rank():
    env = dict(CLEAN_ENV)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(zplan.__file__)))
    got = losses(run([sys.executable, EXAMPLE, "--steps", "30"], env=env).stdout)
    assert len(got) == 6 and got[-1] < got[0] - 0.3, got


def test_example_on_two_ranks_with_checkpoints(tmp_path):
    got = losses(mpirun_python(2, EXAMPLE, "--steps", "20", "--save-dir", tmp_path / "ckpt").stdout)
    assert len(got) == 4 and got[-1] < got[0] - 0.3, got
    assert (tmp_path / "ckpt" / "latest").read_text().strip().endswith("step-00000020")
