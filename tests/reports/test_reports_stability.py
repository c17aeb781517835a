"""Stability classification on constructed runs: one rule at a time, thresholds configurable.

Run: python -m pytest tests/reports/test_reports_stability.py -q
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports.stability import NONFINITE_COL, StabilityThresholds, classify_run, first_window

TH = StabilityThresholds()


def healthy(n: int = 30) -> pd.DataFrame:
    steps = np.arange(1, n + 1)
    return pd.DataFrame({"step": steps, "loss/total": 0.1, "loss/policy": 0.1, "stability/nonfinite": 0,
                         "stats/entropy": np.linspace(1.0, 0.5, n), "stats/kl_ref": 0.01,
                         "mismatch/kl": 0.001, "reward/mean": np.linspace(0.2, 0.6, n),
                         "len/response_mean": 5.0, "len/truncated_frac": 0.02, NONFINITE_COL: False})


EVAL_STEPS = np.array([0, 5, 10, 15, 20, 25, 30])
EVAL_OK = np.array([0.3, 0.4, 0.45, 0.5, 0.52, 0.55, 0.56])


def classify(metrics, scores=EVAL_OK, state="completed", th=TH, cap=8):
    return classify_run(metrics, EVAL_STEPS, scores, state=state, reason=None, max_new_tokens=cap, thresholds=th)


def test_healthy_run_is_stable():
    res = classify(healthy())
    assert res.stable and res.reasons == ()


def test_diverged_status_is_unstable():
    res = classify(healthy(), state="diverged")
    assert not res.stable and res.reasons[0].startswith("nonfinite: status diverged")


def test_nonfinite_steps():
    m = healthy()
    m.loc[9, "stability/nonfinite"] = 1
    res = classify(m)
    assert not res.stable and "first at step 10" in res.reasons[0]
    m2 = healthy()
    m2.loc[4, NONFINITE_COL] = True  # a NaN loss seen by the loader
    assert not classify(m2).stable
    assert classify(m, th=dataclasses.replace(TH, nonfinite_steps=2)).stable


def test_inf_loss_is_nonfinite():
    m = healthy()
    m.loc[3, "loss/total"] = np.inf
    assert any(r.startswith("nonfinite") for r in classify(m).reasons)


def test_reward_collapse_needs_consecutive_evals():
    one_dip = np.array([0.3, 0.5, 0.6, 0.35, 0.6, 0.6, 0.6])  # one eval 0.25 below the peak
    assert classify(healthy(), one_dip).stable
    collapse = np.array([0.3, 0.5, 0.6, 0.35, 0.3, 0.3, 0.3])
    res = classify(healthy(), collapse)
    assert not res.stable and "reward_collapse" in res.reasons[0] and "from step 15" in res.reasons[0]
    assert classify(healthy(), collapse, th=dataclasses.replace(TH, reward_drop=None)).stable
    assert classify(healthy(), collapse, th=dataclasses.replace(TH, reward_drop_evals=5)).stable


def test_train_reward_crash():
    m = healthy()
    m["reward/mean"] = np.r_[np.full(15, 0.6), np.full(15, 0.05)]
    res = classify(m)
    assert [r for r in res.reasons if r.startswith("reward_crash")]
    assert classify(m, th=dataclasses.replace(TH, train_reward_frac=None)).stable


def test_entropy_collapse_window():
    m = healthy()
    m.loc[10:13, "stats/entropy"] = 1e-4  # 4 steps < window 5
    assert classify(m).stable
    m.loc[10:20, "stats/entropy"] = 1e-4
    res = classify(m)
    assert not res.stable and "entropy_collapse" in res.reasons[0] and "from step 11" in res.reasons[0]


def test_entropy_blowup_off_by_default():
    m = healthy()
    m["stats/entropy"] = 9.0
    assert classify(m).stable
    assert not classify(m, th=dataclasses.replace(TH, entropy_max=5.0)).stable


@pytest.mark.parametrize("key", ["stats/kl_ref", "mismatch/kl"])
def test_kl_blowup(key):
    m = healthy()
    m.loc[20:, key] = 3.0
    res = classify(m)
    assert not res.stable and res.reasons[0].startswith("kl_blowup") and key in res.reasons[0]


def test_length_pinned_at_cap():
    m = healthy()
    m.loc[5:, "len/truncated_frac"] = 0.97
    assert "length_at_cap" in classify(m).reasons[0]
    m2 = healthy()
    m2.loc[5:, "len/response_mean"] = 8.0  # == max_new_tokens
    assert "length_at_cap" in classify(m2).reasons[0]
    assert classify(m2, cap=None).stable  # no cap known: rule skipped


def test_missing_keys_are_fine():
    m = pd.DataFrame({"step": [1, 2, 3]})
    assert classify(m).stable
    empty = classify_run(pd.DataFrame({"step": []}), np.array([]), np.array([]), state="completed",
                         reason=None, max_new_tokens=None, thresholds=TH)
    assert empty.stable


def test_first_window():
    assert first_window(np.array([0, 1, 1, 0, 1, 1, 1], bool), 3) == 4
    assert first_window(np.array([1, 1], bool), 3) is None
    assert first_window(np.array([1, 1, 1], bool), 1) == 0


# --- report tables: k/n per algorithm always, flagged runs listed separately -----------------

def scores_frame(flags: dict[str, list[str]]) -> pd.DataFrame:
    """Per-run score rows: algorithm -> the reasons string of each of its runs ("" = stable)."""
    rows = [{"task": "arith", "algorithm": alg, "seed": i, "run_id": f"{alg}{i}", "state": "completed",
             "stable": not r, "reasons": r} for alg, rs in flags.items() for i, r in enumerate(rs)]
    return pd.DataFrame(rows)


def test_stability_summary_all_stable_shows_k_of_n():
    from rlsuite.reports.stability import flagged_runs, stability_summary
    s = scores_frame({"grpo": ["", "", ""], "ppo": ["", ""]})
    summary = stability_summary(s).set_index("algorithm")
    assert summary.loc["grpo", "stable"] == "stable in 3/3 runs"
    assert summary.loc["ppo", "stable"] == "stable in 2/2 runs"
    assert (summary["flags"] == "none").all()
    assert flagged_runs(s).empty and list(flagged_runs(s).columns) == ["task", "algorithm", "seed", "run_id",
                                                                       "state", "reasons"]


def test_stability_summary_counts_flags_once_per_run():
    from rlsuite.reports.stability import flagged_runs, stability_summary
    s = scores_frame({"grpo": ["", "entropy_collapse (< 0.01): stats/entropy for 5 steps from step 3; "
                                   "entropy_collapse (< 0.01): again", "nonfinite: status diverged (NaN)"]})
    row = stability_summary(s).iloc[0]
    assert row["stable"] == "stable in 1/3 runs" and row["flags"] == "entropy_collapse: 1; nonfinite: 1"
    assert flagged_runs(s)["run_id"].tolist() == ["grpo1", "grpo2"]


def test_report_with_all_stable_runs(tmp_path):
    from rlsuite.reports import ReportConfig, synthetic
    from rlsuite.reports.build import build_report
    for seed in (0, 1, 2):
        synthetic.write_run(tmp_path / "runs", "arith", synthetic.Arm(algo="grpo"), seed)
    build_report(tmp_path / "runs", tmp_path / "out", ReportConfig(reps=20, scaling_reps=3, figures=False))
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    for text in (md, html):
        assert "stable in 3/3 runs" in text and "No flagged runs" in text
    stab = md[md.index("## Stability"):md.index("## Time to target")]
    assert "(no rows)" not in html[html.index("Stability per algorithm"):html.index("Time to target")]
    assert "| grpo | 3 | 3 | stable in 3/3 runs | none |" in stab
