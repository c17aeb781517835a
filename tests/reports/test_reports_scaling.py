"""Compute-scaling fits: bounded asymptote, reliability verdicts, ScaleRL's skip, the figure.

Run: python -m pytest tests/reports/test_reports_scaling.py -q
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports import ReportConfig, scaling, synthetic
from rlsuite.reports.figures import palette, scaling_figure
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import score_runs

CFG = ReportConfig(reps=50, scaling_reps=40)


def test_known_sigmoid_is_recovered_within_bounds():
    c = np.geomspace(1e10, 1e13, 30)
    y = scaling.sigmoid(c, 0.3, 0.7, 1.5, 5e11) + np.random.default_rng(0).normal(0, 0.005, c.size)
    a, b, m = scaling.fit_sigmoid(c, y, 0.3, a_max=1.0)
    assert 0.3 <= a <= 1.0
    assert a == pytest.approx(0.7, abs=0.02) and b == pytest.approx(1.5, rel=0.15)
    assert m == pytest.approx(5e11, rel=0.15)


def test_five_noisy_points_give_a_bounded_asymptote():
    # a quickstart-like curve: base 0.45, still rising at the end of the budget
    c = np.array([1e11, 2e11, 3e11, 4e11, 5e11])
    y = np.array([0.47, 0.46, 0.52, 0.55, 0.60])
    try:
        a, _, _ = scaling.fit_sigmoid(c, y, 0.45, a_max=1.0)
    except RuntimeError:
        return  # no convergence is reported as "no reliable fit" by fit_cell
    assert 0.45 <= a <= 1.0
    with pytest.raises(ValueError, match="empty range"):
        scaling.fit_sigmoid(c, y, 0.45, a_max=0.45)


def test_metric_max():
    assert scaling.metric_max("greedy_acc") == 1.0 and scaling.metric_max("pass@8") == 1.0
    assert scaling.metric_max("maj@4") == 1.0 and scaling.metric_max("avg@16") == 1.0
    assert scaling.metric_max("reward") is None
    lo, hi = scaling.a_bounds("reward", 0.2, np.array([0.3, 0.5]))
    assert (lo, hi) == (0.2, pytest.approx(0.8))  # unknown maximum: R0 + 2 x the best observed gain


def test_default_skip_is_scalerl_share():
    assert ReportConfig().scaling_skip_frac == pytest.approx(1.5e3 / 100e3)


def _root(tmp_path, arm: synthetic.Arm, seeds, **kw):
    for s in seeds:
        synthetic.write_run(tmp_path, "arith", arm, s, **kw)
    return score_runs(load_runs(tmp_path), CFG)


def test_clean_synthetic_fit_is_ok_with_intervals(tmp_path):
    scored = _root(tmp_path, synthetic.Arm(algo="grpo", asymptote=0.6, noise=0.005, seed_sd=0.005), [0, 1, 2])
    row = scaling.scaling_table(scored, CFG).iloc[0]
    assert row["status"] == "ok" and row["R0"] == pytest.approx(0.3) and row["A_max"] == 1.0
    assert row["R0"] <= row["A_ci_low"] <= row["A"] <= row["A_ci_high"] <= row["A_max"]
    assert row["B_ci_low"] <= row["B"] <= row["B_ci_high"] and row["boot_ok"] >= CFG.scaling_reps / 2
    assert row["A"] == pytest.approx(0.6, abs=0.05)


@pytest.mark.parametrize("seeds", [[0], [0, 1, 2]])
def test_quickstart_like_cells_are_bounded_or_flagged(tmp_path, seeds):
    # evals at each quarter of the budget, noisy, no saturation: the A = 3874 case
    arm = synthetic.Arm(algo="dr_grpo", asymptote=0.9, midpoint=3.0, slope=1.0, noise=0.03, seed_sd=0.02)
    scored = _root(tmp_path, arm, seeds, steps=200, eval_every=50, base_score=0.45)
    row = scaling.scaling_table(scored, CFG).iloc[0]
    assert row["status"] == "ok" or row["status"].startswith("no reliable fit: ")
    if pd.notna(row["A"]):
        assert row["R0"] <= row["A"] <= 1.0
    if len(seeds) == 1:
        assert row["status"].startswith("no reliable fit: too few points")  # 4 points for 3 parameters
    else:
        assert row["status"].startswith("no reliable fit: A pinned at its upper bound")


def test_flat_cell_is_no_reliable_fit(tmp_path):
    # the gain happens before the first eval: the points hold no curve
    arm = synthetic.Arm(algo="rloo", asymptote=0.52, midpoint=0.05, slope=3.0, noise=0.03)
    scored = _root(tmp_path, arm, [0, 1, 2], steps=200, eval_every=50, base_score=0.45)
    assert scaling.scaling_table(scored, CFG).iloc[0]["status"].startswith("no reliable fit")


def test_unreliable_rules():
    base = {"R0": 0.3, "A_max": 1.0, "A": 0.6, "n_seeds": 3, "boot_ok": 40, "A_ci_low": 0.55, "A_ci_high": 0.65,
            "C_mid_ci_low": 1.0, "C_mid_ci_high": 2.0}
    c, y = np.array([1.0, 2.0, 4.0, 8.0]), np.array([0.4, 0.5, 0.55, 0.6])
    assert scaling.unreliable(base, c, y, 40) is None
    assert "upper bound" in scaling.unreliable({**base, "A": 1.0}, c, y, 40)
    assert "no gain" in scaling.unreliable({**base, "A": 0.3}, c, y, 40)
    assert "bootstrap refits" in scaling.unreliable({**base, "boot_ok": 10}, c, y, 40)
    assert "A interval" in scaling.unreliable({**base, "A_ci_low": 0.35, "A_ci_high": 0.99}, c, y, 40)
    assert "C_mid interval" in scaling.unreliable({**base, "C_mid_ci_high": 100.0}, c, y, 40)


def test_skip_frac_drops_early_points(tmp_path):
    scored = _root(tmp_path, synthetic.Arm(algo="grpo"), [0, 1])
    full = scaling.scaling_table(scored, ReportConfig(reps=50, scaling_reps=5, scaling_skip_frac=0.0))
    skip = scaling.scaling_table(scored, ReportConfig(reps=50, scaling_reps=5, scaling_skip_frac=0.3))
    assert full.iloc[0]["n_points"] == 8 and skip.iloc[0]["n_points"] == 6  # the 25% evals dropped


def test_figure_draws_raw_points_and_only_reliable_curves(tmp_path):
    good = synthetic.Arm(algo="grpo", asymptote=0.6, noise=0.005, seed_sd=0.005)
    bad = synthetic.Arm(algo="rloo", asymptote=0.9, midpoint=3.0, slope=1.0, noise=0.03)
    for arm in (good, bad):
        for s in (0, 1, 2):
            synthetic.write_run(tmp_path / "runs", "arith", arm, s)
    scored = score_runs(load_runs(tmp_path / "runs"), CFG)
    fits = scaling.scaling_table(scored, CFG)
    assert fits.set_index("algorithm").loc["grpo", "status"] == "ok"
    import matplotlib.pyplot as plt
    captured = {}
    orig = plt.Figure.savefig

    def spy(self, *a, **k):
        ax = self.axes[0]
        captured["points"] = sum(len(col.get_offsets()) for col in ax.collections)
        captured["lines"] = [ln.get_label() for ln in ax.get_lines() if len(ln.get_xdata())]
        captured["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        return orig(self, *a, **k)
    plt.Figure.savefig = spy
    try:
        fig = scaling_figure("arith", scored, fits, palette(["grpo", "rloo"]), CFG, tmp_path / "out")
    finally:
        plt.Figure.savefig = orig
    assert fig is not None and (tmp_path / "out" / "figures" / "scaling_arith.png").is_file()
    ev = scored.metric_evals
    raw = ev[(ev["split"] == "val") & (ev["budget/flops"] > 0)]
    assert captured["points"] == len(raw)  # every logged point, none interpolated
    assert len(captured["lines"]) == 1 and captured["lines"][0].startswith("grpo: A=")
    legend = " ".join(captured["legend"])
    assert "A=0." in legend and "[" in legend and "rloo: no reliable fit" in legend
