"""Aggregates over (runs x tasks) and the stratified bootstrap (reports/METRICS.md §4.3-§4.4).

Point estimates of one algorithm's scores as rliable 1.2.0 defines them (`rliable/metrics.py`):
mean of per-task means, IQM of all run x task scores pooled, median over tasks of the per-task
mean, optimality gap over all scores (`AGGREGATES`); the stratified resampler (runs resampled
within each task, `resample_columns`) with its percentile interval; probability of improvement
(a normalised Mann-Whitney U per task, task mean) and performance profiles, with their
stratified-bootstrap intervals. The t and studentized intervals of the aggregates are in
``intervals.py``.
"""

from __future__ import annotations

import numpy as np

from rlsuite.reports.stats.base import NAN_INTERVAL, Aggregate, Columns, Interval, _sps


def iqm(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Interquartile mean: mean of the middle 50% (25% trimmed from each end, rliable).

    Shapes: x any; reduces `axis` (None = all values). NaNs must be removed beforehand.
    """
    return _sps().trim_mean(x, proportiontocut=0.25, axis=axis)


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
    """Median over tasks of the per-task mean over runs (rliable's `aggregate_median`)."""
    return np.median(np.stack([c.mean(axis=-1) for c in cols], axis=0), axis=0)


def agg_pooled_median(cols: Columns) -> np.ndarray:
    """Median of all (run x task) scores pooled (not rliable's median; see `agg_median`)."""
    return np.median(np.concatenate(cols, axis=-1), axis=-1)


def agg_optimality_gap(cols: Columns, gamma: float = 1.0) -> np.ndarray:
    """Mean of max(gamma - x, 0) over all scores (gamma = 1 for normalised scores)."""
    return np.mean(np.maximum(gamma - np.concatenate(cols, axis=-1), 0.0), axis=-1)


AGGREGATES: dict[str, Aggregate] = {
    "mean": agg_mean, "iqm": agg_iqm, "median": agg_median, "pooled_median": agg_pooled_median,
    "optimality_gap": agg_optimality_gap,
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


PAIRWISE_MAX = 50_000_000
"""Largest (replicates × n × k) comparison array :func:`_poi` builds; beyond it (1,500 seeds a cell
would need 33.5 GiB) it counts through ranks in (replicates × (n + k)) memory: the same statistic."""


def _poi(xcols: Columns, ycols: Columns) -> np.ndarray:
    """Mean over tasks of P(x > y) + P(x = y)/2. Shapes: (..., n_j), (..., k_j) -> (...)."""
    from scipy.stats import rankdata

    per_task = []
    for a, b in zip(xcols, ycols, strict=False):
        n, k = a.shape[-1], b.shape[-1]
        if np.prod(np.broadcast_shapes(a.shape[:-1], b.shape[:-1]), dtype=float) * n * k <= PAIRWISE_MAX:
            per_task.append(((a[..., :, None] > b[..., None, :]) + 0.5 * (a[..., :, None] == b[..., None, :]))
                            .mean(axis=(-2, -1)))
            continue
        # Mann-Whitney: with mid-ranks of the pooled runs, U = (rank sum of x) − n(n+1)/2 counts ties as 1/2
        lead = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
        both = np.concatenate([np.broadcast_to(a, lead + (n,)), np.broadcast_to(b, lead + (k,))], axis=-1)
        ranks = rankdata(both, axis=-1)
        per_task.append((ranks[..., :n].sum(axis=-1) - n * (n + 1) / 2) / (n * k))
    return np.mean(per_task, axis=0)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) (reports/METRICS.md §4.4): normalised Mann-Whitney U per task, task mean.

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
