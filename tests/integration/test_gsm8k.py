"""GSM8K on the shared sample data: gold extraction, math-verify grading in the process pool,
and a short run of the real loading code with the tiny model.

Needs ``$RLSUITE_DATA/gsm8k`` (skips without it; fails under RLSUITE_REQUIRE_DATA=1).
"""

from __future__ import annotations

import json
import re

import pytest

from rlsuite.suite.cli import main
from rlsuite.tasks.base import read_jsonl
from rlsuite.tasks.gsm8k import GSM8K, GSM8KConfig, extract_prediction, gold_answer


def test_gold_and_prediction_extraction():
    assert gold_answer("so 2,125 in all\n#### 2,125") == "2125"
    assert extract_prediction("the answer is \\boxed{1{,}000}.") == "1000"
    assert extract_prediction("nested \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert extract_prediction("first 3 then 4.5 then -7") == "-7"
    assert extract_prediction("no digits here") is None


def test_all_200_golds_grade_correct_and_altered_grade_wrong(gsm8k_dir):
    rows = read_jsonl(gsm8k_dir / "test_sample.jsonl", ("question", "answer"))
    assert len(rows) == 200
    task = GSM8K(GSM8KConfig(name="gsm8k", data_path=str(gsm8k_dir)))
    try:
        right = task.grade_batch(rows, [r["answer"] for r in rows])
        assert all(g.correct and g.reward == 1.0 for g in right), [i for i, g in enumerate(right) if not g.correct]
        boxed = task.grade_batch(rows, [f"so it is \\boxed{{{gold_answer(r['answer'])}}}" for r in rows])
        assert all(g.correct for g in boxed)
        altered = []
        for r in rows:
            g = gold_answer(r["answer"])
            wrong = str(int(float(g)) + 1) if re.fullmatch(r"-?\d+(\.\d+)?", g) else g + "1"
            altered.append(r["answer"].rsplit("####", 1)[0] + "#### " + wrong)
        assert not any(g.correct for g in task.grade_batch(rows, altered))
    finally:
        task.close()


def test_hostile_or_garbage_completions_score_zero(gsm8k_dir):
    task = GSM8K(GSM8KConfig(name="gsm8k", data_path=str(gsm8k_dir)))
    rows = read_jsonl(gsm8k_dir / "test_sample.jsonl", ("question", "answer"))[:3]
    try:
        grades = task.grade_batch(rows, ["\\boxed{" * 50, "\\boxed{}}}}", "9" * 5000])
        assert [g.correct for g in grades] == [False, False, False]
    finally:
        task.close()


def test_broken_data_row_is_one_clear_error(tmp_path, capsys):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "no answer field"}\n')
    code = main(["run", "--task", "gsm8k", "--algo", "grpo", "--set", f"task.data_path={bad}",
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "train.jsonl:2: row lacks field(s) answer" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_gsm8k_run_with_local_data(gsm8k_dir, tmp_path, capsys):
    code = main(["run", "--task", "gsm8k", "--algo", "ppo", "--seed", "1", "--set", f"task.data_path={gsm8k_dir}",
                 "--budget", "samples=16", "--set", "eval.max_prompts=4",
                 "--set", "eval.test_prompts=4", "--set", "rollout.max_new_tokens=24",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    evals = [json.loads(x) for x in open(f"{run_dir}/evals.jsonl")]
    assert {"val", "test"} <= {e["split"] for e in evals} and "eval/gsm8k/greedy_acc" in evals[-1]
