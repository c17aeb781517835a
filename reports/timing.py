"""Time-to-target and the batch-size rule (reports/METRICS.md §4.7).

Time-to-target of a run: the first budget point (any x-axis) at which its val score,
smoothed by a trailing moving average over `smooth` evals, reaches the target. A run that
never gets there has time-to-target +inf (censored); per algorithm we report how many
runs reached it and the median with a bootstrap CI (the median stays finite while more than
half of the runs reach the target; an infinite bound reads "not reached").

Batch-size rule: for a sweep over `rollout.prompts_per_step` (a `factors` entry), compare
each batch size B with the smallest B0:
  throughput gain  g = throughput(B) / throughput(B0)           (samples per wall second)
  samples penalty  p = S(B) / S(B0)                             (samples-to-target)
  speed-up         T(B0) / T(B) ~= g / p                        (wall-seconds-to-target)
A larger batch pays off only when g > p.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlsuite.reports import stats
from rlsuite.reports.ablation import has_factor
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.load import RunSet
from rlsuite.reports.scores import Scored

BATCH_FACTOR = "rollout.prompts_per_step"


def first_reach(x: np.ndarray, y: np.ndarray, target: float, smooth: int) -> float:
    """First x where the trailing `smooth`-point mean of y is >= target; +inf if never.

    Shapes: x, y (E,) in eval order; non-finite y values are skipped.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(y)
    x, y = x[keep], y[keep]
    if not y.size:
        return float("inf")
    smoothed = pd.Series(y).rolling(smooth, min_periods=1).mean().to_numpy()
    hit = np.flatnonzero(smoothed >= target)
    return float(x[hit[0]]) if hit.size else float("inf")


def targets(scored: Scored, cfg: ReportConfig) -> dict[str, float]:
    """Per-task target: `cfg.target`, else 80% of the best algorithm's mean score."""
    if cfg.target is not None:
        return {t: cfg.target for t in scored.scores["task"].unique()}
    means = scored.scores.groupby(["task", "algorithm"])["score"].mean()
    return {t: 0.8 * float(m.max()) for t, m in means.groupby(level=0)}


def run_times(scored: Scored, cfg: ReportConfig, x: str) -> pd.DataFrame:
    """Per scored run: time-to-target on axis `x`. Columns `run_id, task, algorithm, seed, target, ttt`."""
    ev = scored.metric_evals
    if x not in ev.columns:
        valid = ", ".join(c for c in ev.columns if c.startswith(("budget/", "step")))
        raise ReportError(f"unknown x-axis {x!r}; valid: {valid}")
    val = ev[ev["split"] == "val"].sort_values(["run_id", "step"])
    by_run = dict(tuple(val.groupby("run_id", sort=False)))
    tg = targets(scored, cfg)
    rows = []
    for r in scored.scores.itertuples(index=False):
        e = by_run.get(r.run_id)
        ttt = float("nan") if e is None else first_reach(e[x].to_numpy(dtype=float), e["value"].to_numpy(dtype=float),
                                                          tg[r.task], cfg.smooth)
        rows.append({"run_id": r.run_id, "task": r.task, "algorithm": r.algorithm, "seed": r.seed,
                     "target": tg[r.task], "ttt": ttt})
    return pd.DataFrame(rows, columns=["run_id", "task", "algorithm", "seed", "target", "ttt"])


def median_interval(values: np.ndarray, cfg: ReportConfig) -> stats.Interval:
    """Median with a percentile bootstrap CI, +inf (not reached) allowed. Shapes: (n,)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not v.size:
        return stats.NAN_INTERVAL
    point = float(np.median(v))
    if v.size == 1:
        return stats.Interval(point, float("nan"), float("nan"))
    rng = np.random.default_rng(cfg.seed)
    dist = np.median(v[rng.integers(0, v.size, size=(cfg.reps, v.size))], axis=1)
    alpha = 100 * (1 - cfg.confidence) / 2
    low, high = np.percentile(dist, [alpha, 100 - alpha], method="nearest")
    return stats.Interval(point, float(low), float(high))


def ttt_table(times: pd.DataFrame, cfg: ReportConfig, x: str) -> pd.DataFrame:
    """Per (task, algorithm): target, reached k/n, median time-to-target with CI, and the
    mean over the runs that reached it. Columns below."""
    rows = []
    for (task, alg), g in times.groupby(["task", "algorithm"], sort=True):
        t = g["ttt"].to_numpy(dtype=float)
        ci = median_interval(t, cfg)
        reached = t[np.isfinite(t)]
        rows.append({"task": task, "algorithm": alg, "target": float(g["target"].iloc[0]), "x": x,
                     "reached_k": int(reached.size), "n": int((~np.isnan(t)).sum()),
                     "median": ci.point, "ci_low": ci.low, "ci_high": ci.high,
                     "mean_reached": float(reached.mean()) if reached.size else float("nan")})
    return pd.DataFrame(rows, columns=["task", "algorithm", "target", "x", "reached_k", "n", "median",
                                       "ci_low", "ci_high", "mean_reached"])


def _throughput(runset: RunSet, run_ids: pd.Series) -> np.ndarray:
    """Samples per wall second at the end of each run (last metrics row). Shapes -> (n,)."""
    m = runset.metrics
    if "budget/samples" not in m or "budget/wall_s" not in m:
        return np.full(len(run_ids), np.nan)
    last = m[m["run_id"].isin(set(run_ids))].sort_values("step").groupby("run_id").tail(1).set_index("run_id")
    s = pd.to_numeric(last["budget/samples"], errors="coerce")
    w = pd.to_numeric(last["budget/wall_s"], errors="coerce")
    thr = (s / w.where(w > 0)).reindex(run_ids)
    return thr.to_numpy(dtype=float)


def _speedup_ci(t0: np.ndarray, t1: np.ndarray, cfg: ReportConfig) -> stats.Interval:
    t0, t1 = t0[~np.isnan(t0)], t1[~np.isnan(t1)]
    if not t0.size or not t1.size:
        return stats.NAN_INTERVAL
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(np.median(t0) / np.median(t1))
        if t0.size == 1 and t1.size == 1:
            return stats.Interval(point, float("nan"), float("nan"))
        rng = np.random.default_rng(cfg.seed)
        m0 = np.median(t0[rng.integers(0, t0.size, (cfg.reps, t0.size))], axis=1)
        m1 = np.median(t1[rng.integers(0, t1.size, (cfg.reps, t1.size))], axis=1)
        dist = np.nan_to_num(m0 / m1, nan=1.0)  # inf/inf: neither arm reached the target
    alpha = 100 * (1 - cfg.confidence) / 2
    low, high = np.percentile(dist, [alpha, 100 - alpha], method="nearest")
    return stats.Interval(point, float(low), float(high))


BATCH_COLUMNS = ("sweep", "task", "algo", "prompts_per_step", "n_runs", "throughput", "throughput_gain",
                 "samples_to_target", "samples_penalty", "time_to_target_s", "predicted_speedup",
                 "speedup", "speedup_ci_low", "speedup_ci_high", "pays_off")


def batch_table(scored: Scored, runset: RunSet, cfg: ReportConfig) -> pd.DataFrame:
    """The batch-size rule table (module docstring), one row per batch size of each sweep
    group that varies `rollout.prompts_per_step`. Columns: `BATCH_COLUMNS`."""
    mask = has_factor(scored, runset, BATCH_FACTOR)
    if not mask.any() or "budget/wall_s" not in scored.metric_evals:
        return pd.DataFrame(columns=list(BATCH_COLUMNS))
    sub = Scored(scores=scored.scores[mask], excluded=scored.excluded, base=scored.base,
                 metric_evals=scored.metric_evals, notes=scored.notes)
    samples = run_times(sub, cfg, "budget/samples").set_index("run_id")["ttt"]
    wall = run_times(sub, cfg, "budget/wall_s").set_index("run_id")["ttt"]
    pps = runset.runs.set_index("run_id")["prompts_per_step"]
    df = sub.scores.assign(B=sub.scores["run_id"].map(pps))
    rows = []
    for (sweep, task, algo), g in df.groupby(["sweep", "task", "algo"], sort=True):
        arms = {b: a["run_id"] for b, a in g.groupby("B", sort=True)}
        if len(arms) < 2:
            continue
        b0 = min(arms)
        ref = _arm_stats(runset, arms[b0], samples, wall)
        for b, ids in arms.items():
            row = _batch_row((sweep, task, algo), b, ids, ref, _arm_stats(runset, ids, samples, wall),
                             wall[arms[b0]].to_numpy(float), wall[ids].to_numpy(float), cfg)
            rows.append({**row, "pays_off": "reference"} if b == b0 else row)
    return pd.DataFrame(rows, columns=list(BATCH_COLUMNS))


def _arm_stats(runset: RunSet, ids: pd.Series, samples: pd.Series, wall: pd.Series) -> dict:
    with np.errstate(invalid="ignore"):
        return {"thr": float(np.nanmean(_throughput(runset, ids))) if len(ids) else float("nan"),
                "S": float(np.median(samples[ids].dropna())) if samples[ids].notna().any() else float("nan"),
                "T": float(np.median(wall[ids].dropna())) if wall[ids].notna().any() else float("nan")}


def _batch_row(key: tuple, b, ids: pd.Series, ref: dict, arm: dict, w0: np.ndarray, w1: np.ndarray,
               cfg: ReportConfig) -> dict:
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = arm["thr"] / ref["thr"]
        penalty = arm["S"] / ref["S"]
        predicted = gain / penalty
    ci = _speedup_ci(w0, w1, cfg)
    return {"sweep": key[0], "task": key[1], "algo": key[2], "prompts_per_step": b, "n_runs": len(ids),
            "throughput": arm["thr"], "throughput_gain": gain, "samples_to_target": arm["S"],
            "samples_penalty": penalty, "time_to_target_s": arm["T"], "predicted_speedup": predicted,
            "speedup": ci.point, "speedup_ci_low": ci.low, "speedup_ci_high": ci.high,
            "pays_off": bool(gain > penalty) if np.isfinite(gain) and np.isfinite(penalty) else pd.NA}
