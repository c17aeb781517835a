"""``code_toy``: deterministic problems, grading by execution (equivalent expressions pass,
lookup tables and hacks fail), disjoint splits, and a short run through the real CLI with the
tiny model (no warm start, so it stays fast; the warm start is exercised by
``benchmarks/tasks_code/tasks_code.py``).

    pytest tests/tasks/test_code_toy.py
"""

from __future__ import annotations

import json

import pytest

import rlsuite.tasks.code_toy  # noqa: F401  (registration, until tasks/__init__.py imports it)
from rlsuite.suite.cli import main
from rlsuite.tasks.code_toy import CodeToy, CodeToyConfig, Problem, generate
from tests.conftest import require_sandbox

require_sandbox()


@pytest.fixture(scope="module")
def task():
    t = CodeToy(CodeToyConfig(name="code_toy", sandbox_workers=2))
    yield t
    t.close()


def test_problems_are_deterministic_and_splits_disjoint(task):
    assert generate(50) == generate(50)
    s = task.splits()
    texts = [{p.text for p in s[k]} for k in ("train", "val", "test")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert 150 < len(s["val"]) < 260 and 150 < len(s["test"]) < 260
    p = s["val"][0]
    assert task.prompt(p) == p.text and p.text.endswith("\nf=lambda x:") and p.text.count("f(") == 3


def test_grading_runs_the_code(task):
    p = Problem("x+3", ((0, 3), (4, 7), (9, 12)), ((-2, 1), (10, 13), (15, 18)))
    table = "{0:3,4:7,9:12}[x]"
    completions = ["x+3", " 3+x \nprint('ignored second line')", "x-(-3)", "x*2", table, "", "x+", "(",
                   "__import__('os')._exit(0)", "exit(0) or x+3", "1/0"]
    grades = task.grade_batch([p] * len(completions), completions)
    assert [g.correct for g in grades] == [True, True, True] + [False] * 8
    assert [g.reward for g in grades[:4]] == [1.0, 1.0, 1.0, 0.0]
    assert grades[1].parsed == "3+x" and grades[5].parsed is None
    # error classes (EDAS): the exception type of the failure, "no_code" when nothing was extracted
    assert [g.error_class for g in grades] == [None, None, None, "AssertionError", "KeyError", "no_code",
                                               "SyntaxError", "SyntaxError", "failed", "NameError", "ZeroDivisionError"]


def test_canonical_answers_pass(task):
    probs = task.splits()["val"][:100]
    assert all(g.correct for g in task.grade_batch(probs, [p.answer for p in probs]))
    assert not any(g.correct for g in task.grade_batch(probs, ["x*7+11"] * len(probs)))


def test_config_errors():
    with pytest.raises(ValueError, match="warm_target"):
        CodeToyConfig(name="code_toy", warm_target=1.5)
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        CodeToyConfig(name="code_toy", sandbox_layers=("nope",))


@pytest.mark.slow
def test_short_run_through_the_cli(tmp_path, capsys):
    code = main(["run", "--task", "code_toy", "--algo", "grpo", "--seed", "3", "--set", "model.warm_start=none",
                 "--budget", "samples=64", "--set", "eval.max_prompts=16",
                 "--set", "eval.test_prompts=16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    evals = [json.loads(x) for x in open(f"{run_dir}/evals.jsonl")]
    assert {"val", "test"} <= {e["split"] for e in evals} and "eval/code_toy/greedy_acc" in evals[-1]
    metrics = [json.loads(x) for x in open(f"{run_dir}/metrics.jsonl")]
    assert all(0.0 <= m["reward/mean"] <= 1.0 for m in metrics)
