"""Confidence intervals: percentile and BCa bootstrap, Student-t, studentized (bootstrap-t).

`bootstrap_ci`: one sample's mean (or IQM); `stratified_interval`: the aggregates across tasks
(runs resampled within each task; Welch-Satterthwaite t for the mean, Tukey-McLaughlin t for the
IQM); `paired_difference` / `unpaired_difference` / `interaction_contrast`: differences between
arms; `two_level_interval`: seeds and problems resampled. `auto` picks the method per n from the
measured coverage (``coverage.py``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np

from rlsuite.reports.stats.aggregates import (AGGREGATES, _aligned, _interval, agg_mean, columns, iqm,
                                              resample_columns)
from rlsuite.reports.stats.base import NAN_INTERVAL, CIMethod, CI_NAMES, Columns, Interval, _finite, _sps
from rlsuite.reports.stats.coverage import (AGGREGATE_COVERAGE, CELL_COVERAGE, COVERAGE_FILE, _measured,
                                            aggregate_coverage_table, resolve_method)


def bootstrap_ci(
    x: np.ndarray,
    *,
    statistic: Literal["mean", "iqm"] = "mean",
    reps: int = 2000,
    method: CIMethod = "percentile",
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Statistic of one sample with a confidence interval.

    Args:
        x: (n,) observations (e.g. one score per seed); non-finite values are dropped.
        statistic: `mean` or `iqm` (`t` and `studentized` are for the mean only).
        reps: bootstrap resamples.
        method: `percentile` or `bca` (_sps().bootstrap; BCa falls back to percentile
            when it is undefined), `t` (Student-t), `studentized` (bootstrap-t), or `auto`
            (`choose_method(n)`: the best measured coverage at this n, `CELL_COVERAGE`).
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
    method = resolve_method(method, x.size)
    if method in ("t", "studentized"):
        if statistic != "mean":
            raise ValueError(f"CI method {method!r} is for the mean only, not {statistic!r}")
        if method == "t":
            return t_interval(x, confidence)
        rng = np.random.default_rng(seed)
        return _studentized(point, [x], "mean", resample_columns([x], reps, rng), confidence)
    ci = _scipy_ci(x, fn, reps, method, confidence, seed)
    if method == "bca" and not np.all(np.isfinite(ci)):
        ci = _scipy_ci(x, fn, reps, "percentile", confidence, seed)
    return Interval(point, float(ci[0]), float(ci[1]))


def t_interval(x: np.ndarray, confidence: float = 0.95) -> Interval:
    """Student-t interval of the mean: mean +- t_{(1+confidence)/2, n-1} * sd / sqrt(n).

    Shapes: x (n,), non-finite dropped. n = 1 -> NaN CI; sd = 0 -> zero width.
    """
    x = _finite(x)
    if x.size == 0:
        return NAN_INTERVAL
    return _t_from(float(x.mean()), variance_terms([x]), confidence)


def _scipy_ci(x: np.ndarray, fn: Callable, reps: int, method: str, confidence: float,
              seed: int) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa's DegenerateDataWarning: handled by the fallback
        res = _sps().bootstrap(
            (x,), lambda a, axis: fn(a, axis=axis), n_resamples=reps, vectorized=True,
            method="BCa" if method == "bca" else "percentile", confidence_level=confidence,
            rng=np.random.default_rng(seed),
        )
    return res.confidence_interval.low, res.confidence_interval.high


# --- t and studentized (bootstrap-t) intervals of stratified means ---------------------


CONSTANT_RTOL = 1e-9
"""Values within this relative distance of a column's first value count as identical: scores
differenced in float (48.5 − 47.5 and 47.0 − 46.0 as percentages of 200 prompts) differ in the
last bits, and a "spread" of 1e-15 would make t = diff / se enormous."""


def _constant(c: np.ndarray) -> np.ndarray:
    """Per leading index: all values of the column identical up to float rounding
    (|c - c_0| <= CONSTANT_RTOL * max(1, |c|))."""
    scale = np.maximum(1.0, np.max(np.abs(c), axis=-1, keepdims=True))
    return np.all(np.abs(c - c[..., :1]) <= CONSTANT_RTOL * scale, axis=-1)


def _var_terms(cols: Columns, weight: float) -> list[tuple[np.ndarray, int]]:
    """(w^2 s_j^2 / n_j, n_j - 1) per column with n_j >= 2; exactly 0 for constant columns."""
    return [(np.where(_constant(c), 0.0, weight**2 * c.var(axis=-1, ddof=1) / c.shape[-1]), c.shape[-1] - 1)
            for c in cols if c.shape[-1] > 1]


def variance_terms(xcols: Columns, ycols: Columns | None = None) -> list[tuple[np.ndarray, int]]:
    """(w_j^2 s_j^2 / n_j, n_j - 1) per column of the estimator mean_j(x_j) [- mean_j(y_j)]
    (columns independent, w_j = 1/T); columns with one run add nothing."""
    terms = _var_terms(xcols, 1 / len(xcols))
    return terms + (_var_terms(ycols, 1 / len(ycols)) if ycols else [])


def satterthwaite(terms: Sequence[tuple[float, int]]) -> tuple[float, float]:
    """(variance, Welch-Satterthwaite df) of a sum of independent variance terms v_i with df_i.

    df = (sum v_i)^2 / sum(v_i^2 / df_i); one term gives its own df. Zero variance -> df NaN.
    """
    var = float(sum(float(v) for v, _ in terms))
    if var <= 0:
        return 0.0, float("nan")
    return var, var**2 / sum(float(v) ** 2 / d for v, d in terms)


def _t_from(point: float, terms: Sequence[tuple[float, int]], confidence: float) -> Interval:
    if not terms:
        return Interval(point, float("nan"), float("nan"))
    var, df = satterthwaite(terms)
    if var == 0:
        return Interval(point, point, point)
    half = float(_sps().t.ppf((1 + confidence) / 2, df)) * math.sqrt(var)
    return Interval(point, point - half, point + half)


def _iqm_se(cols: Columns) -> np.ndarray:
    """Stratified Tukey-McLaughlin SE of the pooled IQM: the scores winsorized at the kept
    window of scipy's trim_mean (g = int(0.25 N) from each end, h = N - 2g kept), then
    var = sum_j n_j s_w,j^2 / h^2 (s_w,j: within-task variance of the winsorized scores; a
    task with one run adds 0). One task: the textbook s_w / ((1 - 2 * 0.25) sqrt(n)).
    Shapes: cols[j] (..., n_j) -> (...)."""
    x = np.concatenate(cols, axis=-1)
    big_n = x.shape[-1]
    g = int(0.25 * big_n)
    h = big_n - 2 * g
    xs = np.sort(x, axis=-1)
    w = np.clip(x, xs[..., g:g + 1], xs[..., big_n - g - 1:big_n - g])
    var = np.zeros(x.shape[:-1])
    start = 0
    for c in cols:
        n = c.shape[-1]
        if n >= 2:
            wj = w[..., start:start + n]
            var = var + np.where(_constant(wj), 0.0, n * wj.var(axis=-1, ddof=1))
        start += n
    return np.sqrt(var) / h


def _iqm_t(point: float, cols: Columns, confidence: float) -> Interval:
    """Tukey-McLaughlin (Yuen) t interval of the pooled IQM: point +- t_df `_iqm_se`, df =
    Satterthwaite over the tasks' winsorized variances, scaled by (h - 1)/(N - 1) (one task:
    h - 1, h = scores kept by the trimming, as Yuen's)."""
    se = float(_iqm_se(cols))
    big_n = sum(c.size for c in cols)
    h = big_n - 2 * int(0.25 * big_n)
    if se == 0:
        return Interval(point, point, point)
    x = np.sort(np.concatenate(cols))
    g = int(0.25 * big_n)
    terms = [(c.size * np.clip(c, x[g], x[big_n - g - 1]).var(ddof=1) / h**2, c.size - 1)
             for c in cols if c.size > 1]
    _, df = satterthwaite(terms)
    df = df * (h - 1) / (big_n - 1) if math.isfinite(df) else h - 1
    half = float(_sps().t.ppf((1 + confidence) / 2, max(df, 1.0))) * se
    return Interval(point, point - half, point + half)


def _se(cols: Columns, name: str, ycols: Columns | None = None) -> np.ndarray:
    """Standard error of an aggregate: analytic for `mean`, stratified Tukey-McLaughlin for `iqm`."""
    if name == "mean":
        terms = variance_terms(cols, ycols)
        return np.sqrt(sum(v for v, _ in terms)) if terms else np.zeros(cols[0].shape[:-1])
    if ycols:
        raise ValueError("a difference of two samples is supported for the mean only")
    if name != "iqm":
        raise ValueError(f"no standard error for aggregate {name!r} (mean and iqm only)")
    return _iqm_se(cols)


def _studentized(point: float, cols: Columns, name: str, boot: Columns, confidence: float,
                 ycols: Columns | None = None, yboot: Columns | None = None) -> Interval:
    """Bootstrap-t: CI = [point - q_hi se, point - q_lo se], q = quantiles of
    t* = (theta* - point) / se*. Resamples with zero spread (se* = 0) are dropped."""
    se0 = float(_se(cols, name, ycols))
    if se0 == 0:
        return Interval(point, point, point)
    fn = AGGREGATES[name]
    theta = fn(boot) - (fn(yboot) if yboot else 0.0)
    se = _se(boot, name, yboot)
    ok = se > 1e-9 * se0  # zero spread (exactly, or up to rounding): t* undefined, dropped
    if not ok.any():
        return Interval(point, float("nan"), float("nan"))
    tstar = (theta[ok] - point) / se[ok]
    a = (1 - confidence) / 2
    q_lo, q_hi = np.quantile(tstar, [a, 1 - a])
    return Interval(point, point - float(q_hi) * se0, point - float(q_lo) * se0)


STRATIFIED_METHODS = ("percentile", "t", "studentized")
"""Methods of the stratified intervals (BCa is not stratified here: `bca` gives percentile)."""


def stratified_method(method: str, name: str, n_tasks: int, n_min: int) -> str:
    """The method a stratified interval of aggregate `name` uses for the configured `method`.

    `t`: Welch-Satterthwaite for the mean, Tukey-McLaughlin for the IQM; the median and
    optimality gap (points only in the tables) and `bca` get percentile. `auto`: the measured
    choice (`aggregate_coverage_table(name, n_tasks)`) at the smallest number of runs of a
    task (`n_min`).
    """
    if name not in ("mean", "iqm"):
        return "percentile"
    if method == "auto":
        table = aggregate_coverage_table(name, n_tasks)
        return resolve_method("auto", n_min, table, STRATIFIED_METHODS) if table else "percentile"
    return method if method in ("t", "studentized") else "percentile"


def aggregate_coverage_note(method: str, ns: Iterable[int], n_tasks: int, confidence: float = 0.95) -> str:
    """Footer text of the stratified intervals: per aggregate (mean, IQM), the method used at
    each smallest-runs-per-task n present, with its measured coverage."""
    parts = []
    for name in ("mean", "iqm"):
        table = aggregate_coverage_table(name, n_tasks)
        where = "" if table is CELL_COVERAGE or table is None else \
            f" over {next(t for t, v in AGGREGATE_COVERAGE[name].items() if v is table)} tasks"
        by: dict[str, list[int]] = {}
        for n in sorted({int(n) for n in ns if n >= 2}):
            by.setdefault(stratified_method(method, name, n_tasks, n), []).append(n)
        for m, group in by.items():
            cov = _measured(m, group, table, where)
            label = {("mean", "t"): "Welch-Satterthwaite t" if n_tasks > 1 else CI_NAMES["t"],
                     ("iqm", "t"): "Tukey-McLaughlin t"}.get((name, m), CI_NAMES[m])
            parts.append(f"{name}: {label} (n = {', '.join(map(str, group))} runs per task"
                         + "".join(f"; {c}" for c in cov) + ")")
    if not parts:
        return f"{confidence:.0%} intervals: none (no task has two runs)."
    note = "" if abs(confidence - 0.95) < 1e-9 else " (coverage measured at nominal 95%)"
    return f"{confidence:.0%} intervals, stratified over tasks: " + "; ".join(parts) + f"{note}; {COVERAGE_FILE}."


def stratified_interval(
    scores: np.ndarray,
    aggregates: Sequence[str] = ("mean", "iqm"),
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    method: CIMethod = "percentile",
) -> dict[str, Interval]:
    """Aggregates of one algorithm's scores with stratified-bootstrap (or t) CIs.

    All aggregates share one bootstrap (as rliable's `get_interval_estimates` with a
    `func` returning several metrics); `stratified_method` says which method each gets.

    Args:
        scores: (R, T) runs x tasks, NaN = missing run.
        aggregates: names in `AGGREGATES`.
        method: as `bootstrap_ci`'s (`auto`, percentile, bca, t, studentized).

    Returns:
        name -> Interval; NaN CIs when no task has two runs, all NaN when no scores.
    """
    cols = columns(scores)
    if not cols:
        return {name: NAN_INTERVAL for name in aggregates}
    n_min = min(c.size for c in cols)
    methods = {name: stratified_method(method, name, len(cols), n_min) for name in aggregates}
    rng = np.random.default_rng(seed)
    boot = resample_columns(cols, reps, rng) if set(methods.values()) - {"t"} else cols
    replicated = any(c.size > 1 for c in cols)
    out = {}
    for name in aggregates:
        point = float(AGGREGATES[name](cols))
        m = methods[name]
        if not replicated or m == "percentile":
            out[name] = _interval(point, AGGREGATES[name](boot), confidence, replicated)
        elif m == "t" and name == "iqm":
            out[name] = _iqm_t(point, cols, confidence)
        elif m == "t":
            out[name] = _t_from(point, variance_terms(cols), confidence)
        else:
            out[name] = _studentized(point, cols, name, boot, confidence)
    return out


# --- paired differences and interactions ----------------------------------------------



def paired_difference(x: np.ndarray, y: np.ndarray, *, reps: int = 2000, confidence: float = 0.95,
                      seed: int = 0, method: CIMethod = "percentile") -> tuple[Interval, int]:
    """Mean of x - y over shared seeds, with a stratified paired CI (`difference_interval`).

    Rows of x and y are the same seeds (paired); a pair counts when both are finite.
    The point is the task mean of per-task mean differences.

    Shapes: x, y (S, T). Returns (Interval, number of pairs).
    """
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    y = np.asarray(y, dtype=float).reshape(len(y), -1)
    if x.shape != y.shape:
        raise ValueError(f"paired inputs need the same shape: {x.shape} vs {y.shape}")
    return difference_interval(x - y, reps=reps, confidence=confidence, seed=seed, method=method)


def difference_interval(d: np.ndarray, *, reps: int = 2000, confidence: float = 0.95,
                        seed: int = 0, method: CIMethod = "percentile") -> tuple[Interval, int]:
    """Mean of per-seed differences d (S, T) with a CI over seeds.

    One task: `bootstrap_ci(method)` of the differences (percentile keeps the stratified
    resampler). Several: the stratified mean's CI (`stratified_method(method, "mean")`).
    """
    cols = columns(d)
    n = int(sum(c.size for c in cols))
    if not cols:
        return NAN_INTERVAL, 0
    point = float(agg_mean(cols))
    if all(np.all(c == c[0]) for c in cols) and n > 1:
        return Interval(point, point, point), n
    if method != "percentile" and len(cols) == 1:
        return bootstrap_ci(cols[0], reps=reps, method=method, confidence=confidence, seed=seed), n
    if method != "percentile":
        return stratified_interval(d, ("mean",), reps=reps, confidence=confidence, seed=seed,
                                   method=method)["mean"], n
    boot = agg_mean(resample_columns(cols, reps, np.random.default_rng(seed)))
    return _interval(point, boot, confidence, any(c.size > 1 for c in cols)), n


def unpaired_difference(x: np.ndarray, y: np.ndarray, *, reps: int = 2000,
                        confidence: float = 0.95, seed: int = 0, method: CIMethod = "percentile") -> Interval:
    """Difference of task-mean means, x - y, with independent stratified bootstraps (or Welch t).

    For arms that share no seeds. `t`: Welch-Satterthwaite; `studentized`: bootstrap-t with
    the analytic SE; `bca` gives percentile; `auto` picks among these by the smallest n.
    Shapes: x (N, T), y (K, T).
    """
    xcols, ycols = _aligned(x, y)
    if not xcols:
        return NAN_INTERVAL
    point = float(agg_mean(xcols) - agg_mean(ycols))
    replicated = any(a.size > 1 or b.size > 1 for a, b in zip(xcols, ycols, strict=False))
    if method == "auto":
        method = stratified_method("auto", "mean", len(xcols), min(c.size for c in xcols + ycols))
    rng = np.random.default_rng(seed)
    if method == "t" and replicated:
        return _t_from(point, variance_terms(xcols, ycols), confidence)
    xb, yb = resample_columns(xcols, reps, rng), resample_columns(ycols, reps, rng)
    if method == "studentized" and replicated:
        return _studentized(point, xcols, "mean", xb, confidence, ycols, yb)
    return _interval(point, agg_mean(xb) - agg_mean(yb), confidence, replicated)


def interaction_contrast(y00: np.ndarray, y10: np.ndarray, y01: np.ndarray, y11: np.ndarray, *,
                         reps: int = 2000, confidence: float = 0.95, seed: int = 0,
                         method: CIMethod = "percentile") -> tuple[Interval, int]:
    """2x2 interaction (y11 - y01) - (y10 - y00) per shared seed, with a paired CI.

    y_ab is the score with factor A at level a and factor B at level b; rows are shared
    seeds. Positive = the two changes help more together than the sum of their parts.
    Shapes: each (S, T). Returns (Interval, number of complete seed quadruples).
    """
    arrays = [np.asarray(a, dtype=float).reshape(len(a), -1) for a in (y00, y10, y01, y11)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"the four arms need the same shape: {[a.shape for a in arrays]}")
    a00, a10, a01, a11 = arrays
    return difference_interval((a11 - a01) - (a10 - a00), reps=reps, confidence=confidence, seed=seed,
                               method=method)


# --- seeds and problems ---------------------------------------------------------------



def two_level_interval(m: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0,
                       problems: bool = True) -> Interval:
    """Percentile bootstrap interval of the mean of ``m: (runs, problems)`` (one run's per-problem
    scores a row, the same problems in every row) resampling runs (seeds) and, with ``problems``,
    the problems as well (one draw of problems shared by every run of a replicate: the test set is
    common to the runs, so its sampling noise is too). ``problems=False`` resamples seeds only
    (inference conditional on this test set). NaN interval for fewer than 1 run or problem."""
    m = np.asarray(m, dtype=float)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        return NAN_INTERVAL
    rng = np.random.default_rng(seed)
    r, p = m.shape
    out = np.empty(reps)
    for b in range(reps):
        rows = rng.integers(r, size=r)
        sub = m[rows]
        out[b] = sub[:, rng.integers(p, size=p)].mean() if problems else sub.mean()
    lo, hi = np.quantile(out, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(float(m.mean()), float(lo), float(hi))
