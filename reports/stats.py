"""Reporting statistics as pure functions (metrics-and-eval.md §4; rliable conventions).

Data convention (rliable, Agarwal et al. 2021, arXiv 2108.13264): one array per
algorithm, `scores: (R, T)` = runs (seeds) x tasks. Ragged data (a task with fewer
seeds) is NaN-padded; NaN means "no run", so every function works on the finite
entries of each task column. Aggregates weight tasks equally.

- `bootstrap_ci`: one sample's statistic with a percentile or BCa CI (scipy.stats.bootstrap).
- `stratified_interval`: aggregates across tasks (mean, IQM, median, optimality gap) with
  a stratified bootstrap (runs resampled within each task; §4.3).
- `probability_of_improvement` / `poi_interval`: P(X > Y) as a normalised Mann-Whitney U
  per task averaged over tasks, CI from independent stratified bootstraps (§4.4).
- `performance_profile` / `profile_interval`: F(tau) = fraction of scores > tau (§4.4).
- `paired_difference`: mean of x - y over shared seeds, stratified paired bootstrap;
  `interaction_contrast` builds the 2x2 contrast per seed and does the same.

All intervals are `Interval(point, low, high)`. A single observation gives a NaN CI
(there is nothing to resample; the table shows "n/a"); identical observations give a
zero-width CI. Bootstrap CIs over 3-5 seeds under-cover (see `UNDER_COVERAGE_NOTE`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

import numpy as np
import scipy.stats

Columns = list[np.ndarray]
"""Per-task samples: column j has shape (..., n_j) (a leading reps axis when resampled)."""
Aggregate = Callable[[Columns], np.ndarray]

UNDER_COVERAGE_NOTE = (
    "Bootstrap CIs over few seeds under-cover: a nominal 95% CI of a mean covered the true "
    "mean in 75% of cases at n=3 seeds, 83% at n=5, 90% at n=10 and 92% at n=20 (percentile; "
    "BCa 72/84/90/92%; 10,000 normal samples each, benchmarks/report_scale.py)."
)
"""Caveat printed under every table; figures re-measured by benchmarks/report_scale.py."""


class Interval(NamedTuple):
    """A point estimate with its confidence interval (low <= point <= high, usually)."""

    point: float
    low: float
    high: float


NAN_INTERVAL = Interval(float("nan"), float("nan"), float("nan"))


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float).ravel()
    return x[np.isfinite(x)]


def iqm(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Interquartile mean: mean of the middle 50% (25% trimmed from each end, rliable).

    Shapes: x any; reduces `axis` (None = all values). NaNs must be removed beforehand.
    """
    return scipy.stats.trim_mean(x, proportiontocut=0.25, axis=axis)


def bootstrap_ci(
    x: np.ndarray,
    *,
    statistic: Literal["mean", "iqm"] = "mean",
    reps: int = 2000,
    method: Literal["percentile", "bca"] = "percentile",
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Statistic of one sample with a bootstrap CI via `scipy.stats.bootstrap`.

    Args:
        x: (n,) observations (e.g. one score per seed); non-finite values are dropped.
        statistic: `mean` or `iqm`.
        reps: bootstrap resamples.
        method: `percentile` or `bca` (BCa falls back to percentile when it is undefined).
        confidence: interval level.
        seed: random state (fixed for reproducible tables).

    Returns:
        Interval; n = 0 -> all NaN; n = 1 -> point with NaN CI; all equal -> zero width.
    """
    x = _finite(x)
    fn = np.mean if statistic == "mean" else iqm
    if x.size == 0:
        return NAN_INTERVAL
    point = float(fn(x))
    if x.size == 1:
        return Interval(point, float("nan"), float("nan"))
    if np.all(x == x[0]):
        return Interval(point, point, point)
    ci = _scipy_ci(x, fn, reps, method, confidence, seed)
    if method == "bca" and not np.all(np.isfinite(ci)):
        ci = _scipy_ci(x, fn, reps, "percentile", confidence, seed)
    return Interval(point, float(ci[0]), float(ci[1]))


def _scipy_ci(x: np.ndarray, fn: Callable, reps: int, method: str, confidence: float,
              seed: int) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa's DegenerateDataWarning: handled by the fallback
        res = scipy.stats.bootstrap(
            (x,), lambda a, axis: fn(a, axis=axis), n_resamples=reps, vectorized=True,
            method="BCa" if method == "bca" else "percentile", confidence_level=confidence,
            rng=np.random.default_rng(seed),
        )
    return res.confidence_interval.low, res.confidence_interval.high


# --- aggregates over (runs x tasks) ---------------------------------------------------

def columns(scores: np.ndarray) -> Columns:
    """Split (R, T) scores into per-task arrays of their finite entries; empty tasks dropped."""
    scores = np.asarray(scores, dtype=float).reshape(len(scores), -1)
    cols = [c[np.isfinite(c)] for c in scores.T]
    return [c for c in cols if c.size]


def agg_mean(cols: Columns) -> np.ndarray:
    """Mean over tasks of the per-task mean (= mean of all scores when rectangular)."""
    return np.mean([c.mean(axis=-1) for c in cols], axis=0)


def agg_iqm(cols: Columns) -> np.ndarray:
    """IQM of all (run x task) scores pooled."""
    return iqm(np.concatenate(cols, axis=-1), axis=-1)


def agg_median(cols: Columns) -> np.ndarray:
    """Median of all (run x task) scores pooled."""
    return np.median(np.concatenate(cols, axis=-1), axis=-1)


def agg_optimality_gap(cols: Columns, gamma: float = 1.0) -> np.ndarray:
    """Mean of max(gamma - x, 0) over all scores (gamma = 1 for normalised scores)."""
    return np.mean(np.maximum(gamma - np.concatenate(cols, axis=-1), 0.0), axis=-1)


AGGREGATES: dict[str, Aggregate] = {
    "mean": agg_mean, "iqm": agg_iqm, "median": agg_median, "optimality_gap": agg_optimality_gap,
}


def resample_columns(cols: Columns, reps: int, rng: np.random.Generator) -> Columns:
    """Stratified bootstrap: resample each task's runs with replacement, independently.

    Shapes: cols[j] (n_j,) -> (reps, n_j).
    """
    return [c[rng.integers(0, c.size, size=(reps, c.size))] for c in cols]


def percentile_ci(dist: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of a bootstrap distribution along axis 0. Shapes: (reps, ...)."""
    alpha = 100 * (1 - confidence) / 2
    low, high = np.percentile(dist, [alpha, 100 - alpha], axis=0)
    return low, high


def _interval(point: float, dist: np.ndarray, confidence: float, replicated: bool) -> Interval:
    if not replicated:
        return Interval(float(point), float("nan"), float("nan"))
    low, high = percentile_ci(dist, confidence)
    return Interval(float(point), float(low), float(high))


def stratified_interval(
    scores: np.ndarray,
    aggregates: Sequence[str] = ("mean", "iqm"),
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """Aggregates of one algorithm's scores with stratified-bootstrap percentile CIs.

    All aggregates share one bootstrap (as rliable's `get_interval_estimates` with a
    `func` returning several metrics).

    Args:
        scores: (R, T) runs x tasks, NaN = missing run.
        aggregates: names in `AGGREGATES`.

    Returns:
        name -> Interval; NaN CIs when no task has two runs, all NaN when no scores.
    """
    cols = columns(scores)
    if not cols:
        return {name: NAN_INTERVAL for name in aggregates}
    rng = np.random.default_rng(seed)
    boot = resample_columns(cols, reps, rng)
    replicated = any(c.size > 1 for c in cols)
    return {name: _interval(AGGREGATES[name](cols), AGGREGATES[name](boot), confidence, replicated)
            for name in aggregates}


# --- probability of improvement -------------------------------------------------------

def _aligned(x: np.ndarray, y: np.ndarray) -> tuple[Columns, Columns]:
    """Per-task finite columns of x and y, keeping only tasks where both have runs."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    y = np.asarray(y, dtype=float).reshape(len(y), -1)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y need the same tasks (columns): {x.shape} vs {y.shape}")
    pairs = [(a[np.isfinite(a)], b[np.isfinite(b)]) for a, b in zip(x.T, y.T, strict=False)]
    pairs = [(a, b) for a, b in pairs if a.size and b.size]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _poi(xcols: Columns, ycols: Columns) -> np.ndarray:
    """Mean over tasks of P(x > y) + P(x = y)/2. Shapes: (..., n_j), (..., k_j) -> (...)."""
    per_task = []
    for a, b in zip(xcols, ycols, strict=False):
        a, b = a[..., :, None], b[..., None, :]
        per_task.append(((a > b) + 0.5 * (a == b)).mean(axis=(-2, -1)))
    return np.mean(per_task, axis=0)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) (metrics-and-eval.md §4.4): normalised Mann-Whitney U per task, task mean.

    Shapes: x (N, T), y (K, T) with the same task columns; NaN = missing run.
    Returns NaN when no task has runs of both.
    """
    xcols, ycols = _aligned(x, y)
    return float(_poi(xcols, ycols)) if xcols else float("nan")


def poi_interval(x: np.ndarray, y: np.ndarray, *, reps: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> Interval:
    """P(X > Y) with a CI from independent stratified bootstraps of both algorithms' runs."""
    xcols, ycols = _aligned(x, y)
    if not xcols:
        return NAN_INTERVAL
    rng = np.random.default_rng(seed)
    dist = _poi(resample_columns(xcols, reps, rng), resample_columns(ycols, reps, rng))
    replicated = any(a.size > 1 or b.size > 1 for a, b in zip(xcols, ycols, strict=False))
    return _interval(_poi(xcols, ycols), dist, confidence, replicated)


# --- performance profiles -------------------------------------------------------------

def _profile(cols: Columns, taus: np.ndarray) -> np.ndarray:
    """Mean over tasks of the fraction of runs scoring > tau. Shapes -> (..., L)."""
    return np.mean([(c[..., :, None] > taus).mean(axis=-2) for c in cols], axis=0)


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """F(tau) = fraction of (run x task) scores above tau, tasks weighted equally.

    Non-increasing in tau. Shapes: scores (R, T), taus (L,) -> (L,).
    """
    cols = columns(scores)
    taus = np.asarray(taus, dtype=float)
    return _profile(cols, taus) if cols else np.full(taus.shape, np.nan)


def profile_interval(scores: np.ndarray, taus: np.ndarray, *, reps: int = 2000,
                     confidence: float = 0.95, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Performance profile with pointwise stratified-bootstrap CIs.

    Returns (point, low, high), each (L,).
    """
    cols = columns(scores)
    taus = np.asarray(taus, dtype=float)
    if not cols:
        nan = np.full(taus.shape, np.nan)
        return nan, nan, nan
    boot = resample_columns(cols, reps, np.random.default_rng(seed))
    low, high = percentile_ci(_profile(boot, taus), confidence)
    return _profile(cols, taus), low, high


# --- paired differences and interactions ----------------------------------------------

def paired_difference(x: np.ndarray, y: np.ndarray, *, reps: int = 2000, confidence: float = 0.95,
                      seed: int = 0) -> tuple[Interval, int]:
    """Mean of x - y over shared seeds, with a stratified paired-bootstrap CI.

    Rows of x and y are the same seeds (paired); a pair counts when both are finite.
    The point is the task mean of per-task mean differences.

    Shapes: x, y (S, T). Returns (Interval, number of pairs).
    """
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    y = np.asarray(y, dtype=float).reshape(len(y), -1)
    if x.shape != y.shape:
        raise ValueError(f"paired inputs need the same shape: {x.shape} vs {y.shape}")
    return difference_interval(x - y, reps=reps, confidence=confidence, seed=seed)


def difference_interval(d: np.ndarray, *, reps: int = 2000, confidence: float = 0.95,
                        seed: int = 0) -> tuple[Interval, int]:
    """Mean of per-seed differences d (S, T) with a stratified bootstrap CI over seeds."""
    cols = columns(d)
    n = int(sum(c.size for c in cols))
    if not cols:
        return NAN_INTERVAL, 0
    point = float(agg_mean(cols))
    if all(np.all(c == c[0]) for c in cols) and n > 1:
        return Interval(point, point, point), n
    boot = agg_mean(resample_columns(cols, reps, np.random.default_rng(seed)))
    return _interval(point, boot, confidence, any(c.size > 1 for c in cols)), n


def unpaired_difference(x: np.ndarray, y: np.ndarray, *, reps: int = 2000,
                        confidence: float = 0.95, seed: int = 0) -> Interval:
    """Difference of task-mean means, x - y, with independent stratified bootstraps.

    For arms that share no seeds. Shapes: x (N, T), y (K, T).
    """
    xcols, ycols = _aligned(x, y)
    if not xcols:
        return NAN_INTERVAL
    rng = np.random.default_rng(seed)
    dist = agg_mean(resample_columns(xcols, reps, rng)) - agg_mean(resample_columns(ycols, reps, rng))
    replicated = any(a.size > 1 or b.size > 1 for a, b in zip(xcols, ycols, strict=False))
    return _interval(float(agg_mean(xcols) - agg_mean(ycols)), dist, confidence, replicated)


def interaction_contrast(y00: np.ndarray, y10: np.ndarray, y01: np.ndarray, y11: np.ndarray, *,
                         reps: int = 2000, confidence: float = 0.95, seed: int = 0
                         ) -> tuple[Interval, int]:
    """2x2 interaction (y11 - y01) - (y10 - y00) per shared seed, with a paired CI.

    y_ab is the score with factor A at level a and factor B at level b; rows are shared
    seeds. Positive = the two changes help more together than the sum of their parts.
    Shapes: each (S, T). Returns (Interval, number of complete seed quadruples).
    """
    arrays = [np.asarray(a, dtype=float).reshape(len(a), -1) for a in (y00, y10, y01, y11)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"the four arms need the same shape: {[a.shape for a in arrays]}")
    a00, a10, a01, a11 = arrays
    return difference_interval((a11 - a01) - (a10 - a00), reps=reps, confidence=confidence, seed=seed)
