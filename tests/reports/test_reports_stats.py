"""Statistics: bootstrap, Student-t and studentized CIs, the measured-coverage choice, scipy
agreement, IQM, the rliable median, P(improvement), profiles, pairs, Holm, MDD, and the
summary's verdicts.

Run: python -m pytest tests/reports/test_reports_stats.py -q
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rlsuite.reports import ReportConfig, ReportError, cli, render, stats, synthetic, tables
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import SCORE_COLUMNS, Scored, score_runs
from rlsuite.reports.stats import aggregates as stats_aggregates

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(2, 20), elements=finite), st.sampled_from(["percentile", "bca"]))
def test_ci_brackets_the_mean(x, method):
    ci = stats.bootstrap_ci(x, reps=200, method=method, seed=1)
    assert ci.low <= ci.point + 1e-9 * max(1, abs(ci.point))
    assert ci.point <= ci.high + 1e-9 * max(1, abs(ci.point))


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_matches_scipy_bootstrap(method):
    x = np.array([0.52, 0.61, 0.58, 0.49, 0.66, 0.55, 0.60])
    ours = stats.bootstrap_ci(x, reps=2000, method=method, seed=7)
    ref = scipy.stats.bootstrap((x,), np.mean, n_resamples=2000, method="BCa" if method == "bca" else "percentile",
                                rng=np.random.default_rng(7))
    assert ours.point == pytest.approx(x.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=1e-12)


def test_fixed_seed_is_reproducible():
    x = np.random.default_rng(0).normal(size=8)
    assert stats.bootstrap_ci(x, reps=500, seed=3) == stats.bootstrap_ci(x, reps=500, seed=3)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_all_equal_gives_zero_width_not_nan(method):
    ci = stats.bootstrap_ci(np.full(5, 0.61), reps=200, method=method)
    assert ci == (pytest.approx(0.61), pytest.approx(0.61), pytest.approx(0.61))
    agg = stats.stratified_interval(np.full((4, 3), 0.5), reps=200)
    assert agg["mean"] == (0.5, 0.5, 0.5) and agg["iqm"] == (0.5, 0.5, 0.5)


def test_single_seed_and_empty():
    ci = stats.bootstrap_ci(np.array([0.7]), reps=200)
    assert ci.point == 0.7 and np.isnan(ci.low) and np.isnan(ci.high)
    assert all(np.isnan(v) for v in stats.bootstrap_ci(np.array([]), reps=200))
    assert all(np.isnan(v) for v in stats.bootstrap_ci(np.array([np.nan, np.inf]), reps=200))
    one = stats.stratified_interval(np.array([[0.3, 0.4]]), reps=200)
    assert one["mean"].point == pytest.approx(0.35) and np.isnan(one["mean"].low)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_coverage_at_n50(method):
    """Nominal 95%: actual coverage on normal data at n = 50 over 1000 draws in [92%, 97%]."""
    rng = np.random.default_rng(12345)
    hits = 0
    for i in range(1000):
        ci = stats.bootstrap_ci(rng.normal(3.0, 2.0, 50), reps=1000, method=method, seed=i)
        hits += ci.low <= 3.0 <= ci.high
    assert 0.92 <= hits / 1000 <= 0.97


def test_iqm_hand_computed():
    # 8 values: drop the 2 lowest and 2 highest -> mean(3, 4, 5, 6) = 4.5
    assert stats.iqm(np.array([8.0, 1, 7, 2, 6, 3, 5, 4])) == pytest.approx(4.5)
    # rliable layout (runs x tasks): IQM pools all run x task scores
    scores = np.array([[0.0, 10.0], [1.0, 2.0], [3.0, 100.0], [4.0, 5.0]])
    assert stats.agg_iqm(stats.columns(scores)) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))
    assert stats.agg_mean(stats.columns(scores)) == pytest.approx(scores.mean())


def test_stratified_interval_properties():
    rng = np.random.default_rng(0)
    scores = rng.uniform(size=(5, 4))
    a = stats.stratified_interval(scores, ("mean", "iqm", "median", "optimality_gap"), reps=300, seed=2)
    for name, ci in a.items():
        assert ci.low <= ci.point <= ci.high, name
    # tasks permuted -> same result (same per-task resampling stream order aside, the point is identical)
    b = stats.stratified_interval(scores[:, ::-1], ("mean", "iqm"), reps=300, seed=2)
    assert b["mean"].point == pytest.approx(a["mean"].point)
    assert b["iqm"].point == pytest.approx(a["iqm"].point)
    # ragged (NaN-padded) input: mean of per-task means
    ragged = np.array([[1.0, 10.0], [3.0, np.nan]])
    assert stats.stratified_interval(ragged, reps=100)["mean"].point == pytest.approx((2.0 + 10.0) / 2)


def test_probability_of_improvement_hand_computed():
    # task 1: x = {1, 3} vs y = {2, 2}: pairs 1>2 no, 1>2 no, 3>2 yes, 3>2 yes -> 0.5
    # task 2: x = {5, 5} vs y = {5, 4}: 5=5 (1/2) twice, 5>4 twice -> (0.5 + 0.5 + 1 + 1) / 4 = 0.75
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    y = np.array([[2.0, 5.0], [2.0, 4.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx((0.5 + 0.75) / 2)
    assert stats.probability_of_improvement(y, x) == pytest.approx(1 - (0.5 + 0.75) / 2)
    ci = stats.poi_interval(x, y, reps=300, seed=0)
    assert ci.low <= ci.point <= ci.high
    assert stats.probability_of_improvement(np.array([[1.0]]), np.array([[1.0]])) == 0.5


@settings(max_examples=30, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 3)), elements=st.floats(0, 1)))
def test_performance_profile_non_increasing(scores):
    taus = np.linspace(-0.1, 1.1, 50)
    prof = stats.performance_profile(scores, taus)
    assert np.all(np.diff(prof) <= 1e-12)
    assert prof[0] == pytest.approx(1.0) and prof[-1] == pytest.approx(0.0)
    point, low, high = stats.profile_interval(scores, taus, reps=50)
    assert np.all(low <= point + 1e-12) and np.all(point <= high + 1e-12)


def test_performance_profile_hand_computed():
    scores = np.array([[0.1, 0.5], [0.2, 0.6], [0.3, 0.7], [0.4, 0.8]])
    # tau = 0.35: task 1 has 1/4 above, task 2 has 4/4 -> mean 0.625
    assert stats.performance_profile(scores, np.array([0.35]))[0] == pytest.approx(0.625)


def test_paired_difference_uses_pairs():
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0, 1.0, size=(10, 1))  # large shared seed variation
    y = 0.5 + seed_effect
    x = y + 0.1 + rng.normal(0, 0.01, size=(10, 1))
    paired, n = stats.paired_difference(x, y, reps=1000, seed=0)
    unpaired = stats.unpaired_difference(x, y, reps=1000, seed=0)
    assert n == 10 and paired.point == pytest.approx(float(np.mean(x - y)))
    assert paired.low > 0  # the pairing removes the seed variance ...
    assert unpaired.low < 0 < unpaired.high  # ... which swamps the unpaired comparison
    # missing partner -> pair dropped
    x2 = x.copy()
    x2[0, 0] = np.nan
    assert stats.paired_difference(x2, y, reps=100)[1] == 9


def test_interaction_contrast_exact():
    s = np.arange(6, dtype=float).reshape(-1, 1)  # seed effects cancel in the contrast
    y00, y10, y01 = s + 0.50, s + 0.55, s + 0.53
    y11 = s + 0.50 + 0.05 + 0.03 + 0.024
    ci, n = stats.interaction_contrast(y00, y10, y01, y11, reps=200)
    assert n == 6 and ci.point == pytest.approx(0.024)
    assert ci.low == pytest.approx(0.024) and ci.high == pytest.approx(0.024)


# --- Student-t, studentized, auto (coverage table), rliable median ----------------------

def test_student_t_interval_hand_computed():
    # [1, 2, 3]: mean 2, sd 1, n 3 -> 2 +- t_{0.975, 2} / sqrt(3), t_{0.975, 2} = 4.302653
    ci = stats.t_interval(np.array([1.0, 2.0, 3.0]))
    half = 4.302652729749462 / np.sqrt(3)
    assert ci.point == 2.0 and ci.low == pytest.approx(2 - half) and ci.high == pytest.approx(2 + half)
    assert ci.low == pytest.approx(-0.484138, abs=1e-6)
    assert stats.bootstrap_ci(np.array([1.0, 2.0, 3.0]), method="t") == ci
    assert stats.t_interval(np.full(4, 0.3)) == (0.3, 0.3, 0.3)  # zero spread: zero width
    assert np.isnan(stats.t_interval(np.array([0.5])).low)
    # one task: the Welch-Satterthwaite stratified t reduces to Student-t
    assert stats.stratified_interval(np.array([[1.0], [2.0], [3.0]]), ("mean",), method="t")["mean"] == ci


def test_studentized_matches_a_direct_bootstrap_t():
    x = np.array([0.52, 0.61, 0.58, 0.49, 0.66])
    ci = stats.bootstrap_ci(x, reps=4000, method="studentized", seed=5)
    rng = np.random.default_rng(5)
    boot = x[rng.integers(0, x.size, size=(4000, x.size))]
    se = boot.std(axis=1, ddof=1) / np.sqrt(x.size)
    ok = se > 0
    t = (boot.mean(axis=1)[ok] - x.mean()) / se[ok]
    lo, hi = np.quantile(t, [0.025, 0.975])
    se0 = x.std(ddof=1) / np.sqrt(x.size)
    assert ci.low == pytest.approx(x.mean() - hi * se0) and ci.high == pytest.approx(x.mean() - lo * se0)
    # one task: the stratified studentized interval is the same computation
    strat = stats.stratified_interval(x[:, None], ("mean",), reps=4000, seed=5, method="studentized")
    assert strat["mean"].low == pytest.approx(ci.low) and strat["mean"].high == pytest.approx(ci.high)


def test_choose_method_rule():
    table = stats.CoverageTable(10_000, {3: {"percentile": (0.75, 0.72, 0.55), "t": (0.95, 0.93, 0.86),
                                             "studentized": (0.81, 0.80, 0.65)},
                                         10: {"percentile": (0.90, 0.89, 0.67), "t": (0.99, 0.99, 0.720),
                                              "studentized": (0.95, 0.96, 0.724)}})
    assert stats.choose_method(3, table) == "t"  # best worst case (86%)
    assert stats.choose_method(4, table) == "t"  # n between rows: the row below
    # 72.4% vs 72.0%: within two Monte Carlo SEs (0.9 points at 10,000 draws) -> tie -> t first
    assert stats.choose_method(10, table) == "t"
    assert stats.choose_method(50, table, candidates=("percentile", "studentized")) == "studentized"
    assert stats.resolve_method("bca", 3, table) == "bca"
    with pytest.raises(ValueError, match="unknown CI method"):
        stats.resolve_method("normal", 3, table)
    # the committed table: at 3 seeds the bootstraps under-cover badly and auto picks Student-t
    assert stats.choose_method(3) == "t"
    row = stats.CELL_COVERAGE.rows[3]
    assert row["percentile"][0] < 0.8 and row["t"][0] > 0.93
    x = np.array([0.55, 0.61, 0.58])
    assert stats.bootstrap_ci(x, method="auto") == stats.t_interval(x)


def test_coverage_note_names_method_and_measured_coverage():
    note = stats.coverage_note("auto", [3, 3])
    normal, beta, mix = stats.CELL_COVERAGE.rows[3]["t"]
    assert note.startswith("95% intervals (auto: best measured coverage per n): Student-t (n = 3 seeds; "
                           f"measured coverage at n = 3: {100 * normal:.1f}% normal, {100 * beta:.1f}% Beta(2, 8), "
                           f"{100 * mix:.1f}% collapse mixture")
    assert note.endswith("benchmarks/report_scale/report_coverage.md.")
    perc = stats.coverage_note("percentile", [3])
    assert "percentile bootstrap (n = 3 seeds" in perc and "under-covers on normal" in perc
    assert "none" in stats.coverage_note("auto", [1])


def test_coverage_tables_are_the_packaged_data_as_measured(tmp_path):
    """Issue 37: the coverage tables are data (``reports/coverage.json``, loaded at import), and
    they are the numbers of the committed study (its "As stored" block in `COVERAGE_FILE`)."""
    root = Path(__file__).resolve().parents[2]
    cell, agg = stats.load_coverage()
    assert (cell, agg) == (stats.CELL_COVERAGE, stats.AGGREGATE_COVERAGE)
    assert (stats.COVERAGE_DATA.parent.name, stats.COVERAGE_DATA.name) == ("reports", "coverage.json")
    assert isinstance(cell.rows[3]["t"], tuple) and sorted(agg) == ["iqm", "mean"] and sorted(agg["mean"]) == [2, 5]
    md = (root / stats.COVERAGE_FILE).read_text(encoding="utf-8")
    block = md.split("```python\n", 1)[1].split("```", 1)[0]
    stored: dict = {}
    exec(block, {"stats": stats}, stored)
    assert stored["CELL_COVERAGE"] == stats.CELL_COVERAGE and stored["AGGREGATE_COVERAGE"] == stats.AGGREGATE_COVERAGE
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({**json.loads(stats.COVERAGE_DATA.read_text()), "distributions": ["normal"]}))
    with pytest.raises(ValueError, match="coverage measured on"):
        stats.load_coverage(bad)


def test_median_is_median_over_tasks_of_per_task_means():
    # rliable 1.2.0 aggregate_median: median over tasks of the per-task mean over runs.
    # task A runs (0, 0, 9): mean 3; task B runs (1, 1, 1): mean 1 -> median(3, 1) = 2;
    # the pooled median of (0, 0, 9, 1, 1, 1) is 1.
    scores = np.array([[0.0, 1.0], [0.0, 1.0], [9.0, 1.0]])
    cols = stats.columns(scores)
    assert stats.agg_median(cols) == pytest.approx(2.0)
    assert stats.agg_pooled_median(cols) == pytest.approx(1.0)
    ints = stats.stratified_interval(scores, ("median", "pooled_median"), reps=50)
    assert ints["median"].point == pytest.approx(2.0) and ints["pooled_median"].point == pytest.approx(1.0)
    three = np.array([[0.0, 1.0, 5.0], [2.0, 1.0, 7.0]])  # per-task means 1, 1, 6 -> median 1
    assert stats.agg_median(stats.columns(three)) == pytest.approx(1.0)


def test_iqm_t_and_se_hand_computed():
    # 8 scores, g = 2 trimmed from each end, h = 4 kept; winsorized at the 3rd and 6th values
    x = np.array([1.0, 2, 3, 4, 10, 11, 12, 30])
    w = np.clip(x, 3, 11)
    se = w.std(ddof=1) / (0.5 * np.sqrt(8))  # Tukey-McLaughlin: s_w / ((1 - 2 * 0.25) sqrt(n))
    ci = stats.stratified_interval(x[:, None], ("iqm",), method="t")["iqm"]
    half = scipy.stats.t.ppf(0.975, 4 - 1) * se  # Yuen: df = h - 1
    assert ci.point == pytest.approx(np.mean([3, 4, 10, 11]))
    assert ci.high - ci.point == pytest.approx(half)


# --- tests, Holm, MDD ---------------------------------------------------------------------

def test_t_test_matches_scipy():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.6, 0.05, 5), rng.normal(0.55, 0.05, 5)
    paired = stats.t_test([x - y])
    ref = scipy.stats.ttest_rel(x, y)
    assert paired.p == pytest.approx(ref.pvalue) and paired.df == pytest.approx(4)
    welch = stats.t_test([x], [y[:4]])
    ref = scipy.stats.ttest_ind(x, y[:4], equal_var=False)
    assert welch.p == pytest.approx(ref.pvalue) and welch.diff == pytest.approx(x.mean() - y[:4].mean())
    assert stats.t_test([np.zeros(3)]).p == 1.0


def test_zero_spread_difference_is_tested_by_randomization_not_called_certain():
    # 3 seeds, every paired difference exactly 0.01 (two algorithms 2 prompts of 200 apart on
    # every seed): t = 0.01 / 0 is undefined; the 8 sign flips give |mean| = 0.01 twice -> 0.25
    t = stats.t_test([np.full(3, 0.01)])
    assert t.p == pytest.approx(0.25) and t.se == 0.0 and np.isnan(t.df)
    ci = stats.t_test_interval(t, 0.95)
    assert ci.point == pytest.approx(0.01) and np.isnan(ci.low) and np.isnan(ci.high)
    assert stats.t_test([np.full(6, -0.01)]).p == pytest.approx(2 / 2**6)
    # the same in percentage points as the report differences them: equal up to the last bits
    d = np.array([48.5 - 47.5, 47.0 - 46.0, 45.5 - 44.5]) + np.array([0.0, 2e-15, -3e-15])
    assert np.ptp(d) > 0 and stats.t_test([d]).p == pytest.approx(0.25)
    # unpaired, both arms constant: 3 vs 3 runs -> 20 splits, 2 as extreme -> 0.1
    assert stats.t_test([np.full(3, 0.5)], [np.full(3, 0.4)]).p == pytest.approx(0.1)
    assert stats.t_test_interval(stats.t_test([np.zeros(3)]), 0.95) == (0.0, 0.0, 0.0)


def test_randomization_p_matches_scipy_permutation_test():
    rng = np.random.default_rng(7)
    d = rng.normal(0.3, 1.0, 7)
    ref = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf)
    assert stats.randomization_p([d]) == pytest.approx(ref.pvalue)
    x, y = rng.normal(1.0, 1.0, 5), rng.normal(0.0, 1.0, 4)
    ref = scipy.stats.permutation_test((x, y), lambda a, b: np.mean(a) - np.mean(b),
                                       permutation_type="independent", n_resamples=np.inf)
    assert stats.randomization_p([x], [y]) == pytest.approx(ref.pvalue)
    # two tasks (columns), paired: the statistic is the mean of the column means
    cols = [np.array([0.2, 0.1, 0.3]), np.array([0.05, -0.02])]
    flips = [np.array(s) for s in itertools.product([-1, 1], repeat=5)]
    v, w = np.concatenate(cols), np.array([1 / 6] * 3 + [1 / 4] * 2)
    obs = abs(stats.agg_mean(cols))
    want = np.mean([abs(f @ (w * v)) >= obs - 1e-12 for f in flips])
    assert stats.randomization_p(cols) == pytest.approx(want)


def test_holm_on_known_p_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> running max 0.06
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # levels: 0.005 at 0.05/4, 0.01 at 0.05/3 (both rejected), 0.03 > 0.05/2 stops: the rest at 0.05/2
    assert stats.holm_levels(p, 0.05) == pytest.approx([0.05 / 3, 0.025, 0.025, 0.0125])
    out = stats.holm([0.2, np.nan, 0.01])  # NaN (untestable) stays NaN and is not counted
    assert np.isnan(out[1]) and out[0] == pytest.approx(0.2) and out[2] == pytest.approx(0.02)
    assert stats.holm([0.3, 0.02]) == pytest.approx([0.3, 0.04]) and stats.holm([0.9, 0.8]) == pytest.approx([1, 1])


def test_holm_intervals_agree_with_holm_verdicts():
    rng = np.random.default_rng(11)
    tests = [stats.t_test([rng.normal(mu, 1.0, 4)]) for mu in (0.0, 0.5, 1.0, 2.0, 3.0, 0.2, 4.0)]
    p = [t.p for t in tests]
    adj, levels = stats.holm(p), stats.holm_levels(p, 0.05)
    for t, a, lv in zip(tests, adj, levels, strict=True):
        ci = stats.t_test_interval(t, 1 - lv)
        assert (a <= 0.05) == (not ci.low <= 0 <= ci.high)


def test_mdd_formula_on_known_sd():
    # sd 2, n 5: (t_{0.975, 4} + t_{0.8, 4}) * 2 / sqrt(5) = (2.776445 + 0.940965) * 0.894427
    assert stats.minimum_detectable_difference(2.0, 5) == pytest.approx(3.3249523, rel=1e-6)
    assert stats.minimum_detectable_difference(2.0, 5) == pytest.approx(
        (2.7764451051977934 + 0.9409645772351816) * 2 / np.sqrt(5))
    assert np.isnan(stats.minimum_detectable_difference(2.0, 1))
    d = np.array([1.0, 3.0, -1.0, 2.0, 5.0])  # paired differences over 5 seeds
    test = stats.t_test([d])
    assert stats.mdd_from_test(test) == pytest.approx(stats.minimum_detectable_difference(d.std(ddof=1), 5))
    # seeds needed for a difference of 2 at sd 2: MDD(9) = 2.130 > 2 >= MDD(10) = 1.989
    terms = [(4.0 / 5, 4)]  # (sd^2 / n_obs, n_obs - 1)
    assert stats.seeds_needed(2.0, terms) == 10
    assert stats.minimum_detectable_difference(2.0, 10) <= 2.0 < stats.minimum_detectable_difference(2.0, 9)
    assert stats.seeds_needed(0.0, terms) == np.inf and stats.seeds_needed(1.0, [(0.0, 4)]) == 6


# --- verdicts and the summary --------------------------------------------------------------

CFG = ReportConfig(reps=200, scaling_reps=5)


def _verdict_root(tmp_path, arms, seeds=(0, 1, 2, 3)):
    synthetic.write_root(tmp_path, arms, ["arith"], list(seeds))
    return score_runs(load_runs(tmp_path), CFG)


def _scored(cells: dict[str, list[float]], base: list[float], task: str = "arith") -> Scored:
    """A hand-made Scored: one run per (algorithm, seed), seeds 0..n-1; base = step-0 per seed."""
    rows = [{"run_id": f"{a}-{i}", "task": task, "algorithm": a, "algo": a, "variant": None, "sweep": None,
             "seed": i, "state": "completed", "score": v, "score_source": "final", "score_step": 100,
             "budget_unit": "samples", "budget": 2560.0, "stable": True, "reasons": ""}
            for a, vals in cells.items() for i, v in enumerate(vals)]
    b = [{"run_id": f"{a}-{i}", "task": task, "seed": i, "model": "tiny", "score": base[i]}
         for a, vals in cells.items() for i in range(len(vals))]
    return Scored(scores=pd.DataFrame(rows, columns=list(SCORE_COLUMNS)), excluded=pd.DataFrame(),
                  base=pd.DataFrame(b), metric_evals=pd.DataFrame(), notes=())


def test_summary_says_no_algorithm_is_distinguishable():
    # paired differences vs the base (0.74 at every seed): dr_grpo (+0.04, -0.04, +0.03), ppo (-0.02, +0.05,
    # -0.03); dr_grpo - ppo (+0.06, -0.09, +0.06): nothing is distinguishable
    scored = _scored({"dr_grpo": [0.78, 0.70, 0.77], "ppo": [0.72, 0.79, 0.71]}, [0.74] * 3)
    v = tables.verdict_table(scored, CFG)
    assert len(v) == 3 and set(v["verdict"]) == {tables.NOT_DISTINGUISHABLE}
    assert (v["n_pairs"] == 3).all() and v["pairing"].str.startswith("paired").all()
    pair = v[v["algorithm_y"] == "ppo"].iloc[0]
    d = np.array([0.06, -0.09, 0.06])
    # the one small-sample rule: sign flips of the 3 differences; |mean| 0.01 is reached by the 4
    # patterns that keep -0.09's sign paired with at least one of the +0.06 ... by hand: p = 1.0
    assert pair["diff"] == pytest.approx(d.mean()) and pair["p_value"] == pytest.approx(
        np.mean(np.abs(np.array([[s0, s1, s2] for s0 in (1, -1) for s1 in (1, -1) for s2 in (1, -1)]) @ d / 3)
                >= abs(d.mean()) - 1e-12))
    # 3 seeds: below the sign-flip test's floor (6 at 0.05): nothing is detectable, the interval is the whole line
    assert pair["mdd"] == np.inf and pair["ci_low"] == -np.inf and pair["ci_high"] == np.inf
    assert pair["seeds_needed"] >= 6
    lines = render.summary_lines(v, tables.leaderboard(scored, CFG), percent=True)
    assert len(lines) == 1
    assert lines[0].startswith("On arith (2 algorithm(s), 3 seed(s) each): no algorithm is distinguishable from "
                               "the base (base (step 0), 74.0%) or from another algorithm")
    assert "reaches" not in lines[0]  # no ranking sentence
    foot = render.verdict_footer(v, 0.95)
    assert "Holm-adjusted within each family — the 2 comparisons with the base and the 1 pairs of algorithms " \
           "of task arith" in foot
    assert "alpha = 0.05" in foot


def test_summary_both_beat_the_base_but_the_pair_is_not_distinguishable():
    # the example: 75.3% vs 74.4% is no ranking when the paired difference is not distinguishable;
    # 7 seeds, so the sign-flip test can reject (2 / 2^7 = 0.016 <= 0.05 / 2, the base family's first step)
    scored = _scored({"dr_grpo": [0.75, 0.74, 0.77, 0.76, 0.75, 0.74, 0.76],
                      "ppo": [0.73, 0.76, 0.74, 0.75, 0.76, 0.73, 0.74]}, [0.45, 0.46, 0.44, 0.45, 0.46, 0.44, 0.45])
    v = tables.verdict_table(scored, CFG)
    line = render.summary_lines(v, tables.leaderboard(scored, CFG), percent=True)[0]
    assert "above the base (base (step 0), 45.0%): dr_grpo 75.3% (+30.3 pp [Holm" in line
    assert "ppo 74.4%" in line and "no pair of algorithms is distinguishable (1 pair(s))" in line


def test_summary_names_winners_and_distinguishable_pairs(tmp_path):
    arms = [synthetic.Arm(algo="comppo", asymptote=0.75), synthetic.Arm(algo="grpo", asymptote=0.55),
            synthetic.Arm(algo="dapo", asymptote=0.552)]
    # 8 seeds: the sign-flip test's floor at the first Holm step of 3 comparisons (0.05 / 3) is 7
    scored = _verdict_root(tmp_path, arms, seeds=range(8))
    v = tables.verdict_table(scored, CFG).set_index(["algorithm_x", "algorithm_y"])
    assert v.loc[("comppo", "grpo"), "verdict"] == "comppo > grpo"
    assert v.loc[("comppo", "base (step 0)"), "verdict"] == "comppo > base (step 0)"
    assert (v["p_holm"] >= v["p_value"] - 1e-15).all()
    for r in v.itertuples():  # the Holm interval excludes 0 exactly when the verdict is a difference
        assert (r.verdict == tables.NOT_DISTINGUISHABLE) == (r.holm_ci_low <= 0 <= r.holm_ci_high)
    assert np.isfinite(v["mdd"]).all() and (v["seeds_needed"] >= 2).all()
    lines = render.summary_lines(v.reset_index(), tables.leaderboard(scored, CFG), percent=True)
    assert "above the base (base (step 0), 30.0%): comppo" in lines[0]
    assert "distinguishable pairs: comppo > " in lines[0] and "Holm" in lines[0]


def test_paired_table_has_mdd_and_seeds_needed(tmp_path):
    arms = [synthetic.Arm(algo="comppo", asymptote=0.62), synthetic.Arm(algo="grpo", asymptote=0.55)]
    scored = _verdict_root(tmp_path, arms)
    paired = tables.paired_table(scored, CFG, "grpo")
    row = paired.iloc[0]
    assert {"mdd", "seeds_needed"} <= set(paired.columns) and row["n_pairs"] == 4
    assert row["mdd"] > 0 and row["seeds_needed"] >= 2


def test_config_and_cli_accept_the_new_methods():
    import argparse
    assert ReportConfig().ci == "auto"
    for m in ("auto", "percentile", "bca", "t", "studentized"):
        assert ReportConfig(ci=m).ci == m
    with pytest.raises(ReportError, match="valid: auto, percentile, bca, t, studentized"):
        ReportConfig(ci="normal")  # type: ignore[arg-type]
    parser = cli.add_arguments(argparse.ArgumentParser())
    assert parser.parse_args(["root", "--ci", "studentized"]).ci == "studentized"
    assert parser.parse_args(["root"]).ci == "auto"


def test_pair_of_algorithms_two_prompts_apart_on_every_seed_is_not_a_verdict():
    # the embedded leaderboard's sp3o vs clip_cov: 2 of 200 test prompts apart on each of 3 seeds
    x = pd.Series([0.485, 0.47, 0.455], index=["seed:0", "seed:1", "seed:2"]) * 100
    y = pd.Series([0.475, 0.46, 0.445], index=["seed:0", "seed:1", "seed:2"]) * 100
    pair = tables.pair_data(x, y)
    assert pair.shared == 3 and pair.pairing == "paired over 3 seed(s)"
    assert pair.diff == pytest.approx(1.0) and pair.p() == pytest.approx(0.25)
    # the one rule has no zero-spread special case: 3 seeds are below the floor at any level < 0.25
    assert pair.mdd(0.05) == np.inf and pair.seeds_needed(1.0, 0.05) == 6
    assert pair.interval(0.95).low == -np.inf and stats.holm([pair.p(), 0.5])[0] > 0.05


def test_planned_comparisons_are_one_holm_family_with_direction_and_non_triviality():
    import dataclasses

    base = [0.45, 0.46, 0.44, 0.45, 0.46, 0.44, 0.45, 0.45]
    scored = _scored({"dr_grpo": [0.78, 0.77, 0.79, 0.78, 0.80, 0.77, 0.79, 0.78],
                      "grpo": [0.75, 0.74, 0.76, 0.75, 0.76, 0.73, 0.75, 0.74],
                      "flat": [0.45, 0.47, 0.44, 0.44, 0.46, 0.45, 0.44, 0.46]}, base)
    cfg = dataclasses.replace(CFG, comparisons=(("dr_grpo", "grpo", "greater", 0.02),
                                                ("grpo", "dr_grpo", "greater", 0.02),
                                                ("flat", "base", "two-sided", 0.03)))
    t = tables.planned_table(scored, cfg).set_index("comparison")
    assert list(t.index) == ["dr_grpo > grpo", "grpo > dr_grpo", "flat ≠ base"]
    # dr_grpo - grpo is +0.03 to +0.04 on all 8 seeds: one-sided sign-flip p = 1 / 2^8; Holm over 3
    win = t.loc["dr_grpo > grpo"]
    assert win["p_value"] == pytest.approx(1 / 256) and win["p_holm"] == pytest.approx(3 / 256)
    assert win["verdict"] == "dr_grpo > grpo" and win["holm_ci_high"] == np.inf and win["holm_ci_low"] > 0
    assert win["non_trivial"] and win["a_gain_low"] > 0 and win["b_gain_low"] > 0
    # the opposite direction: the one-sided test does not reject what points the other way
    lose = t.loc["grpo > dr_grpo"]
    assert lose["p_value"] == pytest.approx(1.0) and lose["verdict"] == tables.NOT_DISTINGUISHABLE
    # an arm that does not learn makes its comparisons trivial
    flat = t.loc["flat ≠ base"]
    assert not flat["non_trivial"] and flat["verdict"] == tables.NOT_DISTINGUISHABLE
    assert bool(win["resolves_smallest"]) == (win["mdd"] <= 0.02)
    assert t["seeds_needed"].ge(5).all()


def test_a_spec_s_comparisons_reach_the_report_config(tmp_path):
    import argparse

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntasks: [arith]\nalgorithms: [grpo, dr_grpo]\nseeds: 3\nbudget: {samples: 64}\n"
                    "comparisons: [{a: dr_grpo, b: grpo, direction: greater, smallest_effect: 0.03}]\n")
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args([str(tmp_path), "--comparisons", str(spec)])
    assert cli.config_from_args(args).comparisons == (("dr_grpo", "grpo", "greater", 0.03),)
    (tmp_path / "study.json").write_text('{"comparisons": [{"a": "x", "b": "base"}]}')
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args([str(tmp_path)])
    assert cli.config_from_args(args).comparisons == (("x", "base", "two-sided", 0.0),)
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args([str(tmp_path), "--comparisons", "nope.yaml"])
    with pytest.raises(ReportError, match="no such file"):
        cli.config_from_args(args)


def test_randomization_p_monte_carlo_beyond_the_exact_limit_agrees_with_scipy():
    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 1.0, 20)  # 2^20 sign flips > RANDOMIZATION_EXACT_MAX: Monte Carlo
    ref = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=20000, random_state=0)
    assert stats.randomization_p([d]) == pytest.approx(ref.pvalue, abs=0.01)
    x, y = rng.normal(0.5, 1.0, 12), rng.normal(0.0, 1.0, 12)  # C(24, 12) splits: Monte Carlo
    ref = scipy.stats.permutation_test((x, y), lambda a, b: np.mean(a) - np.mean(b), permutation_type="independent",
                                       n_resamples=20000, random_state=0)
    assert stats.randomization_p([x], [y]) == pytest.approx(ref.pvalue, abs=0.02)


def test_probability_of_improvement_counts_through_ranks_beyond_the_pairwise_size(monkeypatch):
    """Issue 38 §2.7: 1,500 seeds a cell made a (reps × n × k) array of 33.5 GiB. Past
    ``PAIRWISE_MAX`` the statistic is counted from mid-ranks (Mann-Whitney): the same value, ties
    as 1/2, in (reps × (n + k)) memory."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 4, (6, 25)).astype(float)  # ties on purpose
    b = rng.integers(0, 4, (6, 31)).astype(float)
    pairwise = stats._poi([a, a[:, :5]], [b, b[:, :7]])
    monkeypatch.setattr(stats_aggregates, "PAIRWISE_MAX", 0)  # the module whose _poi reads it
    np.testing.assert_array_equal(stats._poi([a, a[:, :5]], [b, b[:, :7]]), pairwise)
    monkeypatch.undo()
    x, y = rng.normal(size=(1500, 1)), rng.normal(size=(1500, 1))
    ci = stats.poi_interval(x, y, reps=200)  # 200 x 1500 x 1500 pairs would be 450M comparisons
    assert 0.45 < ci.point < 0.55 and ci.low < ci.point < ci.high
