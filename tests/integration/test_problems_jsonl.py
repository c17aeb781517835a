"""Per-problem results: a run's final evals and the base's test eval write ``problems.jsonl`` (one
row per problem, keys stable across runs), their mean is the eval's accuracy, and the report's
two-level interval resamples the final rows' problems as well as the seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports import stats, tables
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import score_runs
from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

FAST = ["--task", "arith", "--budget", "samples=128", "--set", "model.warm_start=none", "--set",
        "eval.max_prompts=24",
        "--set", "eval.test_prompts=24", "--set", "rollout.prompts_per_step=8", "--set", "rollout.group_size=4",
        "--set", "eval.n_samples=2", "--set", "eval.ks=[1,2]"]


def test_final_evals_write_per_problem_results_and_the_report_resamples_them(tmp_path, capsys):
    dirs = []
    for seed in (0, 1):
        assert main(["run", *FAST, "--algo", "grpo", "--seed", str(seed), "--out", str(tmp_path)]) == 0
        dirs.append(capsys.readouterr().out.strip().splitlines()[-1].split("run_dir: ")[1])
    keys = []
    for d in dirs:
        every = read_jsonl(f"{d}/problems.jsonl")
        rows = [r for r in every if r["final"]]
        base = [r for r in every if not r["final"]]  # the base's test eval at step 0: the run's before
        (base_eval,) = [e for e in read_jsonl(f"{d}/evals.jsonl") if e["split"] == "test" and e["step"] == 0]
        assert {(r["step"], r["split"]) for r in base} == {(0, "test")} and len(base) == 24
        assert np.mean([r["greedy"] for r in base]) == pytest.approx(base_eval["eval/arith/greedy_acc"])
        assert {r["problem"] for r in base} == {r["problem"] for r in rows if r["split"] == "test"}
        evals = [e for e in read_jsonl(f"{d}/evals.jsonl") if e["final"]]
        assert rows and {r["split"] for r in rows} == {e["split"] for e in evals}
        for e in evals:  # one row per problem; their mean is the eval's accuracy
            mine = [r for r in rows if r["split"] == e["split"]]
            assert len(mine) == e["n_prompts"] == 24 and all(r["n"] == 2 for r in mine)
            assert np.mean([r["greedy"] for r in mine]) == pytest.approx(e["eval/arith/greedy_acc"])
            assert np.mean([r["correct"] / r["n"] for r in mine]) == pytest.approx(e["eval/arith/avg@2"])
        keys.append([r["problem"] for r in rows if r["split"] == "test"])
    assert load_runs(tmp_path).per_problem.shape[0] == 2 * sum(e["n_prompts"] for e in evals)  # final rows only
    assert keys[0] == keys[1] and len(set(keys[0])) == 24  # the same problems, paired by key
    cfg = ReportConfig(reps=200)
    rs = load_runs(tmp_path)
    t = tables.problem_interval_table(score_runs(rs, cfg), rs.per_problem, cfg)
    (row,) = t.itertuples()
    assert row.n_seeds == 2 and row.n_problems == 24
    assert row.ci_low <= row.mean <= row.ci_high and row.seed_ci_low <= row.mean <= row.seed_ci_high


def test_two_level_interval_by_hand():
    flat = np.full((3, 10), 0.5)
    assert stats.two_level_interval(flat, reps=200) == (0.5, 0.5, 0.5)
    # identical runs: resampling seeds alone gives zero width, resampling problems does not
    m = np.tile(np.array([0, 1] * 10, dtype=float), (3, 1))
    seeds = stats.two_level_interval(m, reps=500, problems=False)
    both = stats.two_level_interval(m, reps=500)
    assert seeds.low == seeds.high == 0.5 and both.low < 0.5 < both.high
    # 20 problems of p = 0.5: the problem-sampling sd is sqrt(0.25 / 20) = 0.112; the 95% interval ~ +-0.22
    assert both.high - both.low == pytest.approx(2 * 1.96 * 0.112, abs=0.08)
    assert np.isnan(stats.two_level_interval(np.empty((0, 3))).low)


def test_no_per_problem_results_gives_an_empty_table():
    cfg = ReportConfig(reps=50)
    empty = pd.DataFrame(columns=["run_id", "split", "problem", "greedy", "correct", "n"])
    assert tables.problem_interval_table(None, empty, cfg).empty
