"""Hypothesis tests behind the report's verdicts: the t-test of a (stratified) mean or mean
difference, the randomization test it falls back to at zero spread, and Holm's multiplicity
correction (adjusted p-values and the per-comparison levels of adjusted intervals).

(These are statistical tests; the suite's unit tests of them are ``tests/reports/``. The
report's small-sample rule, a randomization test for every comparison, is ``reports/smallsample.py``.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rlsuite.reports.stats.aggregates import agg_mean
from rlsuite.reports.stats.base import Columns, Interval, _sps
from rlsuite.reports.stats.intervals import satterthwaite, variance_terms


class TTest(NamedTuple):
    """A t-test of a (stratified) mean or mean difference: estimate, SE, df, two-sided p."""

    diff: float
    se: float
    df: float
    p: float


def t_test(xcols: Columns, ycols: Columns | None = None) -> TTest:
    """t-test of mean_j(x_j) [- mean_j(y_j)] = 0 with Welch-Satterthwaite df.

    Paired: pass the per-seed differences as `xcols` (one task: the paired t-test, df n - 1).
    Unpaired: `ycols` too (one task: Welch's test). Columns with one run add no variance.
    No replicated column -> NaN se/df/p. Zero spread (every column constant): t is undefined
    (t = diff / 0), so p comes from the exact randomization test instead (`randomization_p`:
    sign flips of the paired differences, or relabellings of the pooled runs), which needs no
    variance estimate: identical non-zero differences on 3 seeds give p = 2/2^3 = 0.25, not 0;
    df is NaN and se 0. No difference at all -> p = 1.
    """
    if not xcols or (ycols is not None and not ycols):
        return TTest(float("nan"), float("nan"), float("nan"), float("nan"))
    diff = float(agg_mean(xcols) - (agg_mean(ycols) if ycols else 0.0))
    terms = variance_terms(xcols, ycols)
    if not terms:
        return TTest(diff, float("nan"), float("nan"), float("nan"))
    var, df = satterthwaite(terms)
    if var == 0:
        return TTest(diff, 0.0, float("nan"), randomization_p(xcols, ycols) if diff != 0 else 1.0)
    se = math.sqrt(var)
    return TTest(diff, se, df, float(2 * _sps().t.sf(abs(diff) / se, df)))


RANDOMIZATION_EXACT_MAX = 65536
"""Largest number of sign flips / relabellings `randomization_p` enumerates; above it, Monte Carlo."""
RANDOMIZATION_DRAWS = 20000


def randomization_p(xcols: Columns, ycols: Columns | None = None, *, seed: int = 0) -> float:
    """Two-sided randomization p-value of mean_j(x_j) [- mean_j(y_j)] = 0.

    Paired (`ycols` None): the columns hold per-seed differences; under H0 each one's sign is
    exchangeable, so the null distribution is the statistic over all 2^N sign flips (N runs in
    all). Unpaired: within each column (task) the pooled x and y runs are exchangeable, so the
    null distribution is over every split of each column's pool into n_j and m_j runs. p is the
    share of the null statistics at least as far from 0 as the observed one (the observed is one
    of them, so p >= 1 / #null). Exact up to `RANDOMIZATION_EXACT_MAX` arrangements; beyond, a
    Monte Carlo estimate (1 + k) / (1 + B) from `RANDOMIZATION_DRAWS` draws with `seed`.
    Hand example: x = [0.01, 0.01, 0.01] (paired): 8 flips, 2 reach |0.01| -> p = 0.25.
    """
    obs = abs(float(agg_mean(xcols) - (agg_mean(ycols) if ycols else 0.0)))
    rng = np.random.default_rng(seed)
    if ycols is None:
        vals = np.concatenate(xcols)
        # each run's weight in the mean of the column means
        w = np.concatenate([np.full(c.size, 1.0 / (len(xcols) * c.size)) for c in xcols])
        n = vals.size
        exact = 2**n <= RANDOMIZATION_EXACT_MAX
        signs = (1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) if exact
                 else rng.choice([-1.0, 1.0], size=(RANDOMIZATION_DRAWS, n)))
        null = np.abs(signs @ (w * vals))
    else:
        if len(xcols) != len(ycols):
            raise ValueError(f"randomization_p: {len(xcols)} x columns vs {len(ycols)} y columns; they must match")
        exact = math.prod(math.comb(x.size + y.size, x.size) for x, y in zip(xcols, ycols)) <= RANDOMIZATION_EXACT_MAX
        per_col = []  # per column: the x-part mean minus the y-part mean of each split of its pool
        for x, y in zip(xcols, ycols):
            pool = np.concatenate([x, y])
            idx = (np.array(list(itertools.combinations(range(pool.size), x.size)), dtype=int) if exact
                   else np.argsort(rng.random((RANDOMIZATION_DRAWS, pool.size)), axis=1)[:, :x.size])
            xs = pool[idx].sum(axis=1)
            per_col.append(xs / x.size - (pool.sum() - xs) / y.size)
        # exact: every combination of the columns' splits; Monte Carlo: the columns' draws side by side
        null = np.abs(np.mean([g.ravel() for g in np.meshgrid(*per_col, indexing="ij")] if exact else per_col, axis=0))
    k = int(np.sum(null >= obs - 1e-12 * max(1.0, obs)))
    return k / null.size if exact else (1 + k) / (1 + null.size)


def t_test_interval(t: TTest, confidence: float) -> Interval:
    """diff +- t_{(1+confidence)/2, df} se; NaN when untestable, and NaN when the spread is zero
    but the difference is not (a t interval needs a spread: `t_test` then tests by
    randomization, which gives a p-value but no interval). Zero difference with zero spread:
    zero width at 0."""
    if not math.isfinite(t.se):
        return Interval(t.diff, float("nan"), float("nan"))
    if t.se == 0:
        return Interval(t.diff, t.diff, t.diff) if t.diff == 0 else Interval(t.diff, float("nan"), float("nan"))
    half = float(_sps().t.ppf((1 + confidence) / 2, t.df)) * t.se
    return Interval(t.diff, t.diff - half, t.diff + half)


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values: sorted p_(i) * (m - i + 1), running max, capped at 1.

    NaN p-values (untestable comparisons) stay NaN and do not count in m.
    """
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    m = len(order)
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


def holm_levels(p: Sequence[float], alpha: float) -> np.ndarray:
    """Per-comparison level at which Holm tests each hypothesis (for adjusted intervals).

    The i-th smallest p is tested at alpha / (m - i + 1) while Holm keeps rejecting; from
    the first non-rejection on, every remaining one at that step's level. So the t-interval
    at level 1 - a_i excludes 0 exactly when Holm rejects (`holm(p) <= alpha`).
    """
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    m = len(order)
    level = alpha / m if m else alpha
    stopped = False
    for i, k in enumerate(order):
        if not stopped:
            level = alpha / (m - i)
            stopped = p[k] > level
        out[k] = level
    return out
