"""The evals of a run's starting weights are memoised (``eval.cache_base``, default on; outside the
run id): a second run from the same base reads step 0's val/test rows from
``$RLSUITE_CACHE/base_evals`` instead of decoding them again, and writes the same rows and samples;
anything the evals depend on (here an eval setting) is a new entry; grade errors are never kept; the
switch off computes them every time."""

from __future__ import annotations

import json

import pytest

import rlsuite.suite.eval_stage as eval_stage
from rlsuite.suite.cli import main
from rlsuite.suite.evaluate import memo_base_eval
from rlsuite.suite.runfolder import read_jsonl

SMALL = ["--task", "arith", "--algo", "grpo", "--set", "model.warm_start=none", "--set", "eval.max_prompts=8",
    "--set", "eval.test_prompts=8",
         "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2", "--budget", "updates=1"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    calls = []
    real = eval_stage.evaluate

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(eval_stage, "evaluate", counting)
    return tmp_path / "cache" / "base_evals", calls


def _run(out, capsys, *extra):
    code = main(["run", *SMALL, *extra, "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    d = text.strip().splitlines()[-1].split("run_dir: ")[1]
    strip = ("time", "budget/wall_s")  # the final rows carry the run's wall time
    return ([{k: v for k, v in r.items() if k not in strip} for r in read_jsonl(f"{d}/evals.jsonl")],
            open(f"{d}/samples.jsonl").read())


def test_a_second_run_reads_the_base_evals_and_writes_the_same_rows(tmp_path, capsys, cache):
    folder, calls = cache
    first = _run(tmp_path / "a", capsys)
    assert len(calls) == 4  # val + test at step 0, val + test final
    assert len([p for p in folder.iterdir() if p.is_dir()]) == 2
    calls.clear()
    second = _run(tmp_path / "b", capsys)
    assert len(calls) == 2  # only the final evals decode
    assert second == first
    calls.clear()
    _run(tmp_path / "c", capsys, "--set", "eval.seed=7")  # another eval setting: another entry
    assert len(calls) == 4 and len([p for p in folder.iterdir() if p.is_dir()]) == 4
    calls.clear()
    _run(tmp_path / "d", capsys, "--set", "eval.cache_base=false")
    assert len(calls) == 4


def test_results_with_grade_errors_are_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path))
    n = []

    def compute():
        n.append(1)
        return {"res": {"greedy_acc": 0.5}, "errors": 1}

    for _ in range(2):
        out, computed = memo_base_eval({"k": 1}, compute)
        assert computed and out["errors"] == 1
    assert len(n) == 2 and not [p for p in (tmp_path / "base_evals").iterdir() if p.is_dir()]
    ok = {"res": {"greedy_acc": 0.25}, "errors": 0}
    assert memo_base_eval({"k": 2}, lambda: ok) == (ok, True)
    assert memo_base_eval({"k": 2}, lambda: pytest.fail("computed again")) == (json.loads(json.dumps(ok)), False)
