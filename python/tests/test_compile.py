"""zplan.compile against the zplan command line (the independent oracle here): the same settings give the
same plan bytes and the same report, a DeepSpeed config given as a dict reads as the file does, and every
refusal is the command line's message, raised as CompileError."""
import json
import os
import subprocess

import pytest

import zplan
from conftest import BIN, run

TRAIN = dict(train=True, batch=2, seq=16, clip_grad=1.0, zero=1, world=2)
TRAIN_FLAGS = ["--train", "--batch", "2", "--seq", "16", "--clip-grad", "1.0", "--zero", "1", "--world", "2"]


def cli(model, *flags, cwd=None):
    return subprocess.run([os.path.join(BIN, "zplan"), model, *flags], capture_output=True, text=True, cwd=cwd)


def test_plan_and_report_equal_the_command_line(gpt2, tmp_path):
    model = os.path.join(gpt2, "model.onnx")
    plan = zplan.compile(model, out=tmp_path / "py.zplan", **TRAIN)
    assert plan.path == str(tmp_path / "py.zplan") and os.fspath(plan) == plan.path
    run([os.path.join(BIN, "zplan"), model, *TRAIN_FLAGS, "-o", str(tmp_path / "cli.zplan"),
         "--report-json", str(tmp_path / "cli.json")])
    assert (tmp_path / "py.zplan").read_bytes() == (tmp_path / "cli.zplan").read_bytes()
    assert plan.report == json.loads((tmp_path / "cli.json").read_text())
    settings = {s["flag"]: s for s in plan.report["settings"]}
    assert settings["--zero"]["value"] == "1" and settings["--zero"]["source"] == "flag"
    # Nothing but the plan is left in its folder: no temporary or partial files.
    assert sorted(os.listdir(tmp_path)) == ["cli.json", "cli.zplan", "py.zplan"]


def test_plan_without_out_lives_with_the_plan_object(gpt2):
    plan = zplan.compile(os.path.join(gpt2, "model.onnx"), batch=2, seq=16)
    folder = os.path.dirname(plan.path)
    assert os.path.isfile(plan.path) and plan.report["world"] == 1
    del plan
    assert not os.path.exists(folder)


def test_ds_config_dict_reads_as_the_file(gpt2, tmp_path):
    model = os.path.join(gpt2, "model.onnx")
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 5e-4, "weight_decay": 0.0}},
          "zero_optimization": {"stage": 2}}
    (tmp_path / "ds_config.json").write_text(json.dumps(ds))
    plan = zplan.compile(model, train=True, seq=16, world=2, ds_config=ds, out=tmp_path / "py.zplan")
    run([os.path.join(BIN, "zplan"), model, "--train", "--seq", "16", "--world", "2", "--ds-config",
         str(tmp_path / "ds_config.json"), "-o", str(tmp_path / "cli.zplan"), "--report-json",
         str(tmp_path / "cli.json")])
    assert (tmp_path / "py.zplan").read_bytes() == (tmp_path / "cli.zplan").read_bytes()
    settings = {s["flag"]: s for s in plan.report["settings"]}
    cli_settings = {s["flag"]: s for s in json.loads((tmp_path / "cli.json").read_text())["settings"]}
    for flag in ("--zero", "--batch", "--micro-batches", "--lr", "--weight-decay", "--clip-grad"):
        assert settings[flag]["source"] == "ds-config" and settings[flag]["value"] == cli_settings[flag]["value"]
    assert settings["--zero"]["value"] == "2" and settings["--batch"]["value"] == "4"
    assert settings["--micro-batches"]["value"] == "2"


def test_keyword_wins_over_ds_config_with_a_warning(gpt2, tmp_path):
    ds = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    with pytest.warns(RuntimeWarning, match="zero_optimization.stage"):
        plan = zplan.compile(os.path.join(gpt2, "model.onnx"), train=True, seq=16, world=2, zero=1, ds_config=ds)
    settings = {s["flag"]: s for s in plan.report["settings"]}
    assert settings["--zero"] == {"flag": "--zero", "value": "1", "source": "flag"}


def test_flags_are_the_command_lines(gpt2):
    help_text = subprocess.run([os.path.join(BIN, "zplan"), "--help"], capture_output=True, text=True).stdout
    flags = zplan.compile_flags()
    assert {"tp", "zero", "world", "train", "dtype", "micro_batches", "offload_param", "offload_optimizer",
            "ds_config", "lr", "clip_grad"} <= set(flags)
    for name, (flag, kind, _) in flags.items():
        assert flag in help_text, flag
        assert name == flag[2:].replace("-", "_") and kind in ("bool", "int", "float", "str")


@pytest.mark.parametrize("settings, flags", [
    (dict(zero=7), ["--zero", "7"]),
    (dict(tp=3, world=4), ["--tp", "3", "--world", "4"]),
    (dict(lr=0.1), ["--lr", "0.1"]),
    (dict(train=True, batch=3, world=2), ["--train", "--batch", "3", "--world", "2"]),
    (dict(gpu_mem="lots"), ["--gpu-mem", "lots"]),
])
def test_refusals_are_the_command_lines(gpt2, tmp_path, settings, flags):
    model = os.path.join(gpt2, "model.onnx")
    with pytest.raises(zplan.CompileError) as e:
        zplan.compile(model, out=tmp_path / "p.zplan", **settings)
    p = cli(model, *flags, "-o", str(tmp_path / "c.zplan"))
    assert p.returncode != 0
    assert str(e.value) in p.stderr and "error" in str(e.value)
    assert os.listdir(tmp_path) == []  # no plan, no partial file


def test_bad_model_names_the_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    with pytest.raises(zplan.CompileError, match="bad.onnx"):
        zplan.compile(bad, out=tmp_path / "p.zplan")
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        zplan.compile(tmp_path / "missing.onnx")


def test_bad_keywords(gpt2):
    model = os.path.join(gpt2, "model.onnx")
    with pytest.raises(TypeError, match="'tpp'; did you mean 'tp'"):
        zplan.compile(model, tpp=2)
    with pytest.raises(TypeError, match=r"tp \(--tp\) takes an int, got str"):
        zplan.compile(model, tp="2")
    with pytest.raises(TypeError, match=r"train \(--train\) takes a bool"):
        zplan.compile(model, train=1)
    with pytest.raises(TypeError, match="batch takes an int"):
        zplan.compile(model, batch=2.5)
    with pytest.raises(ValueError, match="dims"):
        zplan.compile(model, dims={"seq": -1})
    with pytest.raises(zplan.CompileError, match="cannot"):
        zplan.compile(model, batch=2, seq=16, out="/nonexistent-folder/p.zplan")
