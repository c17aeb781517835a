"""ScaleRL-style compute-scaling fits (metrics-and-eval.md §4.6; arXiv 2510.13786).

    R(C) - R0 = (A - R0) / (1 + (C_mid / C)^B)

fitted to the val score against compute C (default `budget/flops`) per (task, algorithm),
pooling the eval points of all seeds. R0 is fixed to the mean step-0 score of the cell
(else the mean first eval). A is the asymptote, B the scaling exponent (efficiency) and
C_mid the compute at half the gain. CIs come from a bootstrap over seeds (resample runs,
pool their points, refit). `holdout_rmse` fits on the first 60% of the compute range and
measures the error on the rest, as an extrapolation check. Failed fits are reported in the
`status` column, never raised.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from reports.config import ReportConfig
from reports.scores import Scored

SCALING_COLUMNS = ("task", "algorithm", "x", "n_seeds", "n_points", "R0", "A", "A_ci_low", "A_ci_high",
                   "B", "B_ci_low", "B_ci_high", "C_mid", "C_mid_ci_low", "C_mid_ci_high", "rmse",
                   "holdout_rmse", "boot_ok", "status")
HOLDOUT_FRAC = 0.6


def sigmoid(c: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B). Shapes: c (N,) -> (N,)."""
    z = b * (np.log(c_mid) - np.log(np.asarray(c, dtype=float)))
    return r0 + (a - r0) / (1.0 + np.exp(np.clip(z, -60.0, 60.0)))


def fit_sigmoid(c: np.ndarray, y: np.ndarray, r0: float, p0: tuple | None = None) -> tuple[float, float, float]:
    """Least-squares fit of (A, B, C_mid) with R0 fixed; raises RuntimeError/ValueError on failure.

    Fitted as (A, log B, log C_mid) against log C with Levenberg-Marquardt (MINPACK) and an
    analytic Jacobian: unconstrained, so B > 0 and C_mid > 0 hold by construction, and fast
    enough for hundreds of bootstrap refits. Shapes: c, y (N,), c > 0.
    """
    logc = np.log(np.asarray(c, dtype=float))
    y = np.asarray(y, dtype=float)

    def parts(lc, a, log_b, log_mid):
        z = np.clip(np.exp(min(log_b, 20.0)) * (log_mid - lc), -60.0, 60.0)
        return z, 1.0 / (1.0 + np.exp(z))

    def f(lc, a, log_b, log_mid):
        return r0 + (a - r0) * parts(lc, a, log_b, log_mid)[1]

    def jac(lc, a, log_b, log_mid):
        z, sig = parts(lc, a, log_b, log_mid)
        d = -(a - r0) * sig * (1.0 - sig)  # d f / d z
        return np.stack([sig, d * z, d * np.exp(min(log_b, 20.0))], axis=1)

    p0 = (float(np.max(y)), 0.0, float(np.median(logc))) if p0 is None else \
        (p0[0], float(np.log(p0[1])), float(np.log(p0[2])))
    with warnings.catch_warnings():
        warnings.simplefilter("error", OptimizeWarning)
        popt, _ = curve_fit(f, logc, y, p0=p0, jac=jac, method="lm", maxfev=2000)
    a, b, log_mid = float(popt[0]), float(np.exp(popt[1])), float(popt[2])
    span = logc.max() - logc.min()
    if not (np.isfinite(a) and 1e-3 < b < 100 and logc.min() - 5 * span - 5 < log_mid < logc.max() + 5 * span + 5):
        raise RuntimeError(f"degenerate fit (A={a:.3g}, B={b:.3g}, log C_mid={log_mid:.3g})")
    return a, b, float(np.exp(log_mid))


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


def _boot(pts: dict, r0: float, p0: tuple, cfg: ReportConfig) -> np.ndarray:
    """(ok_reps, 3) bootstrap fits of (A, B, C_mid) over resampled runs."""
    ids = list(pts)
    rng = np.random.default_rng(cfg.seed)
    fits = []
    for _ in range(cfg.scaling_reps):
        pick = [ids[i] for i in rng.integers(0, len(ids), len(ids))]
        c = np.concatenate([pts[i][0] for i in pick])
        y = np.concatenate([pts[i][1] for i in pick])
        try:
            fits.append(fit_sigmoid(c, y, r0, p0))
        except (RuntimeError, ValueError, OptimizeWarning):
            continue
    return np.array(fits).reshape(-1, 3)


def _holdout(c: np.ndarray, y: np.ndarray, r0: float, p0: tuple) -> float:
    cut = HOLDOUT_FRAC * c.max()
    early, late = c <= cut, c > cut
    if early.sum() < 4 or not late.any():
        return float("nan")
    try:
        a, b, m = fit_sigmoid(c[early], y[early], r0, p0)
    except (RuntimeError, ValueError, OptimizeWarning):
        return float("nan")
    return float(np.sqrt(np.mean((sigmoid(c[late], r0, a, b, m) - y[late]) ** 2)))


def fit_cell(scored: Scored, run_ids: list[str], cfg: ReportConfig) -> dict:
    """Fit one (task, algorithm) cell; returns a row of `SCALING_COLUMNS` (minus task/algorithm)."""
    ev = scored.metric_evals
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(run_ids)]
    row: dict = {"x": cfg.scaling_x, "n_seeds": len(run_ids), "n_points": 0, "boot_ok": 0}
    if cfg.scaling_x not in ev:
        return {**row, "status": f"no {cfg.scaling_x} column in evals"}
    pts = _points(ev, cfg.scaling_x, cfg.scaling_skip_frac)
    c = np.concatenate([p[0] for p in pts.values()]) if pts else np.array([])
    y = np.concatenate([p[1] for p in pts.values()]) if pts else np.array([])
    row["n_points"] = int(c.size)
    if c.size < 4 or np.unique(c).size < 3:
        return {**row, "status": f"too few points with finite {cfg.scaling_x} > 0 ({c.size})"}
    r0 = _r0(scored, run_ids, ev)
    try:
        a, b, m = fit_sigmoid(c, y, r0)
    except (RuntimeError, ValueError, OptimizeWarning) as exc:
        return {**row, "R0": r0, "status": f"fit failed: {str(exc)[:80]}"}
    boot = _boot(pts, r0, (a, b, m), cfg) if len(pts) > 1 else np.empty((0, 3))
    alpha = 100 * (1 - cfg.confidence) / 2
    ci = np.percentile(boot, [alpha, 100 - alpha], axis=0) if len(boot) else np.full((2, 3), np.nan)
    rmse = float(np.sqrt(np.mean((sigmoid(c, r0, a, b, m) - y) ** 2)))
    return {**row, "R0": r0, "A": a, "A_ci_low": ci[0, 0], "A_ci_high": ci[1, 0], "B": b,
            "B_ci_low": ci[0, 1], "B_ci_high": ci[1, 1], "C_mid": m, "C_mid_ci_low": ci[0, 2],
            "C_mid_ci_high": ci[1, 2], "rmse": rmse, "holdout_rmse": _holdout(c, y, r0, (a, b, m)),
            "boot_ok": len(boot), "status": "ok" if len(pts) > 1 else "ok (single seed: no CI)"}


def scaling_table(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """Sigmoid fits per (task, algorithm). Columns: `SCALING_COLUMNS`."""
    rows = []
    for (task, alg), g in scored.scores.groupby(["task", "algorithm"], sort=True):
        rows.append({"task": task, "algorithm": alg, **fit_cell(scored, g["run_id"].tolist(), cfg)})
    return pd.DataFrame(rows, columns=list(SCALING_COLUMNS))
