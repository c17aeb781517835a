"""Power of a comparison: the minimum detectable difference (MDD) of a t-test and the seeds per
arm and task at which an observed difference would be detectable."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlsuite.reports.stats.base import _sps
from rlsuite.reports.stats.tests import TTest


def minimum_detectable_difference(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8,
                                  df: float | None = None) -> float:
    """Smallest true difference a two-sided level-alpha t-test detects with `power`.

    MDD = (t_{1-alpha/2, df} + t_{power, df}) * sd / sqrt(n), df = n - 1 by default (paired
    by seed: sd = spread of the per-seed differences, n = pairs). NaN for n < 2.
    """
    df = n - 1 if df is None else df
    if n < 2 or not df > 0 or not math.isfinite(sd):
        return float("nan")
    return _mdd_factor(alpha, power, df) * sd / math.sqrt(n)


def _mdd_factor(alpha: float, power: float, df: float) -> float:
    return float(_sps().t.ppf(1 - alpha / 2, df) + _sps().t.ppf(power, df))


def mdd_from_test(t: TTest, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDD at the observed spread of a `t_test`: (t_{1-alpha/2, df} + t_{power, df}) * se."""
    if not math.isfinite(t.se):
        return float("nan")
    if t.se == 0:  # no spread: t (and a t-sized MDD) undefined unless there is no difference at all
        return 0.0 if t.diff == 0 else float("nan")
    return _mdd_factor(alpha, power, t.df) * t.se


def seeds_needed(diff: float, terms: Sequence[tuple[float, int]], *, alpha: float = 0.05,
                 power: float = 0.8, max_n: int = 100_000) -> float:
    """Seeds per arm and task at which `diff` would be the MDD at the observed spread.

    `terms` are the variance terms (w^2 s^2 / n_obs, n_obs - 1) of `t_test`; with every n set
    to the same n, var(n) = sum(w^2 s^2) / n and df(n) = Satterthwaite. Returns the smallest
    n >= 2 with MDD(n) <= |diff|; inf when diff = 0 or beyond `max_n`. When sd = 0 the
    t-test is undefined and `t_test` tests by randomization, where n identical paired
    differences reach p = 2 / 2^n: the smallest n with 2 / 2^n <= alpha (6 at alpha 0.05).
    """
    if not terms or not math.isfinite(diff):
        return float("nan")
    unit = [(float(v) * (d + 1), d) for v, d in terms]  # w^2 s^2 of each term (v * n_obs)
    s2 = sum(u for u, _ in unit)
    if diff == 0:
        return float("inf")
    if s2 == 0:
        return float(max(2, math.ceil(math.log2(2 / alpha) - 1e-12)))
    shape = s2**2 / sum(u**2 for u, _ in unit)  # df(n) = shape * (n - 1)
    z = _sps().norm.ppf(1 - alpha / 2) + _sps().norm.ppf(power)
    n = max(2, int(z**2 * s2 / diff**2))
    while n <= max_n:
        if _mdd_factor(alpha, power, shape * (n - 1)) * math.sqrt(s2 / n) <= abs(diff):
            return float(n)
        n += 1 if n < 1000 else max(1, n // 100)
    return float("inf")
