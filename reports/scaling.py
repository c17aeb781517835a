"""ScaleRL-style compute-scaling fits (reports/METRICS.md §4.6; arXiv 2510.13786).

    R(C) - R0 = (A - R0) / (1 + (C_mid / C)^B)

fitted to the val score against compute C (default `budget/flops`) per (task, algorithm),
pooling the eval points of all seeds. R0 is fixed to the mean step-0 score of the cell
(else the mean first eval). A is the asymptote, B the scaling exponent (efficiency) and
C_mid the compute at half the gain. CIs come from a bootstrap over seeds (resample runs,
pool their points, refit). `holdout_rmse` fits on the first 60% of the compute range and
measures the error on the rest, as an extrapolation check. Failed fits are reported in the
`status` column, never raised.

Early compute: like ScaleRL (Khatri et al. 2025), which leaves the noisy first ~1.5k
GPU-hours of a ~100k GPU-hour run out of its fits, each run's points below
`scaling_skip_frac` (default 0.015 = 1.5k / 100k) of its final compute are dropped; the
step-0 eval (compute 0) only sets R0.

Bounds: A is constrained to [R0, A_max]. A_max is the metric's maximum (`metric_max`: 1.0
for the accuracies and pass rates the trainer logs); for a metric of unknown range it is
R0 + 2 x (best observed score - R0), i.e. at most twice the largest observed gain (a
documented choice, stated in the `A_max` column). B is kept in [1e-3, 100] and C_mid within
5 compute ranges (in log) of the data; a fit pinned at a B or C_mid bound is degenerate.

Reliability (`status`): "ok" only when the fit is well posed; otherwise
"no reliable fit: <why>", for: fewer than `MIN_POINTS` distinct compute values or
`MIN_TOTAL` points (3 parameters need more); no convergence (or a degenerate fit); A pinned
at a bound (the data say nothing about the ceiling, or show no gain over R0); fewer than
half the bootstrap refits converging; the A interval wider than the observed score range,
or the C_mid interval wider (in log) than the observed compute range. With a single seed
there is no interval ("ok (single seed: no CI)").
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from rlsuite.reports.config import ReportConfig
from rlsuite.reports.scores import Scored

SCALING_COLUMNS = ("task", "algorithm", "x", "n_seeds", "n_points", "R0", "A_max", "A", "A_ci_low",
                   "A_ci_high", "B", "B_ci_low", "B_ci_high", "C_mid", "C_mid_ci_low", "C_mid_ci_high",
                   "rmse", "holdout_rmse", "boot_ok", "status")
COLUMNS_TEXT = (
    "R0 = mean step-0 (base) score; A = asymptote, bounded to [R0, A_max] (A_max = the metric's "
    "maximum, 1 for accuracies and pass rates; else R0 + 2 x the best observed gain); B = scaling exponent; "
    "C_mid = compute at half the gain; *_ci_low/*_ci_high = bootstrap interval over seeds (runs resampled, "
    "refitted; boot_ok = refits that converged); rmse = fit error; holdout_rmse = error on the last 40% of "
    "compute of a fit to the first 60%. status: `ok`, or `no reliable fit: <why>` (too few points, no "
    "convergence, A pinned at a bound, or an interval wider than the observed range; values there in raw "
    "metric units); do not read A, B, C_mid of such a row.")
HOLDOUT_FRAC = 0.6
MIN_POINTS = 4
"""Distinct compute values needed for a fit (3 free parameters + 1 degree of freedom)."""
MIN_TOTAL = 6
"""Eval points (all seeds pooled) needed for a fit: 2 per free parameter."""
B_BOUNDS = (1e-3, 100.0)
NO_FIT = "no reliable fit"
BOUNDED_METRICS = re.compile(r"greedy_acc|(avg|pass|maj)@\d+")
"""Eval metrics in [0, 1] (suite/evaluate.py: accuracies and pass rates)."""


def metric_max(metric: str) -> float | None:
    """The largest value `metric` can take (1.0 for accuracies/pass rates), None if unknown."""
    return 1.0 if BOUNDED_METRICS.fullmatch(str(metric)) else None


def sigmoid(c: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B). Shapes: c (N,) -> (N,)."""
    z = b * (np.log(c_mid) - np.log(np.asarray(c, dtype=float)))
    return r0 + (a - r0) / (1.0 + np.exp(np.clip(z, -60.0, 60.0)))


def fit_sigmoid(c: np.ndarray, y: np.ndarray, r0: float, p0: tuple | None = None,
                a_max: float = np.inf) -> tuple[float, float, float]:
    """Bounded least-squares fit of (A, B, C_mid) with R0 fixed; raises RuntimeError/ValueError
    on failure or a degenerate fit (B or C_mid pinned at its bound).

    Fitted as (A, log B, log C_mid) against log C with an analytic Jacobian, A in [r0, a_max]
    (a_max > r0), B in `B_BOUNDS` and log C_mid within 5 data ranges (+5) of the data:
    Levenberg-Marquardt first (fast, for hundreds of bootstrap refits), and trust-region
    reflective least squares with the bounds when its optimum lies outside them.
    Shapes: c, y (N,), c > 0.
    """
    logc = np.log(np.asarray(c, dtype=float))
    y = np.asarray(y, dtype=float)
    if not a_max > r0:
        raise ValueError(f"empty range for A: [{r0:g}, {a_max:g}]")
    span = float(logc.max() - logc.min())
    lo = np.array([r0, np.log(B_BOUNDS[0]), logc.min() - 5 * span - 5])
    hi = np.array([a_max, np.log(B_BOUNDS[1]), logc.max() + 5 * span + 5])

    def parts(lc, log_b, log_mid):
        z = np.clip(np.exp(log_b) * (log_mid - lc), -60.0, 60.0)
        return z, 1.0 / (1.0 + np.exp(z))

    def f(lc, a, log_b, log_mid):
        return r0 + (a - r0) * parts(lc, log_b, log_mid)[1]

    def jac(lc, a, log_b, log_mid):
        z, sig = parts(lc, log_b, log_mid)
        d = -(a - r0) * sig * (1.0 - sig)  # d f / d z
        return np.stack([sig, d * z, d * np.exp(log_b)], axis=1)

    start = np.array((float(np.max(y)), 0.0, float(np.median(logc))) if p0 is None else
                     (p0[0], float(np.log(p0[1])), float(np.log(p0[2]))))
    width = np.where(np.isfinite(hi - lo), hi - lo, np.abs(start) + 1.0)
    start = np.clip(start, lo + 1e-3 * width, np.where(np.isfinite(hi), hi - 1e-3 * width, np.inf))
    with warnings.catch_warnings():
        warnings.simplefilter("error", OptimizeWarning)
        try:  # fast path: an unconstrained (Levenberg-Marquardt) optimum inside the bounds is the answer
            popt, _ = curve_fit(f, logc, y, p0=start, jac=jac, method="lm", maxfev=2000)
            inside = bool(np.all(np.isfinite(popt)) and np.all(popt >= lo) and np.all(popt <= hi))
        except (RuntimeError, ValueError, OptimizeWarning):
            inside = False
        if not inside:
            popt, _ = curve_fit(f, logc, y, p0=start, jac=jac, bounds=(lo, hi), method="trf", max_nfev=2000)
    a, log_b, log_mid = (float(v) for v in popt)
    edge = 1e-6 * np.where(np.isfinite(width), width, 1.0)
    if not np.isfinite(a) or min(log_b - lo[1], hi[1] - log_b) < edge[1] or \
            min(log_mid - lo[2], hi[2] - log_mid) < edge[2]:
        raise RuntimeError(f"degenerate fit (A={a:.3g}, B={np.exp(log_b):.3g}, log C_mid={log_mid:.3g})")
    return a, float(np.exp(log_b)), float(np.exp(log_mid))


def a_bounds(metric: str, r0: float, y: np.ndarray) -> tuple[float, float]:
    """[R0, A_max] for the asymptote: A_max = the metric's maximum, else R0 + 2 x best gain."""
    top = metric_max(metric)
    if top is not None:
        return r0, float(top)
    return r0, float(r0 + 2 * (np.nanmax(y) - r0))


def _points(ev: pd.DataFrame, x: str, skip_frac: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """run_id -> (C, score) of its val evals with C > 0, minus the first `skip_frac` of its range."""
    out = {}
    for rid, g in ev.groupby("run_id", sort=False):
        c, y = g[x].to_numpy(dtype=float), g["value"].to_numpy(dtype=float)
        keep = np.isfinite(c) & np.isfinite(y) & (c > 0)
        if keep.any():
            keep &= c >= skip_frac * c[keep].max()
        if keep.any():
            out[rid] = (c[keep], y[keep])
    return out


def _r0(scored: Scored, run_ids: list[str], ev: pd.DataFrame) -> float:
    base = scored.base.loc[scored.base["run_id"].isin(run_ids), "score"]
    if len(base):
        return float(base.mean())
    first = ev[ev["run_id"].isin(run_ids)].sort_values("step").groupby("run_id")["value"].first()
    return float(first.mean())


def _boot(pts: dict, r0: float, p0: tuple, a_max: float, cfg: ReportConfig) -> np.ndarray:
    """(ok_reps, 3) bootstrap fits of (A, B, C_mid) over resampled runs."""
    ids = list(pts)
    rng = np.random.default_rng(cfg.seed)
    fits = []
    for _ in range(cfg.scaling_reps):
        pick = [ids[i] for i in rng.integers(0, len(ids), len(ids))]
        c = np.concatenate([pts[i][0] for i in pick])
        y = np.concatenate([pts[i][1] for i in pick])
        if np.unique(c).size < MIN_POINTS:
            continue
        try:
            fits.append(fit_sigmoid(c, y, r0, p0, a_max))
        except (RuntimeError, ValueError, OptimizeWarning):
            continue
    return np.array(fits).reshape(-1, 3)


def _holdout(c: np.ndarray, y: np.ndarray, r0: float, p0: tuple, a_max: float) -> float:
    cut = HOLDOUT_FRAC * c.max()
    early, late = c <= cut, c > cut
    if np.unique(c[early]).size < MIN_POINTS or not late.any():
        return float("nan")
    try:
        a, b, m = fit_sigmoid(c[early], y[early], r0, p0, a_max)
    except (RuntimeError, ValueError, OptimizeWarning):
        return float("nan")
    return float(np.sqrt(np.mean((sigmoid(c[late], r0, a, b, m) - y[late]) ** 2)))


def unreliable(row: dict, c: np.ndarray, y: np.ndarray, reps: int) -> str | None:
    """Why a converged fit is not reliable (see the module docstring), or None."""
    r0, a, a_max = row["R0"], row["A"], row["A_max"]
    tol = 1e-4 * (a_max - r0)
    if a >= a_max - tol:
        return f"A pinned at its upper bound {a_max:.3g} (no saturation in the observed range)"
    if a <= r0 + tol:
        return "A pinned at R0 (no gain over the base score)"
    if row["n_seeds"] < 2:
        return None
    if row["boot_ok"] < reps / 2:
        return f"only {row['boot_ok']}/{reps} bootstrap refits converged"
    y_range = float(np.ptp(np.append(y, r0)))
    if row["A_ci_high"] - row["A_ci_low"] > y_range:
        return (f"A interval [{row['A_ci_low']:.3g}, {row['A_ci_high']:.3g}] wider than the observed score "
                f"range {y_range:.3g}")
    if np.log(row["C_mid_ci_high"] / row["C_mid_ci_low"]) > np.log(c.max() / c.min()):
        return (f"C_mid interval [{row['C_mid_ci_low']:.3g}, {row['C_mid_ci_high']:.3g}] wider than the "
                f"observed compute range [{c.min():.3g}, {c.max():.3g}]")
    return None


def fit_cell(scored: Scored, run_ids: list[str], cfg: ReportConfig) -> dict:
    """Fit one (task, algorithm) cell; returns a row of `SCALING_COLUMNS` (minus task/algorithm)."""
    ev = scored.metric_evals
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(run_ids)]
    row: dict = {"x": cfg.scaling_x, "n_seeds": len(run_ids), "n_points": 0, "boot_ok": 0}
    if cfg.scaling_x not in ev:
        return {**row, "status": f"{NO_FIT}: no {cfg.scaling_x} column in evals"}
    pts = _points(ev, cfg.scaling_x, cfg.scaling_skip_frac)
    c = np.concatenate([p[0] for p in pts.values()]) if pts else np.array([])
    y = np.concatenate([p[1] for p in pts.values()]) if pts else np.array([])
    row["n_points"] = int(c.size)
    if np.unique(c).size < MIN_POINTS or c.size < MIN_TOTAL:
        return {**row, "status": f"{NO_FIT}: too few points with finite {cfg.scaling_x} > 0 ({c.size} points, "
                                 f"{np.unique(c).size} distinct; {MIN_TOTAL} points and {MIN_POINTS} distinct "
                                 "needed)"}
    r0 = _r0(scored, run_ids, ev)
    lo, a_max = a_bounds(cfg.metric, r0, y)
    row.update(R0=r0, A_max=a_max)
    if not a_max > lo:
        return {**row, "status": f"{NO_FIT}: no gain over the base score R0 = {r0:.3g}"}
    try:
        a, b, m = fit_sigmoid(c, y, r0, a_max=a_max)
    except (RuntimeError, ValueError, OptimizeWarning) as exc:
        return {**row, "status": f"{NO_FIT}: no convergence or a degenerate fit ({str(exc)[:80]})"}
    boot = _boot(pts, r0, (a, b, m), a_max, cfg) if len(pts) > 1 else np.empty((0, 3))
    alpha = 100 * (1 - cfg.confidence) / 2
    ci = np.percentile(boot, [alpha, 100 - alpha], axis=0) if len(boot) else np.full((2, 3), np.nan)
    rmse = float(np.sqrt(np.mean((sigmoid(c, r0, a, b, m) - y) ** 2)))
    row.update(A=a, A_ci_low=ci[0, 0], A_ci_high=ci[1, 0], B=b, B_ci_low=ci[0, 1], B_ci_high=ci[1, 1],
               C_mid=m, C_mid_ci_low=ci[0, 2], C_mid_ci_high=ci[1, 2], rmse=rmse,
               holdout_rmse=_holdout(c, y, r0, (a, b, m), a_max), boot_ok=len(boot))
    why = unreliable(row, c, y, cfg.scaling_reps)
    status = f"{NO_FIT}: {why}" if why else ("ok" if len(pts) > 1 else "ok (single seed: no CI)")
    return {**row, "status": status}


def scaling_table(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """Sigmoid fits per (task, algorithm). Columns: `SCALING_COLUMNS`."""
    rows = []
    for (task, alg), g in scored.scores.groupby(["task", "algorithm"], sort=True):
        rows.append({"task": task, "algorithm": alg, **fit_cell(scored, g["run_id"].tolist(), cfg)})
    return pd.DataFrame(rows, columns=list(SCALING_COLUMNS))
