"""Figures (seaborn style, matplotlib Agg backend): curves, pass@k, profiles, scaling fits.

Curves: every run is interpolated onto a common grid of the x-axis (never extrapolated
beyond its own range), then the mean over seeds is drawn with a percentile bootstrap band
that resamples whole runs (reports/METRICS.md §4.4). One figure per task.
Scaling figures draw the raw eval points (never interpolated) and only reliable fits.
Each figure is written as PNG and SVG (atomically); the PNG bytes are kept for embedding.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rlsuite.reports import stats  # noqa: E402
from rlsuite.reports.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402
from rlsuite.reports.config import ReportConfig  # noqa: E402
from rlsuite.reports.load import RunSet  # noqa: E402
from rlsuite.reports.scaling import sigmoid  # noqa: E402
from rlsuite.reports.scores import Scored  # noqa: E402

GRID_POINTS = 60
MAX_BAND_REPS = 1000
TRAIN_KEYS = ("reward/mean", "stats/entropy", "len/response_mean", "stats/kl_ref", "mismatch/kl")


@dataclass(frozen=True)
class Figure:
    """A written figure: file stem, title, caption, PNG bytes, and the files written."""

    name: str
    title: str
    caption: str
    png: bytes
    files: tuple[str, ...]


def palette(algorithms: list[str]) -> dict[str, tuple]:
    """Stable colour per algorithm label across all figures."""
    algs = sorted(algorithms)
    colors = sns.color_palette("tab10" if len(algs) <= 10 else "husl", len(algs))
    return dict(zip(algs, colors, strict=False))


def grid_runs(frame: pd.DataFrame, x: str, y: str, grid: np.ndarray) -> np.ndarray:
    """Interpolate each run's (x, y) onto `grid`; NaN outside the run's own x-range.

    Shapes: frame rows = points of several runs (column `run_id`); grid (G,) -> (R, G).
    """
    out = []
    for _, g in frame.groupby("run_id", sort=False):
        xs, ys = g[x].to_numpy(dtype=float), g[y].to_numpy(dtype=float)
        ok = np.isfinite(xs) & np.isfinite(ys)
        if ok.sum() < 1:
            continue
        order = np.argsort(xs[ok], kind="stable")
        out.append(np.interp(grid, xs[ok][order], ys[ok][order], left=np.nan, right=np.nan))
    return np.array(out).reshape(-1, grid.size)


def mean_band(curves: np.ndarray, cfg: ReportConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs with a bootstrap band that resamples whole runs. Shapes: (R, G) -> 3 x (G,)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN grid columns
        mean = np.nanmean(curves, axis=0)
        if len(curves) < 2:
            return mean, mean, mean
        rng = np.random.default_rng(cfg.seed)
        idx = rng.integers(0, len(curves), size=(min(cfg.reps, MAX_BAND_REPS), len(curves)))
        alpha = 100 * (1 - cfg.confidence) / 2
        # the NaN-aware reductions only where NaNs are (grid points outside some runs' range):
        # the same numbers as nanmean/nanpercentile everywhere, several times faster
        full = ~np.isnan(curves).any(axis=0)
        boot = np.empty((idx.shape[0], curves.shape[1]))
        boot[:, full] = curves[:, full][idx].mean(axis=1)
        if not full.all():
            boot[:, ~full] = np.nanmean(curves[:, ~full][idx], axis=1)
        done = ~np.isnan(boot).any(axis=0)
        low, high = np.full(curves.shape[1], np.nan), np.full(curves.shape[1], np.nan)
        low[done], high[done] = np.percentile(boot[:, done], [alpha, 100 - alpha], axis=0)
        if not done.all():
            low[~done], high[~done] = np.nanpercentile(boot[:, ~done], [alpha, 100 - alpha], axis=0)
    return mean, low, high


def _panel(ax, frame: pd.DataFrame, x: str, y: str, colors: dict, cfg: ReportConfig, title: str) -> bool:
    xs = pd.to_numeric(frame[x], errors="coerce")
    if not np.isfinite(xs).any() or y not in frame or not np.isfinite(pd.to_numeric(frame[y], errors="coerce")).any():
        return False
    grid = np.linspace(np.nanmin(xs), np.nanmax(xs), GRID_POINTS)
    for alg, g in frame.groupby("algorithm", sort=True):
        curves = grid_runs(g, x, y, grid)
        if not curves.size:
            continue
        mean, low, high = mean_band(curves, cfg)
        ax.plot(grid, mean, color=colors[alg], label=f"{alg} (n={len(curves)})", lw=1.6)
        ax.fill_between(grid, low, high, color=colors[alg], alpha=0.2, lw=0)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(x)
    return True


def save(fig, out: Path, name: str, cfg: ReportConfig) -> tuple[bytes, tuple[str, ...]]:
    """Write `fig` as figures/<name>.<fmt> for each configured format; return PNG bytes, paths."""
    files, png = [], b""
    for fmt in dict.fromkeys(("png",) + tuple(cfg.figure_formats)):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=100, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
        data = buf.getvalue()
        if fmt == "png":
            png = data
        if fmt in cfg.figure_formats:
            rel = f"figures/{name}.{fmt}"
            atomic_write_bytes(out / rel, data)
            files.append(rel)
    plt.close(fig)
    return png, tuple(files)


def curves_figure(task: str, runset: RunSet, scored: Scored, colors: dict, cfg: ReportConfig,
                  out: Path) -> Figure | None:
    """Val score and training signals vs `cfg.x` for one task, mean and CI band per algorithm."""
    label = scored.scores.set_index("run_id")["algorithm"]
    runs = scored.scores.loc[scored.scores["task"] == task, "run_id"]
    ev = scored.metric_evals
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(runs)].assign(algorithm=lambda d: d["run_id"].map(label))
    m = runset.metrics[runset.metrics["run_id"].isin(runs)].assign(algorithm=lambda d: d["run_id"].map(label))
    panels = [(ev.assign(score=ev["value"]), "score", f"val {cfg.metric}")]
    panels += [(m, k, k) for k in TRAIN_KEYS if k in m and pd.to_numeric(m[k], errors="coerce").notna().any()]
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    drawn = [_panel(ax, f, cfg.x if cfg.x in f else "step", y, colors, cfg, t)
             for ax, (f, y, t) in zip(axes.flat, panels, strict=False)]
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if not any(drawn):
        plt.close(fig)
        return None
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(5, max(1, len(labels))), fontsize=8, frameon=False)
    fig.suptitle(f"{task}: curves vs {cfg.x}")
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    png, files = save(fig, out, f"curves_{_slug(task)}", cfg)
    return Figure(f"curves_{_slug(task)}", f"{task}: training curves", _band_caption(cfg), png, files)


def _band_caption(cfg: ReportConfig) -> str:
    return (f"Mean over seeds; bands: {cfg.confidence:.0%} percentile bootstrap CI resampling whole runs "
            f"({min(cfg.reps, MAX_BAND_REPS)} resamples, seed {cfg.seed}); runs interpolated onto a common "
            f"grid of {GRID_POINTS} points, never extrapolated.")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(text))


def passk_figure(task: str, runset: RunSet, scored: Scored, colors: dict, cfg: ReportConfig,
                 out: Path) -> Figure | None:
    """pass@k vs k at the final test eval, mean over seeds with bootstrap CIs, when logged."""
    runs = scored.scores.loc[scored.scores["task"] == task, ["run_id", "algorithm"]]
    ev = runset.evals
    ev = ev[ev["run_id"].isin(runs["run_id"]) & ev["metric"].str.fullmatch(r"pass@\d+") & ev["final"].astype(bool)
            & (ev["split"] == "test") & (ev["eval_task"] == task)]
    if ev.empty:
        return None
    label = runs.set_index("run_id")["algorithm"]
    ev = ev.assign(k=ev["metric"].str[5:].astype(int), algorithm=ev["run_id"].map(label))
    ev = ev.groupby(["algorithm", "k", "run_id"], as_index=False)["value"].mean()  # eval seeds within a run
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for alg, g in ev.groupby("algorithm", sort=True):
        pts = [(k, stats.bootstrap_ci(gk["value"].to_numpy(), reps=cfg.reps, confidence=cfg.confidence,
                                      seed=cfg.seed)) for k, gk in g.groupby("k", sort=True)]
        ks = np.array([p[0] for p in pts])
        mean = np.array([p[1].point for p in pts])
        low = np.array([p[1].low for p in pts])
        high = np.array([p[1].high for p in pts])
        ax.plot(ks, mean, marker="o", color=colors[alg], label=alg)
        ax.fill_between(ks, np.where(np.isnan(low), mean, low), np.where(np.isnan(high), mean, high),
                        color=colors[alg], alpha=0.2, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (final test eval)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{task}: pass@k")
    png, files = save(fig, out, f"passk_{_slug(task)}", cfg)
    return Figure(f"passk_{_slug(task)}", f"{task}: pass@k", "Mean over seeds with bootstrap CI bands.", png, files)


def profile_frame(scored: Scored, cfg: ReportConfig) -> pd.DataFrame | None:
    """Performance profiles F(tau) across tasks with pointwise stratified-bootstrap CIs, per
    algorithm on 101 thresholds spanning the scores (None without finite scores).

    Columns: `algorithm, tau, fraction_above, ci_low, ci_high` (performance_profile.csv).
    """
    from rlsuite.reports.scores import score_matrix
    s = scored.scores
    vals = s["score"].to_numpy(dtype=float)
    vals = vals[np.isfinite(vals)]
    if not vals.size:
        return None
    tasks = sorted(s["task"].unique())
    taus = np.linspace(vals.min() - 1e-9, vals.max() + 1e-9, 101)
    rows = []
    for alg in sorted(s["algorithm"].unique()):
        point, low, high = stats.profile_interval(score_matrix(s, alg, tasks), taus, reps=min(cfg.reps, MAX_BAND_REPS),
                                                  confidence=cfg.confidence, seed=cfg.seed)
        rows.append(pd.DataFrame({"algorithm": alg, "tau": taus, "fraction_above": point, "ci_low": low,
                                  "ci_high": high}))
    return pd.concat(rows, ignore_index=True)


PROFILE_CAPTION = ("Fraction of (run x task) scores above each threshold, tasks weighted equally; bands: "
                   "pointwise stratified-bootstrap CIs.")


def profile_figure(profile: pd.DataFrame | None, colors: dict, cfg: ReportConfig, out: Path) -> Figure | None:
    """The performance profiles of `profile_frame` as a figure (and performance_profile.csv)."""
    if profile is None or profile.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for alg, g in profile.groupby("algorithm", sort=True):
        ax.plot(g["tau"], g["fraction_above"], color=colors[alg], label=alg)
        ax.fill_between(g["tau"], g["ci_low"], g["ci_high"], color=colors[alg], alpha=0.15, lw=0)
    atomic_write_text(out / "performance_profile.csv", profile.to_csv(index=False))
    ax.set_xlabel(r"score threshold $\tau$")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Performance profiles (all tasks)")
    png, files = save(fig, out, "performance_profile", cfg)
    files = (*files, "performance_profile.csv")
    return Figure("performance_profile", "Performance profiles", PROFILE_CAPTION, png, files)


def _interval(row, name: str, fmt: str) -> str:
    """`name=point [low, high]` for the legend ("no CI" without a bootstrap interval)."""
    point, low, high = (getattr(row, f"{name}{s}") for s in ("", "_ci_low", "_ci_high"))
    ci = "no CI" if pd.isna(low) or pd.isna(high) else f"[{low:{fmt}}, {high:{fmt}}]"
    return f"{name}={point:{fmt}} {ci}"


def scaling_figure(task: str, scored: Scored, fits: pd.DataFrame, colors: dict, cfg: ReportConfig,
                   out: Path) -> Figure | None:
    """Raw val evals vs compute with the fitted sigmoid per algorithm (one task).

    Every eval point of every seed is drawn as logged (filled: fitted; hollow: dropped as early
    compute); the curve and its parameters' bootstrap intervals only for reliable fits.
    """
    f = fits[fits["task"] == task]
    label = scored.scores.set_index("run_id")["algorithm"]
    ev = scored.metric_evals
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(scored.scores.loc[scored.scores["task"] == task, "run_id"])]
    ev = ev.assign(algorithm=ev["run_id"].map(label), c=pd.to_numeric(ev[cfg.scaling_x], errors="coerce")
                   if cfg.scaling_x in ev else np.nan)
    ev = ev[(ev["c"] > 0) & np.isfinite(ev["value"].to_numpy(dtype=float))]
    if f.empty or ev.empty:
        return None
    run_max = ev.groupby("run_id")["c"].transform("max")
    ev = ev.assign(fitted=ev["c"] >= cfg.scaling_skip_frac * run_max)
    grid = np.geomspace(ev["c"].min(), ev["c"].max(), 100)
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for row in f.itertuples(index=False):
        g, color = ev[ev["algorithm"] == row.algorithm], colors[row.algorithm]
        if g.empty:
            continue
        ax.scatter(g.loc[g["fitted"], "c"], g.loc[g["fitted"], "value"], s=12, color=color, alpha=0.7, lw=0)
        ax.scatter(g.loc[~g["fitted"], "c"], g.loc[~g["fitted"], "value"], s=12, facecolors="none",
                   edgecolors=[color], alpha=0.7)
        if str(row.status).startswith("ok"):
            text = ", ".join(_interval(row, n, fmt) for n, fmt in (("A", ".3f"), ("B", ".2f"), ("C_mid", ".2g")))
            ax.plot(grid, sigmoid(grid, row.R0, row.A, row.B, row.C_mid), color=color, lw=1.4,
                    label=f"{row.algorithm}: {text}")
        else:
            ax.plot([], [], "o", ms=3, color=color, label=f"{row.algorithm}: no reliable fit")
    ax.set_xscale("log")
    ax.set_xlabel(cfg.scaling_x)
    ax.set_ylabel(f"val {cfg.metric}")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    ax.set_title(f"{task}: compute scaling fits")
    name = f"scaling_{_slug(task)}"
    png, files = save(fig, out, name, cfg)
    return Figure(name, f"{task}: compute-scaling fits",
                  "Dots: every val eval of every seed as logged (not interpolated; hollow: below "
                  f"{cfg.scaling_skip_frac:.1%} of the run's compute, left out of the fit); lines: "
                  "R(C) = R0 + (A - R0)/(1 + (C_mid/C)^B) fitted to all seeds' points, drawn only for reliable "
                  f"fits; brackets: {cfg.confidence:.0%} bootstrap intervals over seeds "
                  f"({cfg.scaling_reps} refits).", png, files)


def hex_palette(algorithms: list[str]) -> dict[str, str]:
    """`palette` as '#rrggbb' strings (report.html's interactive figures use the same colours)."""
    return {a: matplotlib.colors.to_hex(c) for a, c in palette(algorithms).items()}


def build_figures(runset: RunSet, scored: Scored, fits: pd.DataFrame, cfg: ReportConfig, out: Path,
                  profile: pd.DataFrame | None = None) -> list[Figure]:
    """Every figure of the report, written under out/figures/ (`profile`: `profile_frame`'s,
    computed here when not given)."""
    sns.set_theme(style="whitegrid", context="paper")
    colors = palette(scored.scores["algorithm"].unique().tolist())
    figs: list[Figure | None] = []
    tasks = sorted(scored.scores["task"].unique())
    for task in tasks:
        figs.append(curves_figure(task, runset, scored, colors, cfg, out))
        figs.append(passk_figure(task, runset, scored, colors, cfg, out))
    figs.append(profile_figure(profile_frame(scored, cfg) if profile is None else profile, colors, cfg, out))
    for task in tasks:
        figs.append(scaling_figure(task, scored, fits, colors, cfg, out))
    return [f for f in figs if f is not None]
