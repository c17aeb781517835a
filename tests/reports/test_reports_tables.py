"""Tables on synthetic runs with known effects: leaderboard, ablations, interactions,
time-to-target, the batch-size rule and the compute-scaling fit.

Run: python -m pytest tests/reports/test_reports_tables.py -q
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports import ReportConfig, ablation, scaling, synthetic, tables, timing
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import BASE_LABEL, score_runs

CFG = ReportConfig(reps=200, scaling_reps=10)
EXACT = dict(seed_sd=0.0, noise=0.0)
SHRINK = 1 / (1 + 0.3**2.0)  # final score = 0.3 + (A - 0.3) * SHRINK at the end of training


def test_leaderboard_columns_and_base_row(synthetic_root_ro):
    scored = score_runs(load_runs(synthetic_root_ro), CFG)
    lb = tables.leaderboard(scored, CFG)
    assert list(lb.columns) == ["task", "algorithm", "n_seeds", "mean", "ci_low", "ci_high", "iqm",
                                "resolution_floor", "stable_k", "stable_n", "budget_unit", "budget", "samples",
                                "updates", "gen_tokens", "flops"]
    # what each cell spent at its scored eval: the matched unit (samples) equals the budget
    body = lb[lb["algorithm"] != BASE_LABEL]
    assert (body["samples"] > 0).all() and (body["updates"] > 0).all() and (body["flops"] > 0).all()
    # 3 seeds: the sign-flip test cannot reject at any level below 0.25, so no gain is resolvable
    assert np.isinf(lb[lb["algorithm"] != BASE_LABEL]["resolution_floor"]).all()
    assert lb[lb["algorithm"] == BASE_LABEL]["resolution_floor"].isna().all()
    for _task, g in lb.groupby("task"):
        assert g.iloc[0]["algorithm"] == BASE_LABEL and g.iloc[0]["n_seeds"] == 3
        body = g.iloc[1:]
        assert (body["ci_low"] <= body["mean"]).all() and (body["mean"] <= body["ci_high"]).all()
        assert body["mean"].is_monotonic_decreasing
    ppo = lb[lb["algorithm"] == "ppo"]
    assert (ppo["stable_k"] == 0).all() and (ppo["stable_n"] == 3).all()
    assert set(lb.loc[lb["algorithm"] != BASE_LABEL, "budget_unit"]) == {"samples"}


def test_single_seed_cell(tmp_path):
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    lb = tables.leaderboard(score_runs(load_runs(tmp_path), CFG), CFG)
    row = lb[lb["algorithm"] == "grpo"].iloc[0]
    assert row["n_seeds"] == 1 and np.isnan(row["ci_low"]) and np.isfinite(row["mean"])
    agg = tables.aggregate_table(score_runs(load_runs(tmp_path), CFG), CFG)
    assert np.isnan(agg.loc[agg["algorithm"] == "grpo", "mean_ci_low"]).all()


def factorial_root(root, interaction=0.024):
    arms = [
        synthetic.Arm(algo="dapo", sweep="abl", asymptote=0.50, **EXACT),
        synthetic.Arm(algo="dapo", sweep="abl", variant="a", factors={"algo.a": True}, asymptote=0.55, **EXACT),
        synthetic.Arm(algo="dapo", sweep="abl", variant="b", factors={"algo.b": True}, asymptote=0.53, **EXACT),
        synthetic.Arm(algo="dapo", sweep="abl", variant="ab", factors={"algo.a": True, "algo.b": True},
                      asymptote=0.50 + 0.05 + 0.03 + interaction, **EXACT),
    ]
    synthetic.write_root(root, arms, ["arith"], [0, 1, 2, 3])


def test_ablation_differences_and_interaction(tmp_path):
    factorial_root(tmp_path)
    rs = load_runs(tmp_path)
    scored = score_runs(rs, CFG)
    abl = ablation.ablation_table(scored, rs, CFG).set_index("arm")
    assert list(abl.index[:2]) == [BASE_LABEL, "dapo"]
    assert abl.loc["dapo:a", "diff"] == pytest.approx(0.05 * SHRINK)
    assert abl.loc["dapo:b", "diff"] == pytest.approx(0.03 * SHRINK)
    assert abl.loc["dapo:a", "n_pairs"] == 4 and abl.loc["dapo:a", "pairing"].startswith("paired")
    assert abl.loc["dapo:a", "p_improve"] == 1.0
    assert abl.loc["dapo:a", "factors"] == "algo.a=True, algo.b=None"  # base levels filled from the spec
    inter = ablation.interaction_table(scored, rs, CFG)
    assert len(inter) == 1
    row = inter.iloc[0]
    assert (row["factor_a"], row["factor_b"]) == ("algo.a", "algo.b")
    assert row["levels_a"] == "null -> true" and row["n_seeds"] == 4
    assert row["interaction"] == pytest.approx(0.024 * SHRINK)
    assert row["ci_low"] == pytest.approx(row["interaction"]) == pytest.approx(row["ci_high"])


def test_first_reach_hand_computed():
    x, y = np.array([0, 10, 20, 30]), np.array([0.1, 0.5, 0.7, 0.9])
    # 2-eval trailing mean: 0.1, 0.3, 0.6, 0.8
    assert timing.first_reach(x, y, 0.6, smooth=2) == 20
    assert timing.first_reach(x, y, 0.5, smooth=1) == 10
    assert timing.first_reach(x, y, 0.95, smooth=1) == np.inf
    assert timing.first_reach(x, np.array([np.nan, 0.7, np.nan, 0.7]), 0.6, smooth=1) == 10


def test_time_to_target_table(synthetic_root_ro):
    cfg = ReportConfig(reps=200, target=0.45)
    scored = score_runs(load_runs(synthetic_root_ro), cfg)
    t = timing.ttt_table(timing.run_times(scored, cfg, "budget/samples"), cfg, "budget/samples").set_index(
        ["task", "algorithm"])
    assert (t["target"] == 0.45).all()
    assert t.loc[("arith", "comppo"), "reached_k"] == 3
    assert np.isinf(t.loc[("arith", "ppo"), "median"])  # diverged before reaching the target
    ok = t[np.isfinite(t["median"]) & t["ci_low"].notna()]
    assert ((ok["ci_low"] <= ok["median"]) & (ok["median"] <= ok["ci_high"])).all()


def test_batch_size_rule(synthetic_root_ro):
    rs = load_runs(synthetic_root_ro)
    scored = score_runs(rs, CFG)
    b = timing.batch_table(scored, rs, CFG)
    assert set(b["prompts_per_step"]) == {16, 64} and len(b) == 4
    ref = b[b["prompts_per_step"] == 16]
    big = b[b["prompts_per_step"] == 64]
    assert (ref["pays_off"] == "reference").all() and np.allclose(ref["throughput_gain"], 1.0)
    assert np.allclose(big["throughput_gain"], 3.0)
    assert np.allclose(big["predicted_speedup"], big["throughput_gain"] / big["samples_penalty"])
    assert (big["pays_off"] == (big["throughput_gain"] > big["samples_penalty"])).all()


def test_sigmoid_fit_recovers_parameters():
    c = np.geomspace(1e10, 1e13, 40)
    y = scaling.sigmoid(c, 0.3, 0.7, 1.5, 5e11)
    a, b, m = scaling.fit_sigmoid(c, y, 0.3)
    assert a == pytest.approx(0.7, rel=1e-4) and b == pytest.approx(1.5, rel=1e-3)
    assert m == pytest.approx(5e11, rel=1e-3)


def test_scaling_table_reports_failures(synthetic_root_ro):
    scored = score_runs(load_runs(synthetic_root_ro), CFG)
    fits = scaling.scaling_table(scored, CFG).set_index(["task", "algorithm"])
    ok = fits[fits["status"] == "ok"]
    assert len(ok) >= 10 and (ok["A"] > 0.4).all() and (ok["boot_ok"] > 0).all()
    assert fits.loc[("arith", "ppo"), "status"].startswith("no reliable fit: too few points")
    no_flops = scored.metric_evals.assign(**{"budget/flops": np.nan})
    broken = scored.__class__(scores=scored.scores, excluded=scored.excluded, base=scored.base,
                              metric_evals=no_flops, notes=())
    assert scaling.scaling_table(broken, CFG)["status"].str.startswith("no reliable fit: too few points").all()


def test_poi_and_paired_tables(synthetic_root_ro):
    scored = score_runs(load_runs(synthetic_root_ro), CFG)
    agg = tables.aggregate_table(scored, CFG)
    assert agg.iloc[0]["algorithm"] == BASE_LABEL
    ref = tables.choose_reference(agg, ReportConfig(reps=200, reference="grpo"))
    paired = tables.paired_table(scored, CFG, ref)
    row = paired[(paired["algorithm"] == "comppo") & (paired["task"] == "all tasks")].iloc[0]
    assert row["n_pairs"] == 6 and row["ci_low"] > 0  # comppo's asymptote is 0.07 higher
    poi = tables.poi_table(scored, CFG, ref, max_all_pairs=3)
    assert set(poi["algorithm_y"]) == {"grpo"}
    assert poi.set_index("algorithm_x").loc["ppo", "p_improve"] == 0.0
    with pytest.raises(ValueError, match="unknown reference"):
        tables.choose_reference(agg, ReportConfig(reps=200, reference="nope"))
    assert isinstance(tables.stability_counts(scored), pd.DataFrame)
