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

from rlsuite.reports import normalise, smallsample, stats
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.scores import BASE_LABEL, Scored, score_matrix

LEADERBOARD_COLUMNS = ("task", "algorithm", "n_seeds", "mean", "ci_low", "ci_high", "iqm", "resolution_floor",
                       "stable_k", "stable_n", "budget_unit", "budget", "samples", "updates", "gen_tokens", "flops")
SPENT = ("samples", "updates", "gen_tokens", "flops")
"""The compute a cell spent, whatever unit was matched: mean over its runs at the scored eval."""

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
    "resolution_floor": "the smallest gain over the base this cell's seeds could detect: the MDD of its "
                        "comparison with the base (paired sign-flip test, 80% power) at the family's adjusted "
                        "level alpha / m (m = the task's algorithms); inf while n is below the test's floor "
                        "(2 / 2^n > alpha / m: 3 seeds can resolve nothing); a gap smaller than this is not "
                        "resolvable at this n",
    "stable_k": "runs with no stability flag (NaN/Inf, reward collapse, entropy collapse, "
                "KL blow-up, length pinned at the cap)",
    "stable_n": "runs classified (= n_seeds); unstable runs stay in the mean",
    "budget_unit": "the matched budget's counter (spec.json `budget`)",
    "budget": "the matched budget in that unit",
    "samples, updates, gen_tokens, flops": "what the cell's runs spent by the scored eval (mean over runs): a "
                                           "matched unit leaves the others free, e.g. an entry that filters groups "
                                           "(DAPO) spends the matched samples in fewer updates and FLOPs",
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
    spent = _spent(scored)
    for task in sorted(set(scored.scores["task"]) | set(scored.base["task"])):
        cells = scored.scores[scored.scores["task"] == task].groupby("algorithm", sort=True)
        base = scored.base[scored.base["task"] == task]
        base_seeds = _by_seed(base) if len(base) else None
        alpha = (1 - cfg.confidence) / max(1, cells.ngroups)  # the base family's first Holm level

        def floor(g: pd.DataFrame) -> float:
            return pair_data(_by_seed(g), base_seeds).mdd(alpha) if base_seeds is not None else float("nan")
        task_rows = [_cell_row(task, alg, g, cfg) | _cell_spent(g, spent) | {"resolution_floor": floor(g)}
                     for alg, g in cells]
        units = sorted({r["budget_unit"] for r in task_rows if r["budget_unit"]})
        rows += _base_row(scored.base, task, cfg, ";".join(units))
        rows += sorted(task_rows, key=lambda r: -np.nan_to_num(r["mean"], nan=-np.inf))
    return pd.DataFrame(rows, columns=list(LEADERBOARD_COLUMNS))


def _spent(scored: Scored) -> pd.DataFrame:
    """Per scored run: its budget counters at the scored eval (``SPENT``), indexed by run_id."""
    ev = scored.metric_evals
    cols = [f"budget/{k}" for k in SPENT]
    if ev is None or ev.empty or not set(cols) <= set(ev.columns) or "score_step" not in scored.scores:
        return pd.DataFrame(columns=list(SPENT))
    at = scored.scores[["run_id", "score_step"]].rename(columns={"score_step": "step"})
    rows = ev.merge(at, on=["run_id", "step"]).groupby("run_id")[cols].max()
    return rows.rename(columns=dict(zip(cols, SPENT)))


def _cell_spent(g: pd.DataFrame, spent: pd.DataFrame) -> dict:
    mine = spent[spent.index.isin(g["run_id"])]
    return {k: float(pd.to_numeric(mine[k], errors="coerce").mean()) if len(mine) else float("nan") for k in SPENT}


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
             "ci_low": ci.low, "ci_high": ci.high, "iqm": float(stats.iqm(vals)), "resolution_floor": float("nan"),
             "stable_k": pd.NA, "stable_n": pd.NA, "budget_unit": unit, "budget": 0.0,
             **dict.fromkeys(SPENT, 0.0)}]


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


def aggregate_table(scored: Scored, cfg: ReportConfig, *, intervals: bool = False,
                    norm: normalise.Normalised | None = None) -> pd.DataFrame:
    """Per algorithm across tasks: mean and IQM with stratified CIs (rliable; `cfg.ci` via
    `stats.stratified_method`), median over tasks of the per-task mean, optimality gap, of the
    scores normalised per task by `cfg.normalise` (`rlsuite.reports.normalise`; `norm`: one
    already computed from `scored`).

    Tasks are weighted equally; an algorithm missing a task is aggregated over the tasks it
    has (see `n_tasks`). Starts with the base (step 0) row (normalised alike). Columns:
    `AGGREGATE_COLUMNS`, then `AGGREGATE_EXTRA_COLUMNS` with `intervals=True` (the table itself
    leaves them out). Raises ReportError when the normalisation is undefined for a task.
    """
    norm = norm if norm is not None else normalise.normalise(scored.scores, scored.base, cfg.normalise)
    s = norm.scores
    tasks = sorted(s["task"].unique())
    rows = []
    if len(norm.base):
        base = norm.base.groupby(["task", "seed"], as_index=False, dropna=False)["score"].mean()
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


def paired_table(scored: Scored, cfg: ReportConfig, reference: str | None,
                 norm: normalise.Normalised | None = None) -> pd.DataFrame:
    """Every algorithm minus the reference, per task (raw scores) and over all tasks (task-mean of
    the scores normalised per task by `cfg.normalise`, as the aggregates; `norm`: one already
    computed from `scored`).

    Columns: `algorithm, reference, task, n_pairs, diff, ci_low, ci_high, pairing, mdd, seeds_needed`.
    """
    cols = ["algorithm", "reference", "task", "n_pairs", "diff", "ci_low", "ci_high", "pairing", "mdd",
            "seeds_needed"]
    s = scored.scores
    if reference is None:
        return pd.DataFrame(columns=cols)
    tasks = sorted(s["task"].unique())
    if len(tasks) > 1 and norm is None:
        norm = normalise.normalise(s, scored.base, cfg.normalise)
    rows = []
    for alg in sorted(a for a in s["algorithm"].unique() if a != reference):
        for scope in tasks + (["all tasks"] if len(tasks) > 1 else []):
            use = tasks if scope == "all tasks" else [scope]
            frame = norm.scores if scope == "all tasks" else s
            rows.append({"algorithm": alg, "reference": reference, "task": scope,
                         **compare(frame, alg, reference, use, cfg)})
    return pd.DataFrame(rows, columns=cols)


NOT_DISTINGUISHABLE = "not distinguishable"
UNTESTABLE = "untestable (no runs on one side)"

VERDICT_COLUMNS = ("task", "algorithm_x", "algorithm_y", "n_x", "n_y", "n_pairs", "pairing", "diff", "diff_min",
                   "diff_max", "ci_low", "ci_high", "p_value", "p_holm", "holm_ci_low", "holm_ci_high", "verdict",
                   "mdd", "seeds_needed")

VERDICT_EXPLAINED = {
    "algorithm_x, algorithm_y": "the comparison x - y; within a task x has the higher mean; y is an algorithm or "
                                f"`{BASE_LABEL}` (the step-0 eval of the same seeds)",
    "n_x, n_y, n_pairs": "runs of x and y, and the seeds they share (the pairing unit)",
    "diff": "mean of x - y over shared seeds (paired), else difference of means (unpaired)",
    "diff_min, diff_max": "the smallest and largest per-seed difference (paired; a description, not a test: "
                          "x above y on every seed when diff_min > 0)",
    "ci_low, ci_high": "unadjusted interval of `diff` at the report's confidence, inverting the same randomization "
                       "test (-inf/inf: too few runs for any shift to be rejected at that level)",
    "p_value": "two-sided randomization test, one rule at every n: sign flips of the per-seed differences "
               "(paired over >= 2 shared seeds), else relabellings of the pooled runs; exact up to 65,536 "
               "arrangements. n paired seeds reach at best p = 2 / 2^n: fewer than 6 cannot reject at 5%",
    "p_holm": "Holm-adjusted p within the task's family: the algorithms vs the base, or the pairs of algorithms",
    "holm_ci_low, holm_ci_high": "the test's interval at the level Holm tested the comparison; excludes 0 exactly "
                                 "when the verdict is a difference",
    "verdict": "`x > y` / `x < y` when p_holm <= alpha (family-wise), else `not distinguishable`",
    "mdd": "minimum detectable difference of this test at the family's adjusted level (alpha / m, the first Holm "
           "step, m comparisons in the family) and 80% power at the observed spread: (t_{1-a/2,df} + t_{0.8,df}) "
           "x SE; inf while n is below the test's floor at that level (2 / 2^n > alpha / m)",
    "seeds_needed": "seeds per arm at which the observed |diff| would be the MDD at the family's adjusted level "
                    "(inf: no difference observed); never below the floor",
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


@dataclass(frozen=True)
class Pair:
    """What one comparison x - y is tested on: the per-seed differences ``d`` (paired) or the two
    arms' runs ``x``, ``y`` (unpaired), with the shared seeds and the pairing in words."""

    d: np.ndarray | None
    x: np.ndarray
    y: np.ndarray
    shared: int
    pairing: str

    @property
    def testable(self) -> bool:
        return self.d is not None or (self.x.size > 0 and self.y.size > 0)

    @property
    def diff(self) -> float:
        if self.d is not None:
            return float(self.d.mean())
        return float(self.x.mean() - self.y.mean()) if self.testable else float("nan")

    def p(self, alternative: str = "two-sided", seed: int = 0) -> float:
        if not self.testable:
            return float("nan")
        a, b = (self.d, None) if self.d is not None else (self.x, self.y)
        return smallsample.perm_p(a, b, alternative=alternative, seed=seed)

    def interval(self, confidence: float, alternative: str = "two-sided", seed: int = 0) -> stats.Interval:
        if not self.testable or not np.isfinite(confidence):
            return stats.Interval(self.diff, float("nan"), float("nan"))
        a, b = (self.d, None) if self.d is not None else (self.x, self.y)
        return smallsample.interval(a, b, confidence=confidence, alternative=alternative, seed=seed)

    def mdd(self, alpha: float, alternative: str = "two-sided") -> float:
        """The MDD of this comparison's test at ``alpha`` (see ``VERDICT_EXPLAINED``)."""
        if self.d is not None:
            sd = float(self.d.std(ddof=1)) if self.d.size >= 2 else float("nan")
            return smallsample.mdd(sd, self.d.size, alpha=alpha, power=POWER, alternative=alternative)
        if not self.testable or smallsample.min_p(self.x.size, self.y.size, alternative) > alpha:
            return float("inf") if self.testable else float("nan")
        t = stats.t_test([self.x], [self.y])
        return stats.mdd_from_test(t, alpha=alpha if alternative == "two-sided" else 2 * alpha, power=POWER)

    def seeds_needed(self, effect: float, alpha: float, alternative: str = "two-sided") -> float:
        """Seeds per arm at which ``effect`` is this test's MDD at ``alpha`` (the spread observed here)."""
        if self.d is not None:
            sd = float(self.d.std(ddof=1)) if self.d.size >= 2 else float("nan")
            return smallsample.seeds_for_effect(effect, sd, alpha=alpha, power=POWER, alternative=alternative)
        if self.x.size < 2 or self.y.size < 2:
            return float("nan")
        n = stats.seeds_needed(effect, stats.variance_terms([self.x], [self.y]),
                               alpha=alpha if alternative == "two-sided" else 2 * alpha, power=POWER)
        return max(float(smallsample.seeds_floor(alpha, alternative)), n) if np.isfinite(n) else n


def pair_data(x: pd.Series, y: pd.Series) -> Pair:
    """The comparison x - y from per-seed scores: paired over shared seeds (>= 2), else unpaired."""
    shared = x.index.intersection(y.index)
    if len(shared) >= 2:
        d = (x[shared] - y[shared]).to_numpy(dtype=float)
        return Pair(d, x.to_numpy(dtype=float), y.to_numpy(dtype=float), len(shared),
                    f"paired over {len(shared)} seed(s)")
    xa, ya = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    if xa.size < 1 or ya.size < 1:
        return Pair(None, xa, ya, len(shared), "too few runs")
    return Pair(None, xa, ya, len(shared), "unpaired (relabelling)")


def _holm_rows(rows: list[dict], families: list[list[int]], alpha: float, cfg: ReportConfig,
               alternatives: list[str] | None = None, names: tuple[str, str] = ("algorithm_x", "algorithm_y")) -> None:
    """Holm-adjust each family of ``rows`` (their ``_pair`` and ``p_value``) in place: ``p_holm``, the
    interval at the level Holm tested each one, the verdict (``names``: the row keys of x and y), and
    the MDD / seeds needed at the family's first-step level alpha / m."""
    for idx in families:
        p = [rows[i]["p_value"] for i in idx]
        adj, levels = stats.holm(p), stats.holm_levels(p, alpha)
        m = max(1, int(np.isfinite(p).sum()))
        for i, a, lv in zip(idx, adj, levels, strict=True):
            r, pair = rows[i], rows[i]["_pair"]
            alt = alternatives[i] if alternatives else "two-sided"
            held = pair.interval(1 - lv, alt, cfg.seed) if np.isfinite(lv) else stats.NAN_INTERVAL
            diff = pair.diff
            if not np.isfinite(a):
                verdict = UNTESTABLE
            elif a <= alpha and diff != 0:
                verdict = f"{r[names[0]]} {'>' if diff > 0 else '<'} {r[names[1]]}"
            else:
                verdict = NOT_DISTINGUISHABLE
            r.update(p_holm=float(a), holm_ci_low=held.low, holm_ci_high=held.high, verdict=verdict,
                     mdd=pair.mdd(alpha / m, alt),
                     seeds_needed=pair.seeds_needed(r.get("_effect", diff), alpha / m, alt))


def verdict_table(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """Per task: every pair of algorithms and every algorithm vs the base (step 0), with
    randomization tests (the one small-sample rule, :mod:`rlsuite.reports.smallsample`), Holm-adjusted
    p-values and intervals within the task's two families (every algorithm vs the base; every pair
    of algorithms) at family-wise alpha = 1 - confidence each, the verdict, and the MDD / seeds
    needed at the family's adjusted level. All-pairs: exploratory where the spec plans comparisons
    (:func:`planned_table`).

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
            pair = pair_data(series[x], series[y])
            ci = pair.interval(cfg.confidence, seed=cfg.seed)
            task_rows.append({"task": task, "algorithm_x": x, "algorithm_y": y, "n_x": len(series[x]),
                              "n_y": len(series[y]), "n_pairs": pair.shared if pair.d is not None else 0,
                              "pairing": pair.pairing, "diff": pair.diff,
                              "diff_min": float(pair.d.min()) if pair.d is not None else float("nan"),
                              "diff_max": float(pair.d.max()) if pair.d is not None else float("nan"),
                              "ci_low": ci.low, "ci_high": ci.high,
                              "p_value": pair.p(seed=cfg.seed), "_pair": pair})
        # two families per task, each Holm-adjusted on its own: the algorithms vs the base (does
        # RL help?) and the pairs of algorithms (which is better?)
        fams = [[i for i, r in enumerate(task_rows) if (r["algorithm_y"] == BASE_LABEL) == fam]
                for fam in (True, False)]
        _holm_rows(task_rows, [f for f in fams if f], alpha, cfg)
        for r in task_rows:
            r.pop("_pair")
        rows += task_rows
    return pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))


PLANNED_COLUMNS = ("task", "comparison", "a", "b", "direction", "smallest_effect", "n_pairs", "pairing", "diff",
                   "p_value", "p_holm", "holm_ci_low", "holm_ci_high", "verdict", "mdd", "resolves_smallest",
                   "seeds_needed", "a_gain_low", "b_gain_low", "non_trivial")

PLANNED_EXPLAINED = {
    "comparison": "the planned comparison as the sweep spec states it (`comparisons:`): H1 a > b, a < b or a ≠ b",
    "smallest_effect": "the smallest effect of interest the spec fixed before any run",
    "diff": "mean of a - b over shared seeds (paired), else difference of means",
    "p_value": "the randomization test in the planned direction (one-sided for greater / less)",
    "p_holm": "Holm-adjusted over the planned comparisons (the family: every planned comparison on every task)",
    "holm_ci_low, holm_ci_high": "the test's interval at the level Holm tested it (one-sided: the open end inf)",
    "verdict": "`a > b` / `a < b` when p_holm <= alpha in the planned direction, else `not distinguishable`",
    "mdd": "minimum detectable difference at the family's first Holm level (alpha / m) and 80% power, at the "
           "observed spread; inf below the test's floor",
    "resolves_smallest": "whether mdd <= smallest_effect: could this many seeds have detected the effect of interest",
    "seeds_needed": "seeds at which smallest_effect is the MDD at the observed spread (the plan for the next round)",
    "a_gain_low, b_gain_low": "lower end of each arm's unadjusted interval of its gain over the base",
    "non_trivial": "both arms gain over the base with a lower bound > 0 (a comparison of two arms that do not "
                   "learn says nothing about their methods)",
}


def planned_table(scored: Scored, cfg: ReportConfig) -> pd.DataFrame:
    """The spec's planned comparisons (``cfg.comparisons``: ``(a, b, direction, smallest_effect)``) on
    every task that has both arms: the randomization test in the planned direction, Holm over the
    planned list × tasks, the interval at the adjusted level, whether the comparison is
    non-trivial (both arms gain over the base) and what the seeds could resolve. Columns:
    `PLANNED_COLUMNS`; empty when the spec plans none."""
    s = scored.scores
    alpha = 1 - cfg.confidence
    rows: list[dict] = []
    alts: list[str] = []
    for task in sorted(s["task"].unique()):
        st = s[s["task"] == task]
        series = {a: _by_seed(g) for a, g in st.groupby("algorithm", sort=True)}
        base = scored.base[scored.base["task"] == task]
        if len(base):
            series[BASE_LABEL] = _by_seed(base)
        for a, b, direction, effect in cfg.comparisons:
            bb = BASE_LABEL if b == "base" else b
            if a not in series or bb not in series:
                continue
            pair = pair_data(series[a], series[bb])

            def gain_low(arm: str) -> float:  # lower end of the arm's gain over the base (0 for the base itself)
                if arm == BASE_LABEL:
                    return 0.0
                if BASE_LABEL not in series:
                    return float("nan")
                return pair_data(series[arm], series[BASE_LABEL]).interval(cfg.confidence, seed=cfg.seed).low
            gains = [gain_low(a), gain_low(bb)]
            label = {"greater": ">", "less": "<", "two-sided": "≠"}[direction]
            rows.append({"task": task, "comparison": f"{a} {label} {b}", "a": a, "b": b, "direction": direction,
                         "smallest_effect": effect, "n_pairs": pair.shared if pair.d is not None else 0,
                         "pairing": pair.pairing, "diff": pair.diff, "p_value": pair.p(direction, cfg.seed),
                         "_pair": pair, "_effect": effect if effect > 0 else pair.diff,
                         "a_gain_low": gains[0], "b_gain_low": gains[1],
                         "non_trivial": bool(gains[0] > 0 and (bb == BASE_LABEL or gains[1] > 0))})
            alts.append(direction)
    if rows:
        _holm_rows(rows, [list(range(len(rows)))], alpha, cfg, alts, names=("a", "b"))
        for r in rows:
            r.pop("_pair")
            r.pop("_effect")
            r["resolves_smallest"] = bool(r["smallest_effect"] > 0 and r["mdd"] <= r["smallest_effect"])
    return pd.DataFrame(rows, columns=list(PLANNED_COLUMNS))


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


PROBLEM_INTERVAL_COLUMNS = ("task", "algorithm", "n_seeds", "n_problems", "mean", "seed_ci_low", "seed_ci_high",
                            "ci_low", "ci_high", "width_ratio")

PROBLEM_INTERVAL_EXPLAINED = {
    "n_problems": "test problems every run of the cell was scored on (problems.jsonl of the final eval)",
    "mean": "mean over seeds of the per-problem score (the leaderboard's mean, from the per-problem rows)",
    "seed_ci_low, seed_ci_high": "percentile bootstrap over seeds only: inference conditional on this test set",
    "ci_low, ci_high": "two-level percentile bootstrap: seeds and test problems resampled (one draw of problems "
                       "shared by the runs of a replicate), so the interval covers a fresh test set of the same "
                       "size as well as fresh seeds",
    "width_ratio": "width of the two-level interval over the seeds-only one (how much problem sampling adds)",
}


def problem_interval_table(scored: Scored, per_problem: pd.DataFrame, cfg: ReportConfig) -> pd.DataFrame:
    """Per (task, algorithm) cell whose runs saved per-problem results of the scored split: the mean
    with a seeds-only and a two-level (seeds × problems) interval. Scores ``greedy_acc`` from the
    ``greedy`` column and ``avg@n`` (n = the sampled completions) from ``correct / n``; other
    metrics and ``--score last-k`` (val evals, no per-problem rows) give an empty table."""
    cols = list(PROBLEM_INTERVAL_COLUMNS)
    if per_problem is None or per_problem.empty or cfg.score != "final":
        return pd.DataFrame(columns=cols)
    pp = per_problem[per_problem["split"] == "test"]
    if cfg.metric == "greedy_acc":
        pp = pp.assign(value=pd.to_numeric(pp["greedy"], errors="coerce"))
    elif cfg.metric.startswith("avg@"):
        n = pd.to_numeric(pp["n"], errors="coerce")
        pp = pp[n == int(cfg.metric[4:])].assign(value=lambda d: pd.to_numeric(d["correct"]) / pd.to_numeric(d["n"]))
    else:
        return pd.DataFrame(columns=cols)
    pp = pp.dropna(subset=["value"])
    rows = []
    s = scored.scores
    for (task, alg), g in s.groupby(["task", "algorithm"], sort=True):
        mine = pp[pp["run_id"].isin(g["run_id"])]
        if mine["run_id"].nunique() < len(g) or mine.empty:
            continue  # a run without per-problem results: no two-level interval for the cell
        wide = mine.pivot_table(index="run_id", columns="problem", values="value", aggfunc="mean")
        wide = wide.dropna(axis=1)  # the problems every run was scored on
        if wide.shape[1] == 0:
            continue
        m = wide.to_numpy(dtype=float)
        seeds = stats.two_level_interval(m, reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed, problems=False)
        both = stats.two_level_interval(m, reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed)
        w1, w2 = seeds.high - seeds.low, both.high - both.low
        rows.append({"task": task, "algorithm": alg, "n_seeds": m.shape[0], "n_problems": m.shape[1],
                     "mean": both.point, "seed_ci_low": seeds.low, "seed_ci_high": seeds.high, "ci_low": both.low,
                     "ci_high": both.high, "width_ratio": w2 / w1 if w1 > 0 else float("nan")})
    return pd.DataFrame(rows, columns=cols)

