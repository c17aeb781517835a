"""Interactive figures of report.html: plotly.js figures as JSON, drawn in the browser.

report.html embeds plotly.js once (the `plotly` package's own bundle,
`plotly.offline.get_plotlyjs()`; nothing is fetched when the page is opened, so it works from a
file, offline or on a login node) and one JSON document holding every figure; `PLOTS_JS` (a
small inline script) draws them. Without the `plotly` package the report keeps its tables and
static PNG figures and says so (`plotly_js()` returns None). Figures (reports/METRICS.md §4.10):

- learning curves per task: mean over seeds with a bootstrap band resampling whole runs
  (`figures.grid_runs` and `figures.mean_band`, as the static curves), a selectable x-axis (step
  and every logged `budget/*` counter) and y (the val score and the training signals of
  `figures.TRAIN_KEYS`), per-seed traces on demand, and one legend entry per algorithm that
  shows or hides its mean, band and seeds together;
- beside each task's curves, its verdicts as a forest plot: every comparison with the base and
  the pairs of algorithms (all of them up to `MAX_PAIR_ROWS`, else the distinguishable ones), the
  difference with its Holm-adjusted interval (the verdict's) and its unadjusted one
  (`tables.verdict_table`);
- interval estimates of the mean, median, IQM and optimality gap per algorithm (the
  aggregate table's stratified intervals, `tables.aggregate_table(..., intervals=True)`);
- probability of improvement with its CI (`tables.poi_table`);
- performance profiles with pointwise CI bands (`figures.profile_frame`);
- ablation effects: each arm's difference from its base arm and P(arm > base) with CIs, and
  the 2x2 interaction contrasts (`ablation.ablation_table`, `ablation.interaction_table`);
- stability: stable and flagged runs per algorithm, and how many runs each flag fired in.

Every number comes from the report's own tables; only the curve bands are computed here,
with the static figures' functions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from rlsuite.reports.config import X_AXES, ReportConfig
from rlsuite.reports.figures import GRID_POINTS, MAX_BAND_REPS, PROFILE_CAPTION, TRAIN_KEYS, grid_runs, mean_band
from rlsuite.reports.load import RunSet
from rlsuite.reports.scores import BASE_LABEL, Scored
from rlsuite.reports.tables import NOT_DISTINGUISHABLE, UNTESTABLE

PLOTLY_HINT = 'pip install -e ".[report]"  (or: pip install plotly)'
"""How to get the interactive figures (the `report` extra includes plotly)."""
SEED_POINTS = 60_000
"""Per task and source (evals, metrics): about this many per-seed points at most; each run's
trace is thinned evenly to its share (20 to 200 points)."""
SIG_DIGITS = 5
"""Significant digits of the numbers in the embedded JSON."""
BASE_COLOR = "#7f7f7f"


@dataclass(frozen=True)
class Plot:
    """One interactive figure: element id, heading, caption, and what the page script draws:
    `figure` = a plotly figure (`spec` = {data, layout}); `curves` = the learning-curve model
    of `curve_model` (the page builds the traces and the controls); `group`: see below."""

    name: str
    title: str
    caption: str
    kind: Literal["figure", "curves"]
    spec: dict
    group: str = ""
    """Consecutive plots with the same non-empty group are drawn side by side (a task's curves and
    its verdicts)."""


def plotly_js() -> str | None:
    """plotly.js (minified) from the installed `plotly` package, or None when it is missing."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        return None
    return get_plotlyjs()


# --- JSON ----------------------------------------------------------------------------

def _num(v: Any) -> float | None:
    """A finite number rounded to SIG_DIGITS significant digits; None for NaN/inf/missing."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return float(f"{f:.{SIG_DIGITS}g}")


def nums(values: Any) -> list[float | None]:
    """`_num` over an array-like."""
    return [_num(v) for v in np.asarray(values, dtype=float).ravel()]


def to_json(obj: Any) -> str:
    """JSON for a <script type="application/json"> element: strict (no NaN), and "</" escaped
    so that no string can close the element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def _axis_title(text: str) -> dict:
    return {"title": {"text": text}}


def _fmt(percent: bool) -> str:
    return ".1%" if percent else ".4g"


# --- learning curves -----------------------------------------------------------------

def _finite_cols(frame: pd.DataFrame, cols: tuple[str, ...]) -> list[str]:
    return [c for c in cols if c in frame and np.isfinite(pd.to_numeric(frame[c], errors="coerce")).any()]


def _thin(n: int, keep: int) -> np.ndarray:
    """Indices of about `keep` of `n` points, evenly spread, first and last included."""
    if n <= keep:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, keep).round().astype(int))


def axis_aliases(frame: pd.DataFrame, axes: list[str]) -> dict[str, tuple[str, float]]:
    """Axes that are a constant positive multiple of an earlier one on every row (`budget/samples`
    = group size x `budget/prompts` when every run has the same group size): axis -> (that axis,
    the factor). Their bands and per-seed x values are the earlier axis' scaled (interpolation on a
    scaled grid is the same), so they are computed and stored once."""
    canon: list[str] = []
    out: dict[str, tuple[str, float]] = {}
    cols = {a: pd.to_numeric(frame[a], errors="coerce").to_numpy(dtype=float) for a in axes}
    for a in axes:
        xa = cols[a]
        for b in canon:
            xb = cols[b]
            ok = np.isfinite(xa) & np.isfinite(xb)
            if not np.array_equal(ok, np.isfinite(xa) | np.isfinite(xb)):
                continue
            nz = ok & (xb != 0)
            if not nz.any() or np.any((xb == 0) & ok & (xa != 0)):
                continue
            c = float(np.median(xa[nz] / xb[nz]))
            if c > 0 and np.allclose(xa[ok], c * xb[ok], rtol=1e-9, atol=0):
                out[a] = (b, c)
                break
        else:
            canon.append(a)
    return out


def curve_model(task: str, runset: RunSet, scored: Scored, colors: dict[str, str], cfg: ReportConfig,
                percent: bool) -> dict | None:
    """The learning-curve model of one task (drawn by `PLOTS_JS`), or None without curves.

    Keys: `algorithms` [{label, color, n}], `x_axes`, `x_default` (`cfg.x` when logged), `height`,
    `y_keys` [{key, label, source, percent}], `bands[y][x]` = {grid, algs: {label: {mean, low,
    high, n}}} (the mean over seeds and its bootstrap band on a common grid, null where no run
    covers it), `seeds[source][label]` = [{seed, run, x: {axis: [...]}, y: {key: [...]}}], and
    `x_alias[source][axis]` = [axis', factor] (`axis_aliases`: that axis is drawn as axis' x factor,
    and has no entry of its own in `bands` and `seeds`).
    """
    s = scored.scores[scored.scores["task"] == task]
    if s.empty:
        return None
    label = s.set_index("run_id")["algorithm"]
    seed_of = s.set_index("run_id")["seed"]
    ev = scored.metric_evals
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(label.index)]
    ev = ev.assign(algorithm=ev["run_id"].map(label), score=pd.to_numeric(ev["value"], errors="coerce"))
    m = runset.metrics[runset.metrics["run_id"].isin(label.index)]
    m = m.assign(algorithm=m["run_id"].map(label))
    sources = {"evals": ev, "metrics": m}
    y_keys = [{"key": "score", "label": f"val {cfg.metric}", "source": "evals", "percent": percent}]
    y_keys += [{"key": k, "label": k, "source": "metrics", "percent": False} for k in _finite_cols(m, TRAIN_KEYS)]
    if ev.empty or not np.isfinite(ev["score"].to_numpy(dtype=float)).any():
        y_keys = y_keys[1:]
    if not y_keys:
        return None
    logged = {src: _finite_cols(f, X_AXES) for src, f in sources.items()}
    x_axes = [a for a in X_AXES if any(a in logged[y["source"]] for y in y_keys)]
    alias = {src: axis_aliases(f, logged[src]) for src, f in sources.items()}
    axes = {src: [a for a in logged[src] if a not in alias[src]] for src in sources}
    bands: dict[str, dict] = {}
    fast = {src: f[["run_id", "algorithm", *axes[src], *[y["key"] for y in y_keys if y["source"] == src]]]
            .assign(run_id=pd.factorize(f["run_id"])[0]) for src, f in sources.items()}  # int keys group faster
    for y in y_keys:
        f = fast[y["source"]]
        bands[y["key"]] = {}
        for ax in axes[y["source"]]:
            xs = pd.to_numeric(f[ax], errors="coerce").to_numpy(dtype=float)
            ok = np.isfinite(xs) & np.isfinite(pd.to_numeric(f[y["key"]], errors="coerce").to_numpy(dtype=float))
            if not ok.any():
                continue
            grid = np.linspace(xs[ok].min(), xs[ok].max(), GRID_POINTS)
            algs = {}
            for alg, g in f.groupby("algorithm", sort=True):
                curves = grid_runs(g, ax, y["key"], grid)
                if not curves.size:
                    continue
                mean, low, high = mean_band(curves, cfg)
                algs[alg] = {"mean": nums(mean), "low": nums(low), "high": nums(high), "n": len(curves)}
            if algs:
                bands[y["key"]][ax] = {"grid": nums(grid), "algs": algs}
    seeds: dict[str, dict] = {}
    for src, f in sources.items():
        keys = [y["key"] for y in y_keys if y["source"] == src]
        if not keys or f.empty:
            continue
        n_runs = max(1, f["run_id"].nunique())
        keep = int(np.clip(SEED_POINTS // n_runs, 20, 200))
        seeds[src] = {}
        for rid, g in f.sort_values(["run_id", "step"], kind="stable").groupby("run_id", sort=False):
            idx = _thin(len(g), keep)
            g = g.iloc[idx]
            seeds[src].setdefault(label[rid], []).append({
                "seed": str(seed_of.get(rid)), "run": str(rid),
                "x": {ax: nums(pd.to_numeric(g[ax], errors="coerce")) for ax in axes[src]},
                "y": {k: nums(pd.to_numeric(g[k], errors="coerce")) for k in keys}})
    algs = sorted(set(s["algorithm"]))
    n_runs = s.groupby("algorithm").size()
    return {"task": task, "algorithms": [{"label": a, "color": colors[a], "n": int(n_runs[a])} for a in algs],
            "x_axes": x_axes, "x_default": cfg.x if cfg.x in x_axes else (x_axes[0] if x_axes else "step"),
            "y_keys": y_keys, "bands": bands, "seeds": seeds, "height": _legend_height(len(algs)),
            "x_alias": {src: {a: [b, c] for a, (b, c) in al.items()} for src, al in alias.items()}}


def _legend_height(n_entries: int) -> int:
    """Plot height that fits a vertical legend of `n_entries` (at least 480 px)."""
    return max(480, 110 + 21 * n_entries)


def curves_caption(cfg: ReportConfig) -> str:
    return (f"Mean over seeds; bands: {cfg.confidence:.0%} percentile bootstrap CI resampling whole runs "
            f"({min(cfg.reps, MAX_BAND_REPS)} resamples, seed {cfg.seed}); runs interpolated onto a common grid of "
            f"{GRID_POINTS} points, never extrapolated. Choose the x-axis and the signal above the plot; "
            "\"per-seed traces\" draws every run; click a legend entry to hide or show an algorithm (mean, band "
            "and seeds), double-click to show it alone; drag to zoom, double-click the plot to reset.")


# --- interval estimates, P(improvement), profiles --------------------------------------

def _color(colors: dict[str, str], label: str) -> str:
    return colors.get(label, BASE_COLOR)


def _errors(point, low, high) -> tuple[float, float]:
    p, lo, hi = _num(point), _num(low), _num(high)
    if p is None or lo is None or hi is None:
        return 0.0, 0.0
    return max(hi - p, 0.0), max(p - lo, 0.0)


def _row_height(n: int, per: int = 26, base: int = 150) -> int:
    return int(base + per * max(n, 1))


AGGREGATE_PANELS = (("mean", "Mean"), ("median", "Median"), ("iqm", "IQM"), ("optimality_gap", "Optimality gap"))


def interval_figure(agg: pd.DataFrame, colors: dict[str, str], percent: bool, confidence: float,
                    note: str = "") -> Plot | None:
    """rliable-style interval estimates: mean, median, IQM and optimality gap per algorithm,
    each with its stratified-bootstrap interval (`tables.aggregate_table(..., intervals=True)`)."""
    if agg is None or agg.empty:
        return None
    labels = agg["algorithm"].tolist()
    data, layout = [], {"height": _row_height(len(labels), 30), "margin": {"l": 10, "r": 10, "t": 50, "b": 50},
                        "showlegend": True, "legend": {"title": {"text": "algorithm"}}, "hovermode": "closest",
                        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True,
                                  "categoryorder": "array", "categoryarray": labels},
                        "annotations": []}
    gap = 0.03
    width = (1 - gap * (len(AGGREGATE_PANELS) - 1)) / len(AGGREGATE_PANELS)
    fmt = _fmt(percent)
    for i, (col, title) in enumerate(AGGREGATE_PANELS):
        ax = "" if i == 0 else str(i + 1)
        lo, hi = (f"{col}_ci_low", f"{col}_ci_high")
        dom = [i * (width + gap), i * (width + gap) + width]
        layout[f"xaxis{ax}"] = {"domain": dom, "zeroline": False, **({"tickformat": ".0%"} if percent else {})}
        layout["annotations"].append({"text": f"<b>{title}</b>", "x": sum(dom) / 2, "y": 1.0, "xref": "paper",
                                      "yref": "paper", "yanchor": "bottom", "showarrow": False})
        for r in agg.itertuples(index=False):
            point, low, high = getattr(r, col), getattr(r, lo), getattr(r, hi)
            plus, minus = _errors(point, low, high)
            ci = "no CI" if _num(low) is None or _num(high) is None else \
                f"[%{{customdata[0]:{fmt}}}, %{{customdata[1]:{fmt}}}]"
            data.append({"type": "scatter", "mode": "markers", "x": [_num(point)], "y": [r.algorithm],
                         "xaxis": f"x{ax}", "yaxis": "y", "name": r.algorithm, "legendgroup": r.algorithm,
                         "showlegend": i == 0, "marker": {"color": _color(colors, r.algorithm), "size": 9},
                         "error_x": {"type": "data", "symmetric": False, "array": [plus], "arrayminus": [minus],
                                     "thickness": 2.5, "width": 0},
                         "customdata": [[_num(low), _num(high)]],
                         "hovertemplate": f"<b>{r.algorithm}</b><br>{title}: %{{x:{fmt}}} {ci}<extra></extra>"})
    return Plot("interval_estimates", "Interval estimates across tasks (rliable style)",
                f"Mean (tasks weighted equally), median over tasks of the per-task mean, IQM (middle 50% of all run x "
                f"task scores) and optimality gap (lower is better) per algorithm with {confidence:.0%} stratified "
                "intervals (runs resampled within each task): the numbers of table `aggregate` (the median's and "
                "optimality gap's intervals are percentile bootstrap ones from the same bootstrap). "
                + (note + " " if note else "") + "Click a legend entry to hide an algorithm.", "figure",
                {"data": data, "layout": layout})


# --- verdicts: a forest plot per task -------------------------------------------------

MAX_PAIR_ROWS = 15
"""A task's pairs of algorithms are all drawn up to this many; above it only the distinguishable
ones (smallest p first, at most this many; without a base, the pairs with the smallest p)."""
VERDICT_COLORS = {"above": "#2ca02c", "below": "#d62728", "same": BASE_COLOR}


def _verdict_rows(v: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The comparisons drawn for one task's verdicts: (with the base, the pairs shown, which pairs
    those are, in words)."""
    v = v[np.isfinite(pd.to_numeric(v["diff"], errors="coerce").to_numpy(dtype=float))]
    vb, vp = v[v["algorithm_y"] == BASE_LABEL], v[v["algorithm_y"] != BASE_LABEL]
    n = len(vp)
    if n <= MAX_PAIR_ROWS:
        return vb, vp, f"all {n} pairs of algorithms" if n else ""
    ranked = vp.sort_values(["p_holm", "p_value"], kind="stable", na_position="last")
    decided = ranked[~ranked["verdict"].isin([NOT_DISTINGUISHABLE, UNTESTABLE])]
    if len(decided):
        shown = decided.head(MAX_PAIR_ROWS)
        what = (f"the {len(shown)} distinguishable pair(s) of the {n} pairs of algorithms" if len(shown) == len(decided)
                else f"{len(shown)} of the {len(decided)} distinguishable pairs of the {n} pairs of algorithms "
                     "(smallest p first)")
    elif len(vb):
        shown, what = decided, f"no pair of algorithms (none of the {n} is distinguishable)"
    else:
        shown = ranked.head(MAX_PAIR_ROWS)
        what = f"the {len(shown)} of the {n} pairs of algorithms with the smallest p (none is distinguishable)"
    return vb, shown.sort_index(), what


def verdict_figure(verdicts: pd.DataFrame | None, task: str, percent: bool, confidence: float) -> Plot | None:
    """One task's verdicts (`tables.verdict_table`) as a forest plot: one row per comparison (every
    algorithm minus the base, then the pairs of `_verdict_rows`), the difference with its
    Holm-adjusted interval (thin, coloured by the verdict: it excludes 0 exactly when the verdict is
    a difference) over its unadjusted interval (thick, grey). The x-axis spans the unadjusted
    intervals (and the Holm ones up to as far again beyond them; differences of scores in [0, 1] stay
    in [-1, 1]): a Holm interval that runs off the axis is cut at its edge, its numbers on hover."""
    if verdicts is None or verdicts.empty:
        return None
    vb, vp, shown = _verdict_rows(verdicts[verdicts["task"] == task])
    rows = pd.concat([vb, vp])
    if rows.empty:
        return None
    label = [f"{r.algorithm_x} − {'base' if r.algorithm_y == BASE_LABEL else r.algorithm_y}"
             for r in rows.itertuples(index=False)]
    rows = rows.assign(label=label)
    fmt = "+.1%" if percent else "+.4g"
    decided = ~rows["verdict"].isin([NOT_DISTINGUISHABLE, UNTESTABLE])
    diff = rows["diff"].to_numpy(dtype=float)
    cls = np.where(decided & (diff > 0), "above", np.where(decided & (diff < 0), "below", "same"))
    names = {"above": "x > y (Holm)", "below": "x < y (Holm)", "same": "not distinguishable"}
    inner = pd.concat([rows["diff"], rows["ci_low"], rows["ci_high"], pd.Series([0.0])]).to_numpy(dtype=float)
    inner = inner[np.isfinite(inner)]
    lo, hi = float(inner.min()), float(inner.max())
    outer = pd.concat([rows["holm_ci_low"], rows["holm_ci_high"]]).to_numpy(dtype=float)
    outer = np.clip(outer[np.isfinite(outer)], lo - (hi - lo), hi + (hi - lo))
    lo, hi = min([lo, *outer]), max([hi, *outer])
    if percent:
        lo, hi = max(lo, -1.0), min(hi, 1.0)
    pad = 0.04 * (hi - lo) or 0.05
    edge = (lo - pad, hi + pad)  # an interval beyond the axis (or unbounded: too few seeds) is cut at its edge

    def cut(v: float) -> float:
        return float(np.clip(v, *edge)) if not pd.isna(v) else v

    data = [{"type": "scatter", "mode": "markers", "name": f"unadjusted {confidence:.0%} interval",
             "x": nums(rows["diff"]), "y": label,
             "marker": {"symbol": "line-ew-open", "size": 12, "color": "rgba(127,127,127,0.35)",
                        "line": {"width": 9, "color": "rgba(127,127,127,0.35)"}},
             "error_x": {"type": "data", "symmetric": False,
                         "array": [_errors(r.diff, cut(r.ci_low), cut(r.ci_high))[0] for r in rows.itertuples()],
                         "arrayminus": [_errors(r.diff, cut(r.ci_low), cut(r.ci_high))[1] for r in rows.itertuples()],
                         "thickness": 9, "width": 0, "color": "rgba(127,127,127,0.35)"},
             "hoverinfo": "skip"}]
    for key in ("below", "same", "above"):
        g = rows[cls == key]
        if g.empty:
            continue
        err = [_errors(r.diff, cut(r.holm_ci_low), cut(r.holm_ci_high)) for r in g.itertuples()]
        data.append({"type": "scatter", "mode": "markers", "name": names[key], "x": nums(g["diff"]),
                     "y": g["label"].tolist(), "marker": {"color": VERDICT_COLORS[key], "size": 8},
                     "error_x": {"type": "data", "symmetric": False, "array": [e[0] for e in err],
                                 "arrayminus": [e[1] for e in err], "thickness": 2, "width": 3,
                                 "color": VERDICT_COLORS[key]},
                     "customdata": [[_num(r.holm_ci_low), _num(r.holm_ci_high), _num(r.p_holm), _num(r.ci_low),
                                     _num(r.ci_high), str(r.verdict), str(r.pairing)] for r in g.itertuples()],
                     "hovertemplate": f"<b>%{{y}}</b><br>difference %{{x:{fmt}}}<br>Holm interval "
                                      f"[%{{customdata[0]:{fmt}}}, %{{customdata[1]:{fmt}}}], Holm p "
                                      f"%{{customdata[2]:.3g}}<br>unadjusted {confidence:.0%} interval "
                                      f"[%{{customdata[3]:{fmt}}}, %{{customdata[4]:{fmt}}}]<br>%{{customdata[5]}}"
                                      "; %{customdata[6]}<extra></extra>"})
    layout = {"height": _row_height(len(rows), 22, 150), "margin": {"l": 10, "r": 10, "t": 30, "b": 100},
              "hovermode": "closest", "showlegend": True,
              "legend": {"orientation": "h", "x": 0, "xref": "container", "y": 0, "yref": "container",
                         "yanchor": "bottom"},
              "xaxis": {"range": list(edge), "zeroline": False, **_axis_title("difference x − y"),
                        **({"tickformat": "+.0%"} if percent else {})},
              "yaxis": {"type": "category", "autorange": "reversed", "automargin": True,
                        "categoryorder": "array", "categoryarray": label},
              "shapes": [_ref_line(0)]}
    what = "; ".join(t for t in ("every algorithm minus the base (step 0)" if len(vb) else
                                 "no step-0 eval, so no comparison with the base", shown) if t)
    return Plot(f"verdicts_{_slug(task)}_plot", f"{task}: verdicts (differences with intervals)",
                f"Rows: {what}; every comparison is in table `verdicts`. Dot: the difference x − y (paired over "
                f"shared seeds); thin bar: the Holm-adjusted interval, the verdict's (coloured: it excludes 0, a "
                f"difference at family-wise alpha = {1 - confidence:.2g}; grey: not distinguishable), cut at the "
                f"axis where it runs off (hover for its numbers); thick grey bar: the unadjusted {confidence:.0%} "
                "t interval. Dotted line: no difference.", "figure", {"data": data, "layout": layout}, group=task)


def _ref_line(x: float, xref: str = "x") -> dict:
    return {"type": "line", "x0": x, "x1": x, "xref": xref, "y0": 0, "y1": 1, "yref": "paper",
            "line": {"color": "#888", "dash": "dot", "width": 1}}


def poi_figure(poi: pd.DataFrame, colors: dict[str, str], confidence: float) -> Plot | None:
    """P(X > Y) with its CI per pair (`tables.poi_table`), 0.5 = no difference."""
    if poi is None or poi.empty:
        return None
    rows = [f"{r.algorithm_x} > {r.algorithm_y}" for r in poi.itertuples(index=False)]
    data = []
    for alg, g in poi.groupby("algorithm_x", sort=False):
        err = [_errors(r.p_improve, r.ci_low, r.ci_high) for r in g.itertuples(index=False)]
        data.append({"type": "scatter", "mode": "markers", "name": alg, "legendgroup": alg,
                     "x": nums(g["p_improve"]), "y": [f"{r.algorithm_x} > {r.algorithm_y}" for r in
                                                      g.itertuples(index=False)],
                     "marker": {"color": _color(colors, alg), "size": 8},
                     "error_x": {"type": "data", "symmetric": False, "array": [e[0] for e in err],
                                 "arrayminus": [e[1] for e in err], "thickness": 2, "width": 0},
                     "customdata": [[_num(r.ci_low), _num(r.ci_high), int(r.n_tasks)] for r in g.itertuples()],
                     "hovertemplate": "<b>P(%{y})</b> = %{x:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}] over "
                                      "%{customdata[2]} task(s)<extra></extra>"})
    layout = {"height": max(_row_height(len(rows), 20), _row_height(len(data), 21)),
              "margin": {"l": 10, "r": 10, "t": 30, "b": 50},
              "xaxis": {"range": [-0.02, 1.02], **_axis_title("P(X > Y)")}, "hovermode": "closest",
              "yaxis": {"type": "category", "autorange": "reversed", "automargin": True,
                        "categoryorder": "array", "categoryarray": rows},
              "shapes": [_ref_line(0.5)], "legend": {"title": {"text": "X"}}}
    return Plot("prob_improvement_plot", "Probability of improvement",
                f"P(X > Y) (ties count 1/2, averaged over tasks) with {confidence:.0%} intervals from independent "
                "stratified bootstraps of both algorithms (table `prob_improvement`); the dotted line is 0.5, no "
                "difference.", "figure", {"data": data, "layout": layout})


def profile_plot(profile: pd.DataFrame | None, colors: dict[str, str], percent: bool) -> Plot | None:
    """Performance profiles with pointwise CI bands (`figures.profile_frame`)."""
    if profile is None or profile.empty:
        return None
    data = []
    for alg, g in profile.groupby("algorithm", sort=True):
        c = _color(colors, alg)
        tau = nums(g["tau"])
        data.append({"type": "scatter", "mode": "lines", "x": tau + tau[::-1],
                     "y": nums(g["ci_high"]) + nums(g["ci_low"])[::-1], "fill": "toself", "fillcolor": _rgba(c, 0.15),
                     "line": {"width": 0, "color": c}, "hoverinfo": "skip", "legendgroup": alg, "showlegend": False,
                     "name": f"{alg} CI"})
        data.append({"type": "scatter", "mode": "lines", "x": tau, "y": nums(g["fraction_above"]), "name": alg,
                     "legendgroup": alg, "line": {"color": c, "width": 2},
                     "customdata": [[a, b] for a, b in zip(nums(g["ci_low"]), nums(g["ci_high"]), strict=True)],
                     "hovertemplate": f"<b>{alg}</b><br>tau %{{x:{_fmt(percent)}}}: %{{y:.3f}} "
                                      "[%{customdata[0]:.3f}, %{customdata[1]:.3f}]<extra></extra>"})
    layout = {"height": _legend_height(profile["algorithm"].nunique()), "margin": {"l": 60, "r": 10, "t": 30, "b": 50},
              "hovermode": "closest",
              "xaxis": {**_axis_title("score threshold tau"), **({"tickformat": ".0%"} if percent else {})},
              "yaxis": {**_axis_title("fraction of runs with score > tau"), "range": [-0.02, 1.02]}}
    return Plot("performance_profile_plot", "Performance profiles", PROFILE_CAPTION + " Click a legend entry to "
                "hide an algorithm.", "figure", {"data": data, "layout": layout})


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


# --- ablations and stability ---------------------------------------------------------

def ablation_figure(abl: pd.DataFrame | None, inter: pd.DataFrame | None, percent: bool,
                    confidence: float) -> Plot | None:
    """Each variant's difference from its base arm and P(variant > base), with CIs
    (`ablation.ablation_table`), and the 2x2 interaction contrasts (`interaction_table`)."""
    if abl is None or abl.empty:
        return None
    diff, p = (pd.to_numeric(abl[c], errors="coerce") for c in ("diff", "p_improve"))
    arms = abl[(abl["arm"] != BASE_LABEL) & (abl["pairing"] != "base arm") & (diff.notna() | p.notna())]
    if arms.empty:
        return None
    labels = [f"{r.task} · {r.sweep} · {r.arm}" for r in arms.itertuples(index=False)]
    inter_labels = [] if inter is None or inter.empty else \
        [f"{r.task} · {r.sweep} · {r.algo}: {r.factor_a} x {r.factor_b}" for r in inter.itertuples(index=False)]
    fmt = _fmt(percent)
    derr = [_errors(r.diff, r.diff_ci_low, r.diff_ci_high) for r in arms.itertuples(index=False)]
    perr = [_errors(r.p_improve, r.p_ci_low, r.p_ci_high) for r in arms.itertuples(index=False)]
    data = [
        {"type": "scatter", "mode": "markers", "name": "difference from the base arm", "x": nums(arms["diff"]),
         "y": labels, "xaxis": "x", "yaxis": "y", "marker": {"color": "#1f77b4", "size": 9},
         "error_x": {"type": "data", "symmetric": False, "array": [e[0] for e in derr],
                     "arrayminus": [e[1] for e in derr], "thickness": 2.5, "width": 0},
         "customdata": [[_num(r.diff_ci_low), _num(r.diff_ci_high), str(r.pairing), str(r.factors)]
                        for r in arms.itertuples(index=False)],
         "hovertemplate": f"<b>%{{y}}</b><br>difference %{{x:{fmt}}} [%{{customdata[0]:{fmt}}}, "
                          f"%{{customdata[1]:{fmt}}}]<br>%{{customdata[2]}}<br>%{{customdata[3]}}<extra></extra>"},
        {"type": "scatter", "mode": "markers", "name": "P(arm > base)", "x": nums(arms["p_improve"]), "y": labels,
         "xaxis": "x2", "yaxis": "y", "marker": {"color": "#ff7f0e", "size": 9, "symbol": "square"},
         "error_x": {"type": "data", "symmetric": False, "array": [e[0] for e in perr],
                     "arrayminus": [e[1] for e in perr], "thickness": 2.5, "width": 0},
         "customdata": [[_num(r.p_ci_low), _num(r.p_ci_high)] for r in arms.itertuples(index=False)],
         "hovertemplate": "<b>%{y}</b><br>P(arm > base) %{x:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                          "<extra></extra>"},
    ]
    if inter_labels:
        ierr = [_errors(r.interaction, r.ci_low, r.ci_high) for r in inter.itertuples(index=False)]
        data.append({"type": "scatter", "mode": "markers", "name": "2x2 interaction", "x": nums(inter["interaction"]),
                     "y": inter_labels, "xaxis": "x", "yaxis": "y", "marker": {"color": "#2ca02c", "size": 10,
                                                                               "symbol": "diamond"},
                     "error_x": {"type": "data", "symmetric": False, "array": [e[0] for e in ierr],
                                 "arrayminus": [e[1] for e in ierr], "thickness": 2.5, "width": 0},
                     "customdata": [[_num(r.ci_low), _num(r.ci_high), int(r.n_seeds)]
                                    for r in inter.itertuples(index=False)],
                     "hovertemplate": f"<b>%{{y}}</b><br>interaction %{{x:{fmt}}} [%{{customdata[0]:{fmt}}}, "
                                      f"%{{customdata[1]:{fmt}}}] over %{{customdata[2]}} seed(s)<extra></extra>"})
    rows = labels + inter_labels
    layout = {"height": _row_height(len(rows), 28), "margin": {"l": 10, "r": 10, "t": 40, "b": 50},
              "hovermode": "closest", "legend": {"orientation": "h", "y": -0.12},
              "xaxis": {"domain": [0, 0.56], **_axis_title("difference from the base arm"),
                        **({"tickformat": "+.0%"} if percent else {})},
              "xaxis2": {"domain": [0.62, 1], "range": [-0.02, 1.02], **_axis_title("P(arm > base)")},
              "yaxis": {"type": "category", "autorange": "reversed", "automargin": True,
                        "categoryorder": "array", "categoryarray": rows},
              "shapes": [_ref_line(0, "x"), _ref_line(0.5, "x2")]}
    return Plot("ablation_plot", "Ablation effects",
                f"Per sweep group (task · sweep · arm): the arm's difference from its base arm (paired over shared "
                f"seeds where there are any) and P(arm > base), with {confidence:.0%} intervals, from table "
                "`ablation`; diamonds: 2x2 interaction contrasts (table `interactions`). Dotted lines: no effect.",
                "figure", {"data": data, "layout": layout})


def stability_figure(summary: pd.DataFrame | None, counts: pd.DataFrame | None,
                     colors: dict[str, str]) -> Plot | None:
    """Stable and flagged runs per algorithm (`stability.stability_summary`) and, below, how many
    runs each flag fired in (`tables.stability_counts`)."""
    if summary is None or summary.empty:
        return None
    algs = summary["algorithm"].tolist()
    k = summary["stable_k"].astype(int)
    n = summary["stable_n"].astype(int)
    has_flags = counts is not None and not counts.empty
    top = {"domain": [0.55, 1] if has_flags else [0, 1], **_axis_title("runs")}
    data = [{"type": "bar", "name": "stable runs", "x": algs, "y": k.tolist(), "marker": {"color": "#2ca02c"},
             "xaxis": "x", "yaxis": "y", "hovertemplate": "%{x}: %{y} stable run(s)<extra></extra>"},
            {"type": "bar", "name": "flagged runs", "x": algs, "y": (n - k).tolist(), "marker": {"color": "#d62728"},
             "xaxis": "x", "yaxis": "y", "hovertemplate": "%{x}: %{y} flagged run(s)<extra></extra>"}]
    palette = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e", "#1f77b4", "#7f7f7f"]
    if has_flags:
        for i, (flag, g) in enumerate(counts.groupby("flag", sort=True)):
            data.append({"type": "bar", "name": f"flag: {flag}", "x": g["algorithm"].tolist(),
                         "y": g["runs"].astype(int).tolist(), "xaxis": "x2", "yaxis": "y2",
                         "marker": {"color": palette[i % len(palette)]},
                         "hovertemplate": f"%{{x}}: {flag} in %{{y}} run(s)<extra></extra>"})
    layout = {"height": 560 if has_flags else 380, "margin": {"l": 60, "r": 10, "t": 30, "b": 40},
              "barmode": "stack", "hovermode": "closest", "yaxis": top,
              "xaxis": {"type": "category", "categoryorder": "array", "categoryarray": algs, "automargin": True,
                        **({"matches": "x2", "showticklabels": False} if has_flags else {})}}
    if has_flags:
        layout["yaxis2"] = {"domain": [0, 0.42], **_axis_title("runs with the flag")}
        layout["xaxis2"] = {"type": "category", "categoryorder": "array", "categoryarray": algs,
                            "automargin": True, "anchor": "y2"}
    return Plot("stability_plot", "Stability", "Top: runs without any stability flag (green) and flagged runs "
                "(red) per algorithm, all tasks pooled (table `stability_counts`); bottom: how many runs each flag "
                "fired in (stacked; a run can raise several flags). Flagged runs stay in every aggregate.",
                "figure", {"data": data, "layout": layout})


def build_plots(runset: RunSet, scored: Scored, cfg: ReportConfig, percent: bool, *, agg: pd.DataFrame | None,
                poi: pd.DataFrame | None, profile: pd.DataFrame | None, abl: pd.DataFrame | None,
                inter: pd.DataFrame | None, stab: pd.DataFrame | None, flags: pd.DataFrame | None,
                colors: dict[str, str], verdicts: pd.DataFrame | None = None, agg_note: str = "") -> list[Plot]:
    """Every interactive figure of report.html, in reading order (None-free): per task its learning
    curves and its verdicts (one `group`, drawn side by side), then the figures across tasks.
    `agg_note`: the aggregate table's sentence on the per-task normalisation (under the interval
    estimates)."""
    out: list[Plot | None] = []
    for task in sorted(scored.scores["task"].unique()):
        model = curve_model(task, runset, scored, colors, cfg, percent)
        if model is not None:
            out.append(Plot(f"curves_{_slug(task)}_plot", f"{task}: learning curves", curves_caption(cfg),
                            "curves", model, group=task))
        out.append(verdict_figure(verdicts, task, percent, cfg.confidence))
    out += [interval_figure(agg, colors, percent, cfg.confidence, agg_note), poi_figure(poi, colors, cfg.confidence),
            profile_plot(profile, colors, percent), ablation_figure(abl, inter, percent, cfg.confidence),
            stability_figure(stab, flags, colors)]
    return [p for p in out if p is not None]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(text))


# --- the page script -----------------------------------------------------------------

PLOTS_JS = r"""
(function () {
  "use strict";
  var CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"]};
  var specs = JSON.parse(document.getElementById("rlsuite-plots").textContent);
  window.rlsuitePlotErrors = [];

  function make(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function rgba(hex, a) {
    var h = hex.replace("#", "");
    return "rgba(" + parseInt(h.slice(0, 2), 16) + "," + parseInt(h.slice(2, 4), 16) + "," +
      parseInt(h.slice(4, 6), 16) + "," + a + ")";
  }

  function curves(gd, m) {
    var st = {x: m.x_default, y: m.y_keys[0].key, seeds: false, hidden: {}};
    var roles = [], groups = [], timer = null;
    var bar = gd.parentNode.querySelector(".plot-controls");
    function select(name, options, value, onchange) {
      var lab = make("label", {}, name + " ");
      var sel = make("select", {"data-control": name});
      options.forEach(function (o) {
        var opt = make("option", {value: o[0]}, o[1]);
        if (o[0] === value) opt.selected = true;
        sel.appendChild(opt);
      });
      sel.addEventListener("change", function () { onchange(sel.value); });
      lab.appendChild(sel);
      bar.appendChild(lab);
    }
    select("x-axis", m.x_axes.map(function (a) { return [a, a]; }), st.x, function (v) { st.x = v; draw(); });
    if (m.y_keys.length > 1) {
      select("signal", m.y_keys.map(function (y) { return [y.key, y.label]; }), st.y,
             function (v) { st.y = v; draw(); });
    }
    var lab = make("label", {});
    var box = make("input", {type: "checkbox", "data-control": "seeds"});
    box.addEventListener("change", function () { st.seeds = box.checked; restyle(); });
    lab.appendChild(box);
    lab.appendChild(document.createTextNode(" per-seed traces"));
    bar.appendChild(lab);

    function ykey() { return m.y_keys.filter(function (y) { return y.key === st.y; })[0]; }
    function visible(i) {
      if (st.hidden[groups[i]]) return "legendonly";
      return roles[i] === "seed" ? st.seeds : true;
    }
    function scaled(v, c) { return v === null || c === 1 ? v : v * c; }
    function traces() {
      var y = ykey(), bands = m.bands[y.key] || {}, alias = (m.x_alias || {})[y.source] || {};
      var xa = st.x, note = "";
      if (!bands[xa] && !alias[xa]) {
        xa = bands.step || alias.step ? "step" : (Object.keys(bands)[0] || "step");
        note = " (" + st.x + " is not logged with this signal: " + xa + " shown)";
      }
      var canon = alias[xa] ? alias[xa][0] : xa, c = alias[xa] ? alias[xa][1] : 1, band = bands[canon];
      var fmt = y.percent ? ".1%" : ".4g", out = [];
      roles = []; groups = [];
      var seedsBy = (m.seeds[y.source] || {});
      m.algorithms.forEach(function (a) {
        var b = band && band.algs[a.label];
        (seedsBy[a.label] || []).forEach(function (s) {
          var xs = (s.x[canon] || s.x.step || []).map(function (v) { return scaled(v, c); });
          out.push({type: "scatter", mode: y.source === "evals" ? "lines+markers" : "lines", x: xs,
                    y: s.y[y.key], name: a.label + " seed " + s.seed, legendgroup: a.label, showlegend: false,
                    line: {color: a.color, width: 1}, marker: {size: 4}, opacity: 0.55, connectgaps: true,
                    hovertemplate: "<b>" + a.label + "</b> seed " + s.seed + "<br>%{x}: %{y:" + fmt + "}" +
                                   "<extra>" + s.run + "</extra>"});
          roles.push("seed"); groups.push(a.label);
        });
        if (!b) return;
        var gx = [], gm = [], gl = [], gh = [];
        band.grid.forEach(function (x, i) {
          if (b.mean[i] === null) return;
          gx.push(scaled(x, c)); gm.push(b.mean[i]);
          gl.push(b.low[i] === null ? b.mean[i] : b.low[i]);
          gh.push(b.high[i] === null ? b.mean[i] : b.high[i]);
        });
        out.push({type: "scatter", mode: "lines", x: gx.concat(gx.slice().reverse()),
                  y: gh.concat(gl.slice().reverse()), fill: "toself", fillcolor: rgba(a.color, 0.18),
                  line: {width: 0, color: a.color}, hoverinfo: "skip", legendgroup: a.label, showlegend: false,
                  name: a.label + " CI"});
        roles.push("band"); groups.push(a.label);
        out.push({type: "scatter", mode: "lines", x: gx, y: gm, name: a.label + " (n=" + b.n + ")",
                  legendgroup: a.label, line: {color: a.color, width: 2.2},
                  customdata: gl.map(function (l, i) { return [l, gh[i]]; }),
                  hovertemplate: "<b>" + a.label + "</b><br>%{x}: %{y:" + fmt + "} [%{customdata[0]:" + fmt +
                                 "}, %{customdata[1]:" + fmt + "}]<extra>n=" + b.n + "</extra>"});
        roles.push("mean"); groups.push(a.label);
      });
      out.forEach(function (t, i) { t.visible = visible(i); });
      return {data: out, layout: {
        title: {text: m.task + ": " + y.label + " vs " + xa + note, font: {size: 14}, x: 0, xref: "paper",
                xanchor: "left"},
        height: m.height || 480, margin: {l: 60, r: 10, t: 40, b: 50}, hovermode: "closest",
        xaxis: {title: {text: xa}}, yaxis: {title: {text: y.label}, tickformat: y.percent ? ".0%" : ""},
        legend: {title: {text: "algorithm"}}, uirevision: st.x + "|" + st.y}};
    }
    function draw() {
      var f = traces();
      return Plotly.react(gd, f.data, f.layout, CONFIG);
    }
    function restyle() {
      var idx = roles.map(function (_, i) { return i; });
      return Plotly.restyle(gd, {visible: idx.map(visible)}, idx);
    }
    function toggle(g) { st.hidden[g] = !st.hidden[g]; restyle(); }
    function isolate(g) {
      var others = m.algorithms.map(function (a) { return a.label; }).filter(function (l) { return l !== g; });
      var alone = !st.hidden[g] && others.every(function (l) { return st.hidden[l]; });
      others.forEach(function (l) { st.hidden[l] = !alone; });
      st.hidden[g] = false;
      restyle();
    }
    return draw().then(function () {
      gd.on("plotly_legendclick", function (ev) {
        var g = groups[ev.curveNumber];
        if (timer) clearTimeout(timer);
        timer = setTimeout(function () { timer = null; toggle(g); }, gd._context.doubleClickDelay || 300);
        return false;
      });
      gd.on("plotly_legenddoubleclick", function (ev) {
        if (timer) { clearTimeout(timer); timer = null; }
        isolate(groups[ev.curveNumber]);
        return false;
      });
    });
  }

  var jobs = Object.keys(specs).map(function (id) {
    var gd = document.getElementById(id), s = specs[id];
    var job;
    try {
      job = s.kind === "curves" ? curves(gd, s.spec) : Plotly.newPlot(gd, s.spec.data, s.spec.layout, CONFIG);
    } catch (e) {
      job = Promise.reject(e);
    }
    return Promise.resolve(job).catch(function (e) {
      window.rlsuitePlotErrors.push(id + ": " + e);
      gd.textContent = "this figure could not be drawn: " + e;
    });
  });
  window.rlsuiteReady = Promise.all(jobs).then(function () { document.body.setAttribute("data-plots", "ready"); });
})();
"""
"""Draws the figures of the `rlsuite-plots` JSON element (`Plot.kind`: plotly figures as they
are; `curves` with their controls). Sets `window.rlsuiteReady` (a promise), and
`window.rlsuitePlotErrors`."""
