"""The ``math`` task on the shared samples: gold extraction, math-verify grading in the spawn
pool (all 200 MATH-500 golds against their own solutions; altered answers), split
determinism, data errors naming file:line, and an offline Hugging Face load.

Needs ``$RLSUITE_DATA/math`` (skips without it; fails under RLSUITE_REQUIRE_DATA=1).
Run: ``python -m pytest -q tests/tasks/test_math.py`` (≈ 15 s; the grader pool spawns once).
"""

from __future__ import annotations

import json
import re

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import read_jsonl
from rlsuite.tasks.math import Math, MathConfig, canonical, gold_answer
from tests.conftest import data_dir

FIELDS = ("problem", "solution")


@pytest.fixture(scope="module")
def math_dir():
    return data_dir("math")


@pytest.fixture(scope="module")
def task(math_dir):
    t = Math(MathConfig(name="math", data_path=str(math_dir)))
    yield t
    t.close()


def test_gold_extraction_and_canonical_votes():
    assert gold_answer({"problem": "", "solution": "so $\\boxed{\\frac{1}{\\sqrt{2}}}$ and"}) == "\\frac{1}{\\sqrt{2}}"
    assert gold_answer({"problem": "", "solution": "\\boxed{1} then \\boxed{2}"}) == "2"  # the last box
    assert gold_answer({"problem": "", "solution": "\\boxed{1}", "answer": "7"}) == "7"  # MATH-500's answer wins
    assert gold_answer({"problem": "", "solution": "no box"}) is None
    assert canonical("\\left( 3, \\dfrac{\\pi}{2} \\right)") == canonical("(3,\\frac{\\pi}{2})")
    assert canonical("10,\\!080") == "10,080"


def test_all_200_math500_golds_grade_correct_and_altered_grade_wrong(task, math_dir):
    rows = read_jsonl(math_dir / "test_sample.jsonl", FIELDS)
    assert len(rows) == 200
    own = task.grade_batch(rows, [r["solution"] for r in rows])
    assert [i for i, g in enumerate(own) if not (g.correct and g.reward == 1.0)] == []
    assert all(g.correct for g in task.grade_batch(rows, [task.reference_completion(r) for r in rows]))
    altered = []
    for i, r in enumerate(rows):
        a = r["answer"]
        # integers move by one; anything else takes the next row's (different) answer
        wrong = str(int(a) + 1) if re.fullmatch(r"-?\d+", a) else rows[(i + 1) % len(rows)]["answer"]
        assert canonical(wrong) != canonical(a)
        altered.append(r["solution"][: r["solution"].rfind("\\boxed")] + f"\\boxed{{{wrong}}}$.")
    bad = task.grade_batch(rows, altered)
    assert [i for i, g in enumerate(bad) if g.correct] == []
    assert all(g.parsed is not None for g in bad)  # wrong, but still a vote for maj@k


def test_train_sample_golds_come_from_the_last_box(task, math_dir):
    rows = read_jsonl(math_dir / "train_sample.jsonl", FIELDS)
    assert all("answer" not in r for r in rows)
    assert all(g.correct for g in task.grade_batch(rows, [r["solution"] for r in rows]))


def test_no_box_no_reward_and_no_vote(task, math_dir):
    row = read_jsonl(math_dir / "test_sample.jsonl", FIELDS)[5]  # answer 42
    grades = task.grade_batch([row] * 4, ["the answer is 42", "\\boxed{}", "\\boxed{" * 30, "$\\boxed{42}$"])
    assert [g.correct for g in grades] == [False, False, False, True]
    assert [g.parsed for g in grades[:3]] == [None, None, None]


def test_splits_are_deterministic_and_disjoint(task, math_dir):
    s = task.splits()
    assert len(s["test"]) == 200 and len(s["train"]) + len(s["val"]) == 200 and s["val"]
    again = Math(MathConfig(name="math", data_path=str(math_dir))).splits()
    assert [r["problem"] for r in again["val"]] == [r["problem"] for r in s["val"]]
    assert not {r["problem"] for r in s["val"]} & {r["problem"] for r in s["train"]}
    assert task.prompt(s["test"][0]).endswith("put your final answer within \\boxed{}.")


@pytest.mark.parametrize("line2, problem", [
    ('{"problem": "p", "solution": "no box here"}', "no 'answer' field and no \\boxed{} in 'solution'"),
    ('{"problem": "p"}', "row lacks field(s) solution"),
    ('{"problem": "p", "solution": ', "not valid JSON"),
])
def test_broken_row_is_one_clear_error_naming_file_and_line(tmp_path, capsys, line2, problem):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "test.jsonl").write_text('{"problem": "q", "solution": "\\\\boxed{1}", "answer": "1"}\n')
    (folder / "train.jsonl").write_text('{"problem": "q", "solution": "\\\\boxed{1}"}\n\n' + line2 + "\n")
    code = main(["run", "--task", "math", "--algo", "grpo", "--set", f"task.data_path={folder}",
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and f"train.jsonl:3: {problem}" in err, err
    assert not (tmp_path / "o").exists()


def test_offline_hub_load_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match="EleutherAI/hendrycks_math.*task.data_path"):
        Math(MathConfig(name="math")).splits()


@pytest.mark.slow
def test_math_run_with_local_data(math_dir, tmp_path, capsys):
    code = main(["run", "--task", "math", "--algo", "grpo", "--seed", "1", "--set", f"task.data_path={math_dir}",
                 "--budget", "samples=8", "--set", "eval.max_prompts=4",
                 "--set", "eval.test_prompts=4", "--set", "rollout.max_new_tokens=16",
                 "--set", "rollout.prompts_per_step=2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    evals = [json.loads(x) for x in open(f"{run_dir}/evals.jsonl")]
    assert {"val", "test"} <= {e["split"] for e in evals} and "eval/math/greedy_acc" in evals[-1]


def test_parsed_answers_vote_in_maj_at_k(task, math_dir):
    from rlsuite.suite.evaluate import maj_at_k

    row = read_jsonl(math_dir / "test_sample.jsonl", FIELDS)[0]  # \left( 3, \frac{\pi}{2} \right)
    comps = ["\\boxed{(3, \\pi)}", "\\boxed{\\left(3,\\dfrac{\\pi}{2}\\right)}", "no box",
             "\\boxed{(3, \\frac{\\pi}{2})}"]
    grades = task.grade_batch([row] * 4, comps)
    assert [g.correct for g in grades] == [False, True, False, True]
    assert grades[1].parsed == grades[3].parsed and grades[2].parsed is None
    assert maj_at_k([g.parsed for g in grades], [g.correct for g in grades], 4) == 1.0
