"""Inputs that used to run forever, diverge or crash: each is one ``error:`` line, exit 2 and
nothing written — refused at resolution or before anything is loaded.

Run: pytest tests/integration/test_bad_inputs.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput

ARITH = ["run", "--task", "arith", "--algo", "grpo"]


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model is loaded (the checks must come first)."""
    import rlsuite.suite.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the input was refused")

    monkeypatch.setattr(models, "load_model", boom)
    monkeypatch.setattr(models, "load_pretrained", boom)


def run_cli(capsys, args: list[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, needle: str, out: Path) -> None:
    assert code == 2, err
    assert err.count("error:") == 1 and needle in err, err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("extra, needle", [
    (["--budget", "samples=.nan"], "budget.samples: expected a finite number, got nan"),
    (["--budget", "updates=.inf"], "budget.updates: expected a finite number, got inf"),
    (["--set", "optim.lr=.nan"], "optim.lr: expected a finite number"),
    (["--set", "optim.lr=.inf"], "optim.lr: expected a finite number"),
    (["--set", "optim.lr=1e999"], "optim.lr: expected a finite number"),
    (["--set", "rollout.temperature=.nan"], "rollout.temperature: expected a finite number"),
    (["--set", "algo.clip_eps_high=.nan"], "algo.clip_eps_high: expected a finite number"),
    (["--set", "algo.clip_eps_low=-1"], "algo.clip_eps_low must be in [0, 1], got -1"),
    (["--set", "rollout.group_size=.nan"], "rollout.group_size: expected int"),
    (["--set", "rollout.s3r_window=0"], "rollout.s3r_window must be ≥ 1"),
    (["--set", "optim.beta2=1"], "optim.beta2 must be in [0, 1)"),
    (["--set", "rollout.temperature=0"], "rollout.temperature must be > 0"),
    # in range but absurd (issue 38 §2.4): the OOM killer, a hang, a run with an ETA of 3e26 hours
    (["--set", "rollout.group_size=1000000000"], "sequences a step; at most 1,048,576"),
    (["--set", "task.max_operand=1000000000000"], "task.max_operand must be in [1, 999]"),
    (["--budget", "samples=1e30"], "budget.samples must be in (0, 1e+18), got 1e+30"),
])
def test_non_finite_and_out_of_range_values(tmp_path, capsys, no_loading, extra, needle):
    out = tmp_path / "out"
    code, err = run_cli(capsys, [*ARITH, *extra, "--out", str(out)])
    assert_refused(code, err, needle, out)


@pytest.mark.parametrize("extra, needle", [
    (["--set", "task.name=gsm8k"], "task.name=gsm8k (from --set or --config) contradicts --task arith"),
    (["--set", "algo.name=ppo"], "algo.name=ppo (from --set or --config) contradicts --algo grpo"),
])
def test_a_set_that_contradicts_task_or_algo_is_refused(tmp_path, capsys, no_loading, extra, needle):
    """Issue 38 §2.9: the --set was silently dropped and the run went ahead with --task / --algo."""
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["run", "--task", "arith", "--algo", "grpo", *extra, "--out", str(out)])
    assert_refused(code, err, needle, out)
    from rlsuite.suite.spec import resolve

    spec = resolve("arith", "grpo", "tiny", 0, sets=[("task.name", "arith"), ("algo.name", "grpo")])
    assert spec.task.name == "arith"


def test_optional_cap_refuses_nan_but_takes_null(tmp_path, capsys, no_loading):
    from rlsuite.suite.spec import resolve

    out = tmp_path / "out"
    code, err = run_cli(capsys, ["run", "--task", "arith", "--algo", "3po", "--set", "algo.tis_cap=.nan",
                                 "--out", str(out)])
    assert_refused(code, err, "algo.tis_cap: expected a finite number", out)
    assert resolve("arith", "3po", "tiny", 0, sets=[("algo.tis_cap", None)]).algo.tis_cap is None


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_gpu(tmp_path, capsys, no_loading):
    out = tmp_path / "out"
    code, err = run_cli(capsys, [*ARITH, "--set", "train.device=cuda", "--out", str(out)])
    assert_refused(code, err, "train.device=cuda but torch finds no CUDA device", out)


def test_config_that_is_a_folder_or_binary(tmp_path, capsys, no_loading):
    out = tmp_path / "out"
    (tmp_path / "cfg").mkdir()
    code, err = run_cli(capsys, [*ARITH, "--config", str(tmp_path / "cfg"), "--out", str(out)])
    assert_refused(code, err, "is a folder", out)
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00\x81binary")
    code, err = run_cli(capsys, [*ARITH, "--config", str(tmp_path / "bin.yaml"), "--out", str(out)])
    assert_refused(code, err, "not UTF-8 text", out)


def test_out_that_is_a_file_or_under_a_file(tmp_path, capsys, no_loading):
    f = tmp_path / "a_file"
    f.write_text("x")
    code, err = run_cli(capsys, [*ARITH, "--out", str(f)])
    assert code == 2 and err.count("error:") == 1 and "is a file" in err, err
    code, err = run_cli(capsys, [*ARITH, "--out", str(f / "sub")])
    assert code == 2 and f"lies under {f}, which is a file" in err, err
    assert f.read_text() == "x"


def test_out_not_writable(tmp_path, capsys, monkeypatch, no_loading):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if Path(p) == ro else real(p, mode, *a, **k))
    code, err = run_cli(capsys, [*ARITH, "--out", str(ro / "runs")])
    assert code == 2 and "is not writable" in err and str(ro) in err, err
    assert list(ro.iterdir()) == []


def test_offline_unknown_hub_model_fails_at_once(tmp_path, capsys, monkeypatch, no_loading):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    code, err = run_cli(capsys, [*ARITH, "--model", "nosuchorg/nosuchmodel", "--out", str(out)])
    assert_refused(code, err, "not in the Hugging Face cache", out)
    assert "tiny" in err  # the valid options


def _gsm8k(tmp_path: Path, capsys, text: bytes | str) -> tuple[int, str, Path]:
    data = tmp_path / "gsm8k.jsonl"
    data.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["run", "--task", "gsm8k", "--algo", "grpo", "--set", f"task.data_path={data}",
                                 "--set", "model.warm_start=none", "--out", str(out)])
    return code, err, out


GOOD = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})


@pytest.mark.parametrize("text, needle", [
    (GOOD + "\n" + json.dumps({"question": 5, "answer": None}) + "\n",
     "gsm8k.jsonl:2: field 'question' must be a string"),
    (GOOD + "\n" + json.dumps({"question": "q", "answer": None}) + "\n",
     "gsm8k.jsonl:2: field 'answer' must be a string"),
    (GOOD + "\n\n" + json.dumps({"question": "q", "answer": "no gold line"}) + "\n" + GOOD + "\n",
     "1 row(s) have an 'answer' without a '#### <final answer>' line (line(s) 3)"),
    (b'{"question": "q", "answer": "#### 1"}\n\x89PNG\r\n\x1a\n\x00\xff\xfe', "gsm8k.jsonl:2: not UTF-8 text"),
])
def test_gsm8k_bad_rows_name_file_and_line(tmp_path, capsys, text, needle):
    code, err, out = _gsm8k(tmp_path, capsys, text)
    assert_refused(code, err, needle, out)


def test_binary_and_mistyped_rows_in_other_loaders(tmp_path):
    from rlsuite.tasks.base import read_jsonl
    from rlsuite.tasks.code import MBPP, HumanEval
    from rlsuite.tasks.math import read_math

    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\x00\x9f\x92\x96 binary\n")
    with pytest.raises(BadInput, match="b.jsonl:1: not UTF-8 text"):
        read_math(binary)
    he = tmp_path / "humaneval.jsonl"
    he.write_text(json.dumps({"task_id": "x", "prompt": 1, "canonical_solution": "", "test": "", "entry_point": "f"}))
    with pytest.raises(BadInput, match="humaneval.jsonl:1: field 'prompt' must be a string"):
        read_jsonl(he, HumanEval.FIELDS, HumanEval.FIELD_TYPES)
    mb = tmp_path / "mbpp.jsonl"
    mb.write_text(json.dumps({"task_id": 601, "text": "t", "code": "c", "test_list": "assert f()"}))
    with pytest.raises(BadInput, match="field 'test_list' must be a list of strings"):
        read_jsonl(mb, MBPP.FIELDS, MBPP.FIELD_TYPES)
