"""Score tables: leaderboard, aggregates across tasks, P(improvement), paired differences with
MDD, and the per-task verdicts (Holm-adjusted t-tests) behind the summary.

Each builder takes the per-run `Scored` frame and the config and returns a DataFrame with
plain numeric columns (raw metric units; renderers show scores in percent). The CSV of
each table is exactly this frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlsuite.reports import stats
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.scores import BASE_LABEL, Scored, score_matrix

LEADERBOARD_COLUMNS = ("task", "algorithm", "n_seeds", "mean", "ci_low", "ci_high", "iqm",
                       "stable_k", "stable_n", "budget_unit", "budget")

LEADERBOARD_EXPLAINED = {
    "task": "task name (spec.json `task.name`)",
    "algorithm": "`algo.name`, plus `:variant` for a sweep variant; `base (step 0)` is the "
                 "model before training (the step-0 eval)",
    "n_seeds": "number of scored runs (training seeds) in the cell",
    "mean": "mean score over seeds (the final test eval at the matched budget, or the "
            "mean of the last k val evals; diverged runs score their last finite eval)",
    "ci_low": "lower end of the confidence interval of the mean over seeds (`--ci`; the footer names the "
              "method per n and its measured coverage; n/a for a single seed)",
    "ci_high": "upper end of that interval",
    "iqm": "interquartile mean over seeds (25% trimmed from each end; equals the mean for n < 4)",
    "stable_k": "runs with no stability flag (NaN/Inf, reward collapse, entropy collapse, "
                "KL blow-up, length pinned at the cap)",
    "stable_n": "runs classified (= n_seeds); unstable runs stay in the mean",
    "budget_unit": "the matched budget's counter (spec.json `budget`)",
    "budget": "the matched budget in that unit",
}


@dataclass(frozen=True)
class Table:
    """A rendered table: file stem, title, data, footer and what its columns mean."""

    name: str
    title: str
    frame: pd.DataFrame
    footer: str = ""
    description: str = ""
    percent: tuple[str, ...] = ()
    """Columns shown x100 (percentage points) in md/html/tex; the CSV keeps raw values."""
    columns_explained: dict[str, str] = field(default_factory=dict)
    marked: frozenset[tuple[int, str]] = frozenset()
    """(row position, column) cells that report.html marks (bold): not separated from the best."""
    mark_note: str = ""
    """What a marked cell means (printed under the table in report.html)."""


def _budget(g: pd.DataFrame) -> tuple[str, float | str]:
    units = sorted({u for u in g["budget_unit"].dropna().astype(str) if u})
    values = sorted({float(v) for v in g["budget"].dropna()})
    unit = ";".join(units) if units else ""
    if len(values) == 1:
        return unit, values[0]
    return unit, ("mixed: " + ", ".join(f"{v:g}" for v in values)) if values else float("nan")


def leaderboard(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """One row per (task, algorithm) with mean, bootstrap CI over seeds, IQM, stable k/n.

    Each task starts with its `base (step 0)` row; algorithms follow by mean, best first.
    Columns: `LEADERBOARD_COLUMNS`.
    """
    rows = []
    for task in sorted(set(scored.scores["task"]) | set(scored.base["task"])):
        cells = scored.scores[scored.scores["task"] == task].groupby("algorithm", sort=True)
        task_rows = [_cell_row(task, alg, g, cfg) for alg, g in cells]
        units = sorted({r["budget_unit"] for r in task_rows if r["budget_unit"]})
        rows += _base_row(scored.base, task, cfg, ";".join(units))
        rows += sorted(task_rows, key=lambda r: -np.nan_to_num(r["mean"], nan=-np.inf))
    return pd.DataFrame(rows, columns=list(LEADERBOARD_COLUMNS))


def _ci(values: np.ndarray, cfg: ReportConfig, statistic: str = "mean") -> stats.Interval:
    return stats.bootstrap_ci(values, statistic=statistic, reps=cfg.reps, method=cfg.ci,
                              confidence=cfg.confidence, seed=cfg.seed)


def _cell_row(task: str, alg: str, g: pd.DataFrame, cfg: ReportConfig) -> dict:
    vals = g["score"].to_numpy(dtype=float)
    ci = _ci(vals, cfg)
    unit, budget = _budget(g)
    fin = vals[np.isfinite(vals)]
    return {"task": task, "algorithm": alg, "n_seeds": len(g), "mean": ci.point, "ci_low": ci.low,
            "ci_high": ci.high, "iqm": float(stats.iqm(fin)) if fin.size else float("nan"),
            "stable_k": int(g["stable"].sum()), "stable_n": len(g), "budget_unit": unit, "budget": budget}


def _base_row(base: pd.DataFrame, task: str, cfg: ReportConfig, unit: str) -> list[dict]:
    """Step-0 row: step-0 evals averaged per seed first (the base model does not depend on the
    training seed, so runs sharing a seed are one measurement), then over seeds."""
    vals = base_by_seed(base, task)
    if not vals.size:
        return []
    ci = _ci(vals, cfg)
    return [{"task": task, "algorithm": BASE_LABEL, "n_seeds": len(vals), "mean": ci.point,
             "ci_low": ci.low, "ci_high": ci.high, "iqm": float(stats.iqm(vals)),
             "stable_k": pd.NA, "stable_n": pd.NA, "budget_unit": unit, "budget": 0.0}]


def base_by_seed(base: pd.DataFrame, task: str | None = None) -> np.ndarray:
    """Step-0 scores averaged within each seed (optionally for one task). Shapes -> (n_seeds,)."""
    b = base if task is None else base[base["task"] == task]
    key = b["seed"].map(str) if "seed" in b else b["run_id"]
    return b.groupby(key, dropna=False)["score"].mean().to_numpy(dtype=float)


POWER = 0.8
"""Power of the minimum detectable difference (MDD) columns (two-sided, alpha = 1 - confidence)."""

AGGREGATE_COLUMNS = ("algorithm", "n_tasks", "n_runs", "mean", "mean_ci_low", "mean_ci_high",
                     "iqm", "iqm_ci_low", "iqm_ci_high", "median", "optimality_gap",
                     "stable_k", "stable_n")


AGGREGATE_EXTRA_COLUMNS = ("median_ci_low", "median_ci_high", "optimality_gap_ci_low", "optimality_gap_ci_high")
"""The median's and optimality gap's intervals (stratified percentile bootstrap, from the same
bootstrap as the table's): computed with the table, drawn in report.html's interval estimates."""


def _aggregate_row(label: str, matrix: np.ndarray, cfg: ReportConfig, stable: tuple) -> dict:
    ints = stats.stratified_interval(matrix, ("mean", "iqm", "median", "optimality_gap"),
                                     reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed, method=cfg.ci)
    finite = np.isfinite(matrix)
    return {"algorithm": label, "n_tasks": int(finite.any(axis=0).sum()), "n_runs": int(finite.sum()),
            "mean": ints["mean"].point, "mean_ci_low": ints["mean"].low, "mean_ci_high": ints["mean"].high,
            "iqm": ints["iqm"].point, "iqm_ci_low": ints["iqm"].low, "iqm_ci_high": ints["iqm"].high,
            "median": ints["median"].point, "optimality_gap": ints["optimality_gap"].point,
            "stable_k": stable[0], "stable_n": stable[1],
            "median_ci_low": ints["median"].low, "median_ci_high": ints["median"].high,
            "optimality_gap_ci_low": ints["optimality_gap"].low,
            "optimality_gap_ci_high": ints["optimality_gap"].high}


def aggregate_table(scored: Scored, cfg: ReportConfig, *, intervals: bool = False) -> pd.DataFrame:
    """Per algorithm across tasks: mean and IQM with stratified CIs (rliable; `cfg.ci` via
    `stats.stratified_method`), median over tasks of the per-task mean, optimality gap.

    Tasks are weighted equally; an algorithm missing a task is aggregated over the tasks it
    has (see `n_tasks`). Starts with the base (step 0) row. Columns: `AGGREGATE_COLUMNS`, then
    `AGGREGATE_EXTRA_COLUMNS` with `intervals=True` (the table itself leaves them out).
    """
    s = scored.scores
    tasks = sorted(s["task"].unique())
    rows = []
    if len(scored.base):
        base = scored.base.groupby(["task", "seed"], as_index=False, dropna=False)["score"].mean()
        base = base.assign(algorithm=BASE_LABEL)  # per seed first, as in the leaderboard
        rows.append(_aggregate_row(BASE_LABEL, score_matrix(base, BASE_LABEL, tasks), cfg, (pd.NA, pd.NA)))
    for alg, g in s.groupby("algorithm", sort=True):
        rows.append(_aggregate_row(alg, score_matrix(s, alg, tasks), cfg,
                                   (int(g["stable"].sum()), len(g))))
    out = pd.DataFrame(rows, columns=list(AGGREGATE_COLUMNS + AGGREGATE_EXTRA_COLUMNS))
    head, rest = out[out["algorithm"] == BASE_LABEL], out[out["algorithm"] != BASE_LABEL]
    out = pd.concat([head, rest.sort_values("iqm", ascending=False)], ignore_index=True)
    return out if intervals else out[list(AGGREGATE_COLUMNS)]


def not_separated(frame: pd.DataFrame, col: str, low: str, high: str, group: str | None = None,
                  skip: tuple[str, ...] = (BASE_LABEL,)) -> frozenset[tuple[int, str]]:
    """Cells (row position, `col`) whose interval [low, high] overlaps that of the best (highest
    `col`) row of its `group` (all rows when None), the best included; rows labelled in `skip`
    and rows without an interval are never marked (nor chosen as the best)."""
    out: set[tuple[int, str]] = set()
    f = frame.reset_index(drop=True)
    keys = f[group] if group else pd.Series(0, index=f.index)
    for _, g in f.groupby(keys, sort=False):
        g = g[~g["algorithm"].isin(skip)]
        vals = pd.to_numeric(g[col], errors="coerce")
        lo, hi = pd.to_numeric(g[low], errors="coerce"), pd.to_numeric(g[high], errors="coerce")
        ok = vals.notna() & lo.notna() & hi.notna()
        if not ok.any():
            continue
        best = vals[ok].idxmax()
        overlap = ok & (hi >= lo[best]) & (lo <= hi[best])
        out |= {(int(i), col) for i in g.index[overlap.to_numpy()]}
    return frozenset(out)


def choose_reference(aggregate: pd.DataFrame, cfg: ReportConfig) -> str | None:
    """The algorithm that comparisons use as baseline: `cfg.reference`, else the best by IQM."""
    algs = [a for a in aggregate["algorithm"] if a != BASE_LABEL]
    if cfg.reference is not None:
        if cfg.reference not in algs:
            raise ReportError(f"unknown reference algorithm {cfg.reference!r}; valid: {', '.join(algs)}")
        return cfg.reference
    return algs[0] if algs else None


def poi_table(scored: Scored, cfg: ReportConfig, reference: str | None, max_all_pairs: int = 8) -> pd.DataFrame:
    """P(X > Y) with stratified-bootstrap CIs: all ordered pairs for up to `max_all_pairs`
    algorithms, else every algorithm against the reference.

    Columns: `algorithm_x, algorithm_y, n_tasks, p_improve, ci_low, ci_high`.
    """
    s = scored.scores
    tasks, algs = sorted(s["task"].unique()), sorted(s["algorithm"].unique())
    if len(algs) <= max_all_pairs:
        pairs = [(x, y) for x in algs for y in algs if x != y]
    else:
        pairs = [(x, reference) for x in algs if x != reference]
    mats = {a: score_matrix(s, a, tasks) for a in algs}
    rows = []
    for x, y in pairs:
        common = np.isfinite(mats[x]).any(axis=0) & np.isfinite(mats[y]).any(axis=0)
        ci = stats.poi_interval(mats[x], mats[y], reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed)
        rows.append({"algorithm_x": x, "algorithm_y": y, "n_tasks": int(common.sum()),
                     "p_improve": ci.point, "ci_low": ci.low, "ci_high": ci.high})
    return pd.DataFrame(rows, columns=["algorithm_x", "algorithm_y", "n_tasks", "p_improve", "ci_low", "ci_high"])


def compare(s: pd.DataFrame, x: str, y: str, tasks: list[str], cfg: ReportConfig) -> dict:
    """x - y: paired over shared seeds when there are any, else unpaired (both stratified;
    interval method `cfg.ci`), with the minimum detectable difference at the observed spread
    (`mdd`, 80% power, two-sided alpha = 1 - confidence, t distribution) and the seeds per
    arm and task at which the observed difference would be detectable (`seeds_needed`)."""
    seeds = sorted(set(s.loc[s["algorithm"] == x, "seed"]) | set(s.loc[s["algorithm"] == y, "seed"]),
                   key=str)
    mx, my = score_matrix(s, x, tasks, seeds), score_matrix(s, y, tasks, seeds)
    kw = dict(reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed, method=cfg.ci)
    ci, n = stats.paired_difference(mx, my, **kw)
    pairing = f"paired over {n} shared seed(s)"
    xcols, ycols = stats.columns(mx - my), None
    if n == 0:
        ux, uy = score_matrix(s, x, tasks), score_matrix(s, y, tasks)
        ci = stats.unpaired_difference(ux, uy, **kw)
        pairing = "unpaired (no shared seeds)"
        xcols, ycols = stats._aligned(ux, uy)
    return {"diff": ci.point, "ci_low": ci.low, "ci_high": ci.high, "n_pairs": n, "pairing": pairing,
            **power(xcols, ycols, ci.point, cfg)}


def power(xcols: stats.Columns, ycols: stats.Columns | None, diff: float, cfg: ReportConfig) -> dict:
    """`mdd` and `seeds_needed` of a (paired: `ycols` None) difference at the observed spread."""
    alpha = 1 - cfg.confidence
    test = stats.t_test(xcols, ycols)
    terms = stats.variance_terms(xcols, ycols) if xcols and (ycols is None or ycols) else []
    return {"mdd": stats.mdd_from_test(test, alpha=alpha, power=POWER),
            "seeds_needed": stats.seeds_needed(diff, terms, alpha=alpha, power=POWER)}


def paired_table(scored: Scored, cfg: ReportConfig, reference: str | None) -> pd.DataFrame:
    """Every algorithm minus the reference, per task and over all tasks (task-mean).

    Columns: `algorithm, reference, task, n_pairs, diff, ci_low, ci_high, pairing, mdd, seeds_needed`.
    """
    cols = ["algorithm", "reference", "task", "n_pairs", "diff", "ci_low", "ci_high", "pairing", "mdd",
            "seeds_needed"]
    s = scored.scores
    if reference is None:
        return pd.DataFrame(columns=cols)
    tasks = sorted(s["task"].unique())
    rows = []
    for alg in sorted(a for a in s["algorithm"].unique() if a != reference):
        for scope in tasks + (["all tasks"] if len(tasks) > 1 else []):
            use = tasks if scope == "all tasks" else [scope]
            rows.append({"algorithm": alg, "reference": reference, "task": scope,
                         **compare(s, alg, reference, use, cfg)})
    return pd.DataFrame(rows, columns=cols)


NOT_DISTINGUISHABLE = "not distinguishable"
UNTESTABLE = "untestable (fewer than 2 runs)"

VERDICT_COLUMNS = ("task", "algorithm_x", "algorithm_y", "n_x", "n_y", "n_pairs", "pairing", "diff", "ci_low",
                   "ci_high", "p_value", "p_holm", "holm_ci_low", "holm_ci_high", "verdict", "mdd", "seeds_needed")

VERDICT_EXPLAINED = {
    "algorithm_x, algorithm_y": "the comparison x - y; within a task x has the higher mean; y is an algorithm or "
                                f"`{BASE_LABEL}` (the step-0 eval of the same seeds)",
    "n_x, n_y, n_pairs": "runs of x and y, and the seeds they share (the pairing unit)",
    "diff": "mean of x - y over shared seeds (paired), else difference of means (Welch)",
    "ci_low, ci_high": "unadjusted t interval of `diff` at the report's confidence",
    "p_value": "two-sided paired t-test (Welch t-test when fewer than 2 seeds are shared); when every run "
               "of the difference is identical (zero spread, t undefined) the exact randomization test instead "
               "(sign flips or relabellings: 3 identical paired differences give p = 0.25)",
    "p_holm": "Holm-adjusted p within the task's family: the algorithms vs the base, or the pairs of algorithms",
    "holm_ci_low, holm_ci_high": "t interval at the level Holm tested the comparison; excludes 0 exactly when "
                                 "the verdict is a difference (n/a with zero spread: no t interval exists)",
    "verdict": "`x > y` / `x < y` when p_holm <= alpha (family-wise), else `not distinguishable`",
    "mdd": "minimum detectable difference at the observed spread: (t_{1-alpha/2,df} + t_{0.8,df}) x SE (80% "
           "power, two-sided alpha = 1 - confidence, unadjusted; n/a with zero spread)",
    "seeds_needed": "seeds per arm at which the observed |diff| would be the MDD (inf: no difference observed; with "
                    "zero spread, the seeds at which identical paired differences pass the randomization test)",
}


def _seed(s):
    """0.0 and 0 are one seed (a seed column with a missing value is float)."""
    return int(s) if isinstance(s, (float, np.floating)) and float(s).is_integer() else s


def _by_seed(frame: pd.DataFrame) -> pd.Series:
    """Scores indexed by seed (str; a run without a seed keys on its run_id, pairing with nothing)."""
    key = [f"seed:{_seed(s)}" if pd.notna(s) else f"run:{r}" for s, r in zip(frame["seed"], frame["run_id"],
                                                                             strict=True)]
    out = frame.assign(_key=key).groupby("_key")["score"].mean()
    return out[np.isfinite(out.to_numpy(dtype=float))]


def pair_test(x: pd.Series, y: pd.Series) -> tuple[stats.TTest, list, int, str]:
    """t-test of x - y from per-seed scores: paired over shared seeds (>= 2), else Welch.

    Returns (test, variance terms, shared seeds, pairing text).
    """
    shared = x.index.intersection(y.index)
    if len(shared) >= 2:
        d = (x[shared] - y[shared]).to_numpy(dtype=float)
        return stats.t_test([d]), stats.variance_terms([d]), len(shared), f"paired over {len(shared)} seed(s)"
    xa, ya = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    if xa.size < 2 or ya.size < 2:  # Welch needs both spreads
        diff = float(xa.mean() - ya.mean()) if xa.size and ya.size else float("nan")
        return stats.TTest(diff, *(float("nan"),) * 3), [], len(shared), "too few runs"
    return stats.t_test([xa], [ya]), stats.variance_terms([xa], [ya]), len(shared), "unpaired (Welch)"


def verdict_table(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """Per task: every pair of algorithms and every algorithm vs the base (step 0), with
    t-tests, Holm-adjusted p-values and intervals within the task's two families (every
    algorithm vs the base; every pair of algorithms) at family-wise alpha = 1 - confidence each,
    the verdict, and the MDD / seeds needed.

    The base is the step-0 eval averaged per seed (`base_by_seed`), paired with the runs of
    the same seed. Columns: `VERDICT_COLUMNS`.
    """
    s = scored.scores
    alpha = 1 - cfg.confidence
    rows = []
    for task in sorted(s["task"].unique()):
        st = s[s["task"] == task]
        series = {a: _by_seed(g) for a, g in st.groupby("algorithm", sort=True)}
        means = {a: float(v.mean()) if len(v) else -np.inf for a, v in series.items()}
        algs = sorted(series, key=lambda a: (-means[a], a))
        pairs = [(x, y) for i, x in enumerate(algs) for y in algs[i + 1:]]
        base = scored.base[scored.base["task"] == task]
        if len(base):
            series[BASE_LABEL] = _by_seed(base)
            pairs += [(a, BASE_LABEL) for a in algs]
        task_rows = []
        for x, y in pairs:
            test, terms, shared, pairing = pair_test(series[x], series[y])
            ci = stats.t_test_interval(test, cfg.confidence)
            task_rows.append({"task": task, "algorithm_x": x, "algorithm_y": y, "n_x": len(series[x]),
                              "n_y": len(series[y]), "n_pairs": shared if pairing.startswith("paired") else 0,
                              "pairing": pairing, "diff": test.diff, "ci_low": ci.low, "ci_high": ci.high,
                              "p_value": test.p, "_test": test,
                              "mdd": stats.mdd_from_test(test, alpha=alpha, power=POWER),
                              "seeds_needed": stats.seeds_needed(test.diff, terms, alpha=alpha, power=POWER)})
        # two families per task, each Holm-adjusted on its own: the algorithms vs the base (does
        # RL help?) and the pairs of algorithms (which is better?)
        adj, levels = np.full(len(task_rows), np.nan), np.full(len(task_rows), np.nan)
        for fam in (True, False):
            idx = [i for i, r in enumerate(task_rows) if (r["algorithm_y"] == BASE_LABEL) == fam]
            if idx:
                p = [task_rows[i]["p_value"] for i in idx]
                adj[idx], levels[idx] = stats.holm(p), stats.holm_levels(p, alpha)
        for r, a, lv in zip(task_rows, adj, levels, strict=True):
            test = r.pop("_test")
            held = stats.t_test_interval(test, 1 - lv) if np.isfinite(lv) else stats.NAN_INTERVAL
            if not np.isfinite(a):
                verdict = UNTESTABLE
            elif a <= alpha and test.diff != 0:
                verdict = f"{r['algorithm_x']} {'>' if test.diff > 0 else '<'} {r['algorithm_y']}"
            else:
                verdict = NOT_DISTINGUISHABLE
            r.update(p_holm=float(a), holm_ci_low=held.low, holm_ci_high=held.high, verdict=verdict)
        rows += task_rows
    return pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))


def stability_table(scored: Scored) -> pd.DataFrame:
    """Unstable runs with their reasons. Columns: `task, algorithm, seed, run_id, state, reasons`."""
    s = scored.scores
    bad = s[~s["stable"].astype(bool)]
    return bad[["task", "algorithm", "seed", "run_id", "state", "reasons"]].sort_values(
        ["task", "algorithm", "seed"], key=lambda c: c.astype(str)).reset_index(drop=True)


def stability_counts(scored: Scored) -> pd.DataFrame:
    """How often each flag fired, per algorithm. Columns: `algorithm, flag, runs`."""
    s = scored.scores
    rows = []
    for alg, g in s.groupby("algorithm", sort=True):
        flags = [flag for reasons in g["reasons"] if reasons
                 for flag in {r.split(":")[0].split(" (")[0] for r in reasons.split("; ")}]
        for flag, n in sorted(pd.Series(flags, dtype=object).value_counts().items()):
            rows.append({"algorithm": alg, "flag": flag, "runs": int(n)})
    return pd.DataFrame(rows, columns=["algorithm", "flag", "runs"])
