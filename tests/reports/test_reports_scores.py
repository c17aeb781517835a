"""Per-run scoring rules: final vs last-k, diverged, failed, partial, unknown metric, configs.

Run: python -m pytest tests/reports/test_reports_scores.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlsuite.reports import ReportConfig, ReportError, synthetic
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import score_runs

CFG = ReportConfig(reps=50)


def evals_of(folder):
    return [json.loads(line) for line in (folder / "evals.jsonl").read_text().splitlines()]


def test_final_and_last_k(tmp_path):
    run = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    ev = evals_of(run)
    final = [e for e in ev if e["split"] == "test" and e.get("final")][0]["eval/arith/greedy_acc"]
    sc = score_runs(load_runs(tmp_path), CFG).scores.iloc[0]
    assert sc["score"] == pytest.approx(final) and sc["score_source"] == "final test eval" and sc["stable"]
    val = [e["eval/arith/greedy_acc"] for e in ev if e["split"] == "val" and e["step"] > 0]
    sc3 = score_runs(load_runs(tmp_path), ReportConfig(reps=50, score="last-k", k=3)).scores.iloc[0]
    assert sc3["score"] == pytest.approx(np.mean(val[-3:]))


def test_eval_seeds_averaged_within_the_run(tmp_path):
    run = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    ev = evals_of(run)
    final = next(e for e in ev if e["split"] == "test" and e.get("final"))
    extra = {**final, "eval/arith/greedy_acc": final["eval/arith/greedy_acc"] + 0.1, "eval_seed": 1}
    with open(run / "evals.jsonl", "a") as fh:
        fh.write(json.dumps(extra) + "\n")
    sc = score_runs(load_runs(tmp_path), CFG).scores.iloc[0]
    assert sc["score"] == pytest.approx(final["eval/arith/greedy_acc"] + 0.05)


def test_diverged_scores_last_finite_eval_and_is_unstable(tmp_path):
    run = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="ppo", diverge_at=0.6), 0)
    with open(run / "evals.jsonl", "a") as fh:  # a NaN eval after the last good one
        fh.write(json.dumps({"step": 13, "split": "val", "eval/arith/greedy_acc": float("nan")}) + "\n")
    last_good = [e for e in evals_of(run) if e["eval/arith/greedy_acc"] == e["eval/arith/greedy_acc"]][-1]
    sc = score_runs(load_runs(tmp_path), CFG).scores.iloc[0]
    assert sc["state"] == "diverged" and not sc["stable"]
    assert sc["score"] == pytest.approx(last_good["eval/arith/greedy_acc"])
    assert sc["score_step"] == last_good["step"] and "diverged" in sc["score_source"]


def test_failed_excluded_and_partial_optional(tmp_path):
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo", state="failed"), 0)
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo", state="running"), 1)
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 2)
    scored = score_runs(load_runs(tmp_path), CFG)
    assert list(scored.scores["seed"]) == [2]
    why = dict(zip(scored.excluded["seed"], scored.excluded["why"], strict=False))
    assert why[0] == "failed: worker OOM" and why[1].startswith("running: not at the matched budget")
    partial = score_runs(load_runs(tmp_path), ReportConfig(reps=50, include_partial=True))
    assert sorted(partial.scores["seed"]) == [1, 2] and list(partial.excluded["seed"]) == [0]


def test_unknown_metric_lists_valid_ones(tmp_path):
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    with pytest.raises(ReportError, match=r"unknown eval metric 'acc'; valid: avg@8, greedy_acc, maj@8, pass@1"):
        score_runs(load_runs(tmp_path), ReportConfig(reps=50, metric="acc"))
    other = score_runs(load_runs(tmp_path), ReportConfig(reps=50, metric="pass@4"))
    assert other.scores["score"].between(0, 1).all()


def test_base_scores_and_config_split(tmp_path):
    # two configurations under one label (a tuning sweep without variants): not pooled as seeds
    for lr_tag in ("a", "b"):
        for seed in (0, 1):
            run = synthetic.write_run(tmp_path / lr_tag, "arith", synthetic.Arm(algo="grpo"), seed)
            spec = json.loads((run / "spec.json").read_text())
            spec["optim"]["lr"] = 1e-4 if lr_tag == "a" else 3e-4
            spec["run_id"] += lr_tag
            (run / "spec.json").write_text(json.dumps(spec))
    scored = score_runs(load_runs(tmp_path), CFG)
    assert scored.scores["algorithm"].nunique() == 2
    assert all(a.startswith("grpo#") for a in scored.scores["algorithm"])
    assert len(scored.base) == 4 and np.allclose(scored.base["score"], 0.3)
