"""Reporting statistics as pure functions (reports/METRICS.md §4; rliable conventions).

Data convention (rliable, Agarwal et al. 2021, arXiv 2108.13264): one array per
algorithm, `scores: (R, T)` = runs (seeds) x tasks. Ragged data (a task with fewer
seeds) is NaN-padded; NaN means "no run", so every function works on the finite
entries of each task column. Aggregates weight tasks equally and follow rliable 1.2.0's
`rliable/metrics.py` definitions (mean of per-task means; IQM of all run x task scores
pooled; median over tasks of the per-task mean; optimality gap over all scores).

- `bootstrap_ci`: one sample's mean (or IQM) with a percentile or BCa bootstrap CI
  (scipy.stats.bootstrap), a Student-t CI, or a studentized (bootstrap-t) CI; `auto` picks
  the method per n from the measured coverage table `CELL_COVERAGE`.
- `stratified_interval`: aggregates across tasks (mean, IQM, median, optimality gap) with
  a stratified bootstrap (runs resampled within each task; §4.3): percentile, Student-t with
  Welch-Satterthwaite df (mean only) or studentized bootstrap; `auto` uses `AGGREGATE_COVERAGE`.
- `probability_of_improvement` / `poi_interval`: P(X > Y) as a normalised Mann-Whitney U
  per task averaged over tasks, CI from independent stratified bootstraps (§4.4).
- `performance_profile` / `profile_interval`: F(tau) = fraction of scores > tau (§4.4).
- `paired_difference`: mean of x - y over shared seeds, stratified paired bootstrap (or t);
  `interaction_contrast` builds the 2x2 contrast per seed and does the same.
- `t_test`, `holm`, `holm_levels`, `minimum_detectable_difference`, `seeds_needed`: the
  tests behind the report's verdicts and the power of each comparison.

All intervals are `Interval(point, low, high)`. A single observation gives a NaN CI
(there is nothing to resample; the table shows "n/a"); identical observations give a
zero-width CI. Percentile/BCa bootstrap CIs over 3-5 seeds under-cover (`CELL_COVERAGE`,
measured by benchmarks/report_scale.py, results in `COVERAGE_FILE`).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, NamedTuple

import numpy as np

Columns = list[np.ndarray]
"""Per-task samples: column j has shape (..., n_j) (a leading reps axis when resampled)."""
Aggregate = Callable[[Columns], np.ndarray]

CIMethod = Literal["auto", "percentile", "bca", "t", "studentized"]
CI_METHODS = ("percentile", "bca", "t", "studentized")
"""Interval methods of a mean over seeds; `auto` (the report default) picks one per n."""
CI_CHOICES = ("auto", *CI_METHODS)
CI_NAMES = {"percentile": "percentile bootstrap", "bca": "BCa bootstrap", "t": "Student-t",
            "studentized": "studentized (bootstrap-t) bootstrap"}


class Interval(NamedTuple):
    """A point estimate with its confidence interval (low <= point <= high, usually)."""

    point: float
    low: float
    high: float


def _sps():
    """``scipy.stats``, imported on first use (it costs ~1.3 s, and ``rlsuite run`` imports this module)."""
    import scipy.stats

    return scipy.stats


NAN_INTERVAL = Interval(float("nan"), float("nan"), float("nan"))


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float).ravel()
    return x[np.isfinite(x)]


def iqm(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Interquartile mean: mean of the middle 50% (25% trimmed from each end, rliable).

    Shapes: x any; reduces `axis` (None = all values). NaNs must be removed beforehand.
    """
    return _sps().trim_mean(x, proportiontocut=0.25, axis=axis)


COVERAGE_FILE = "benchmarks/results/report_coverage.md"
"""Where `CELL_COVERAGE` and `AGGREGATE_COVERAGE` were measured (benchmarks/report_scale.py)."""
COVERAGE_DISTS = ("normal", "Beta(2, 8)", "collapse mixture")
"""Score distributions of the coverage study, in the order of each coverage tuple."""


class CoverageTable(NamedTuple):
    """Measured coverage of nominal 95% intervals: rows[n][method] = (normal, Beta(2, 8),
    collapse mixture), each from `draws` simulated samples of n seeds (per task)."""

    draws: int
    rows: dict[int, dict[str, tuple[float, float, float]]]


# Data copied from the committed run in benchmarks/results/report_coverage.md (written by
# `python benchmarks/report_scale.py --part coverage` on AMD EPYC, 2 shared CPUs: 2000 samples per
# one-sample cell, 500 per aggregate cell); copy the new numbers here when it is rerun.
CELL_COVERAGE = CoverageTable(2000, {
    2: {
        "percentile": (0.5055, 0.502, 0.352),
        "bca": (0.5055, 0.502, 0.352),
        "t": (0.953, 0.9345, 0.9125),
        "studentized": (0.0, 0.0, 0.0),
    },
    3: {
        "percentile": (0.755, 0.728, 0.542),
        "bca": (0.7205, 0.7085, 0.5165),
        "t": (0.9495, 0.9345, 0.8605),
        "studentized": (0.811, 0.806, 0.651),
    },
    5: {
        "percentile": (0.846, 0.821, 0.5625),
        "bca": (0.843, 0.833, 0.574),
        "t": (0.9515, 0.938, 0.7535),
        "studentized": (0.9465, 0.9505, 0.791),
    },
    10: {
        "percentile": (0.9035, 0.894, 0.6715),
        "bca": (0.901, 0.901, 0.666),
        "t": (0.952, 0.948, 0.713),
        "studentized": (0.9515, 0.963, 0.725),
    },
    20: {
        "percentile": (0.912, 0.929, 0.8605),
        "bca": (0.913, 0.9325, 0.8525),
        "t": (0.9395, 0.9535, 0.868),
        "studentized": (0.9385, 0.9535, 0.8595),
    },
})
"""One sample's mean over n seeds (a leaderboard cell; a per-task paired difference)."""
AGGREGATE_COVERAGE: dict[str, dict[int, CoverageTable]] = {
    "mean": {
        2: CoverageTable(500, {
            2: {
                "percentile": (0.682, 0.65, 0.448),
                "t": (0.974, 0.966, 0.908),
                "studentized": (0.832, 0.828, 0.656),
            },
            3: {
                "percentile": (0.782, 0.8, 0.518),
                "t": (0.968, 0.94, 0.784),
                "studentized": (0.958, 0.964, 0.83),
            },
            5: {
                "percentile": (0.884, 0.888, 0.67),
                "t": (0.958, 0.958, 0.726),
                "studentized": (0.948, 0.966, 0.762),
            },
            10: {
                "percentile": (0.93, 0.932, 0.888),
                "t": (0.96, 0.956, 0.9),
                "studentized": (0.95, 0.968, 0.898),
            },
            20: {
                "percentile": (0.922, 0.936, 0.908),
                "t": (0.95, 0.942, 0.926),
                "studentized": (0.934, 0.946, 0.956),
            },
        }),
        5: CoverageTable(500, {
            2: {
                "percentile": (0.762, 0.778, 0.616),
                "t": (0.982, 0.984, 0.842),
                "studentized": (0.988, 0.994, 0.892),
            },
            3: {
                "percentile": (0.838, 0.864, 0.742),
                "t": (0.962, 0.962, 0.786),
                "studentized": (0.968, 0.97, 0.802),
            },
            5: {
                "percentile": (0.896, 0.898, 0.868),
                "t": (0.966, 0.952, 0.914),
                "studentized": (0.956, 0.958, 0.914),
            },
            10: {
                "percentile": (0.928, 0.948, 0.936),
                "t": (0.946, 0.96, 0.944),
                "studentized": (0.946, 0.968, 0.966),
            },
            20: {
                "percentile": (0.946, 0.92, 0.954),
                "t": (0.956, 0.938, 0.96),
                "studentized": (0.956, 0.938, 0.98),
            },
        }),
    },
    "iqm": {
        2: CoverageTable(500, {
            2: {
                "percentile": (0.682, 0.67, 0.616),
                "t": (0.49, 0.43, 0.174),
                "studentized": (0.0, 0.0, 0.0),
            },
            3: {
                "percentile": (0.828, 0.852, 0.802),
                "t": (0.938, 0.94, 0.94),
                "studentized": (0.918, 0.932, 0.91),
            },
            5: {
                "percentile": (0.904, 0.922, 0.882),
                "t": (0.944, 0.956, 0.924),
                "studentized": (0.95, 0.968, 0.946),
            },
            10: {
                "percentile": (0.922, 0.944, 0.882),
                "t": (0.936, 0.956, 0.918),
                "studentized": (0.95, 0.972, 0.934),
            },
            20: {
                "percentile": (0.944, 0.95, 0.92),
                "t": (0.954, 0.944, 0.948),
                "studentized": (0.958, 0.954, 0.926),
            },
        }),
        5: CoverageTable(500, {
            2: {
                "percentile": (0.752, 0.758, 0.612),
                "t": (0.992, 0.994, 0.98),
                "studentized": (0.964, 0.966, 0.934),
            },
            3: {
                "percentile": (0.844, 0.862, 0.718),
                "t": (0.986, 0.98, 0.936),
                "studentized": (0.968, 0.968, 0.908),
            },
            5: {
                "percentile": (0.894, 0.924, 0.82),
                "t": (0.964, 0.966, 0.884),
                "studentized": (0.964, 0.962, 0.872),
            },
            10: {
                "percentile": (0.928, 0.94, 0.888),
                "t": (0.958, 0.964, 0.908),
                "studentized": (0.95, 0.97, 0.914),
            },
            20: {
                "percentile": (0.942, 0.938, 0.944),
                "t": (0.958, 0.948, 0.958),
                "studentized": (0.952, 0.95, 0.97),
            },
        }),
    },
}
"""Stratified aggregates, name -> number of tasks -> table (n = seeds per task); methods
percentile, t (Welch-Satterthwaite for the mean, Tukey-McLaughlin for the IQM), studentized."""
PREFERENCE = ("t", "studentized", "percentile", "bca")
"""Tie order of `choose_method` (simplest first)."""


def aggregate_coverage_table(name: str, n_tasks: int) -> CoverageTable | None:
    """The measured table for a stratified `name` over n_tasks tasks: one task's mean is the
    one-sample table; else the largest measured task count <= n_tasks (or the smallest)."""
    if name == "mean" and n_tasks == 1:
        return CELL_COVERAGE
    by_tasks = AGGREGATE_COVERAGE.get(name, {})
    if not by_tasks:
        return None
    use = max([t for t in by_tasks if t <= n_tasks], default=min(by_tasks))
    return by_tasks[use]


def coverage_row(n: int, table: CoverageTable) -> tuple[int, dict[str, tuple[float, float, float]]]:
    """The measured row for n seeds: the largest measured n' <= n (the smallest row below it)."""
    measured = sorted(table.rows)
    if not measured:
        raise ValueError("empty coverage table")
    use = max([m for m in measured if m <= n], default=measured[0])
    return use, table.rows[use]


def choose_method(n: int, table: CoverageTable | None = None, candidates: Iterable[str] = CI_METHODS,
                  nominal: float = 0.95) -> str:
    """The method with the best worst-case measured coverage at n seeds.

    Score = min over the distributions of min(coverage, nominal) (over-coverage earns no
    credit). Methods within two Monte Carlo standard errors of the best score,
    2 sqrt(b (1 - b) / draws), are tied and `PREFERENCE` decides (simplest first).
    """
    table = CELL_COVERAGE if table is None else table
    _, row = coverage_row(n, table)
    scores = {m: min(min(c, nominal) for c in row[m]) for m in candidates if m in row}
    if not scores:
        raise ValueError(f"no measured coverage for methods {list(candidates)}")
    best = max(scores.values())
    tie = 2 * math.sqrt(best * (1 - best) / table.draws)
    return next(m for m in PREFERENCE if m in scores and scores[m] >= best - tie - 1e-12)


def resolve_method(method: str, n: int, table: CoverageTable | None = None,
                   candidates: Iterable[str] = CI_METHODS) -> str:
    """`method`, or for `auto` the measured choice at n seeds (`choose_method`)."""
    if method not in CI_CHOICES:
        raise ValueError(f"unknown CI method {method!r}; valid: {', '.join(CI_CHOICES)}")
    return choose_method(max(n, 2), table, candidates) if method == "auto" else method


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _measured(m: str, group: list[int], table: CoverageTable | None, where: str = "") -> list[str]:
    out = []
    for r in sorted({coverage_row(n, table)[0] for n in group}) if table else []:
        vals = table.rows[r].get(m)
        if vals is None:
            continue
        text = ", ".join(f"{_pct(v)} {d}" for v, d in zip(vals, COVERAGE_DISTS, strict=True))
        low = [d for v, d in zip(vals, COVERAGE_DISTS, strict=True) if v < 0.94]
        under = f"; under-covers on {', '.join(low)}" if low else ""
        out.append(f"measured coverage at n = {r}{where}: {text}{under}")
    return out


def coverage_note(method: str, ns: Iterable[int], table: CoverageTable | None = None,
                  candidates: Iterable[str] = CI_METHODS, confidence: float = 0.95, unit: str = "seeds") -> str:
    """Footer text: the method used at each n present, with its measured coverage.

    E.g. "95% intervals: Student-t (n = 3 seeds; measured coverage at n = 3: 95.0% normal,
    93.5% Beta(2, 8), 86.1% collapse mixture; under-covers on Beta(2, 8), collapse mixture);
    benchmarks/results/report_coverage.md." ("under-covers": below 94%).
    """
    table = CELL_COVERAGE if table is None else table
    candidates = tuple(candidates)
    by_method: dict[str, list[int]] = {}
    for n in sorted({int(n) for n in ns if n >= 2}):
        by_method.setdefault(resolve_method(method, n, table, candidates), []).append(n)
    if not by_method:
        return f"{confidence:.0%} intervals: none (no cell has two {unit})."
    parts = []
    for m, group in by_method.items():
        cov = _measured(m, group, table)
        parts.append(f"{CI_NAMES[m]} (n = {', '.join(map(str, group))} {unit}" + "".join(f"; {c}" for c in cov) + ")")
    head = f"{confidence:.0%} intervals" + (" (auto: best measured coverage per n)" if method == "auto" else "")
    note = "" if abs(confidence - 0.95) < 1e-9 else " (coverage measured at nominal 95%)"
    return f"{head}: " + "; ".join(parts) + f"{note}; {COVERAGE_FILE}."


def _under_coverage_note() -> str:
    pct = {n: row["percentile"][0] for n, row in sorted(CELL_COVERAGE.rows.items()) if "percentile" in row}
    shown = ", ".join(f"{_pct(v)} at n = {n}" for n, v in pct.items() if n in (3, 5, 10))
    return ("Percentile-bootstrap CIs over few seeds under-cover (nominal 95% covered the mean of normal "
            f"scores {shown or 'less than 95%'}; {COVERAGE_FILE}); `auto` picks the method with the best "
            "measured coverage per n.")


UNDER_COVERAGE_NOTE = _under_coverage_note()
"""Caveat for bootstrap intervals; the report footers print `coverage_note` instead."""


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


# --- tests, multiplicity and power ----------------------------------------------------

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
