"""Statistics: bootstrap CIs, coverage, scipy agreement, IQM, P(improvement), profiles, pairs.

Run: python -m pytest tests/reports/test_reports_stats.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reports import stats

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
