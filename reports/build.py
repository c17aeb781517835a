"""`build_report`: run folders -> tables, figures, report.md and a self-contained report.html.

Pipeline: load (read-only) -> battery runs expanded per dataset (`reports.battery`) -> score +
classify stability -> tables (aggregates across tasks normalised per task, `reports.normalise`)
-> figures (static PNG/SVG and report.html's interactive ones, `reports.interactive`) -> render.
Everything is written under `out` atomically (tmp + rename); `out` may not lie inside a run
folder. Several roots make a compare report (`rlsuite.reports.load.load_roots`: every algorithm labelled by its root).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from rlsuite.reports import ablation, battery, interactive, normalise, scaling, stability, stats, tables, timing
from rlsuite.reports import checks as checks_mod
from rlsuite.reports.atomic import atomic_write_text
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.figures import Figure, build_figures, hex_palette, profile_frame
from rlsuite.reports.load import RunSet, load_roots
from rlsuite.reports.render import (Block, render_html, render_markdown, section_first, summary_lines, verdict_footer,
                                    write_table)
from rlsuite.reports.scores import Scored, config_fingerprint, score_runs
from rlsuite.reports.tables import Table

MAX_PROBLEMS_SHOWN = 50
MAX_TEXT = 300


def check_out(out: Path, runset: RunSet) -> None:
    """Refuse an output folder inside (or equal to) a run folder, or one that is a file."""
    o = Path(out).resolve()
    if o.exists() and not o.is_dir():
        raise ReportError(f"--out {out} exists and is not a directory")
    for p in runset.runs["path"]:
        rp = Path(p).resolve()
        if o == rp or rp in o.parents:
            raise ReportError(f"--out {out} is inside run folder {p}; reports never write into run folders")


def check_x(scored: Scored, cfg: ReportConfig) -> None:
    """Refuse an x-axis that no run's evals log (the trainer may leave a counter null)."""
    ev = scored.metric_evals
    if cfg.x == "step" or ev.empty:
        return
    logged = [c for c in ev.columns if c.startswith("budget/") and pd.to_numeric(ev[c], errors="coerce").notna().any()]
    if cfg.x not in logged:
        raise ReportError(f"x-axis {cfg.x!r} is not logged by any run's evals; valid here: "
                          f"{', '.join(['step', *logged])}")


def code_commit() -> str:
    """Short git SHA of the reports code itself ("unknown" outside a git checkout)."""
    try:
        res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return res.stdout.strip() or "unknown"


def run_commits(runset: RunSet) -> str:
    """The runs' code commits (short), with how many runs were dirty."""
    r = runset.runs
    shas = sorted({str(c)[:7] for c in r["git_commit"].dropna()})
    dirty = int(r["git_dirty"].fillna(False).astype(bool).sum())
    text = ", ".join(shas) if shas else "unknown"
    return text + (f" ({dirty} run(s) dirty)" if dirty else "")


class Context:
    """Values shared by the table builders of one report (footers, percent display)."""

    def __init__(self, runset: RunSet, scored: Scored, cfg: ReportConfig, source: RunSet | None = None):
        self.runset, self.scored, self.cfg = runset, scored, cfg
        self.source = source if source is not None else runset
        """The RunSet as loaded (one row per run folder); `runset` is the scored one, battery runs
        expanded per dataset (`battery.expand`)."""
        self.aggregate_intervals: pd.DataFrame | None = None
        """The aggregate table with the median's and optimality gap's intervals (`score_tables`)."""
        self.norm: normalise.Normalised | None = None
        """The aggregates' per-task normalisation (`score_tables`)."""
        self.code = code_commit()
        self.commits = run_commits(runset)
        vals = scored.scores["score"].to_numpy(dtype=float)
        vals = vals[np.isfinite(vals)]
        self.percent = bool(vals.size) and bool(np.all((vals >= 0) & (vals <= 1)))
        counts = scored.scores.groupby(["task", "algorithm"]).size()
        self.seeds = (f"{counts.min()}" if counts.min() == counts.max() else f"{counts.min()}-{counts.max()}") \
            if len(counts) else "0"
        self.n_tasks = scored.scores["task"].nunique()
        self.cell_ns = sorted({int(n) for n in counts})
        per_task = scored.scores.groupby(["algorithm", "task"]).size().groupby("algorithm").min()
        self.agg_ns = sorted({int(n) for n in per_task})

    def footer(self, method: str, reps: int | None = None, scores: bool = True, coverage: str = "bootstrap") -> str:
        """Table footer: seeds, tasks, resamples, CI method, commits, and the measured coverage
        (`coverage`: "cell" / "aggregate" = of the `--ci` intervals at the n present; "bootstrap"
        = the percentile-bootstrap caveat)."""
        reps = self.cfg.reps if reps is None else reps
        unit = "scores in percentage points; " if self.percent and scores else ""
        return (f"n = {self.seeds} seeds per cell, {self.n_tasks} task(s); {reps} bootstrap resamples "
                f"(random state {self.cfg.seed}); {self.cfg.confidence:.0%} CI: {method}; {unit}"
                f"runs at commit {self.commits}; report code {self.code}. {self.coverage(coverage)}")

    def coverage(self, kind: str, ns: list[int] | None = None) -> str:
        """The coverage sentence of a footer (see `footer`)."""
        cfg = self.cfg
        if kind == "cell":
            return stats.coverage_note(cfg.ci, self.cell_ns if ns is None else ns, confidence=cfg.confidence)
        if kind == "t":
            return stats.coverage_note("t", self.cell_ns if ns is None else ns, confidence=cfg.confidence)
        if kind == "aggregate":
            return stats.aggregate_coverage_note(cfg.ci, self.agg_ns if ns is None else ns, self.n_tasks,
                                                 cfg.confidence)
        if kind == "randomization":
            return RANDOMIZATION_NOTE
        return stats.UNDER_COVERAGE_NOTE

    def ci_label(self) -> str:
        """The `--ci` setting in words."""
        m = self.cfg.ci
        return "auto (the method with the best measured coverage per n; below)" if m == "auto" else stats.CI_NAMES[m]

    def pct(self, *cols: str) -> tuple[str, ...]:
        return cols if self.percent else ()


def score_tables(ctx: Context) -> tuple[list[Table], str | None]:
    """Leaderboard, aggregates, P(improvement), paired differences, verdicts; and the reference label."""
    cfg, sc = ctx.cfg, ctx.scored
    lb = tables.leaderboard(sc, cfg)
    ctx.norm = norm = normalise.normalise(sc.scores, sc.base, cfg.normalise)
    ctx.aggregate_intervals = tables.aggregate_table(sc, cfg, intervals=True, norm=norm)
    agg = ctx.aggregate_intervals[list(tables.AGGREGATE_COLUMNS)]
    ref = tables.choose_reference(agg, cfg)
    paired = tables.paired_table(sc, cfg, ref, norm=norm)
    pfoot = ctx.footer(f"{ctx.ci_label()} of per-seed differences (paired over shared seeds"
                       + ("; all-tasks rows stratified by task)" if ctx.n_tasks > 1 else ")"), coverage="cell")
    if ctx.n_tasks > 1:
        pfoot += " All-tasks rows: " + ctx.coverage("aggregate")
    all_tasks = (f" The `all tasks` rows average per-task differences of the scores on the aggregates' scale "
                 f"({norm.mode} = {normalise.FORMULA[norm.mode]}, table `aggregate`); the per-task rows are raw."
                 if ctx.n_tasks > 1 else "")
    out = [
        Table("leaderboard", "Leaderboard", lb, ctx.footer(f"{ctx.ci_label()} over seeds", coverage="cell"),
              f"Score: eval metric `{cfg.metric}`, " + _score_rule(cfg) + ".",
              ctx.pct("mean", "ci_low", "ci_high", "iqm", "resolution_floor"), tables.LEADERBOARD_EXPLAINED,
              tables.not_separated(lb, "mean", "ci_low", "ci_high", group="task"), MARK_LEADERBOARD),
        Table("aggregate", "Aggregates across tasks", agg, ctx.footer(f"{ctx.ci_label()}, stratified (runs "
              "resampled within each task)", coverage="aggregate"), "Mean (tasks weighted equally), IQM (middle "
              "50% of all run x task scores), median (over tasks of the per-task mean) and optimality gap per "
              "algorithm, as rliable 1.2.0 defines them. " + norm.caption(ctx.percent),
              ctx.pct("mean", "mean_ci_low", "mean_ci_high", "iqm", "iqm_ci_low", "iqm_ci_high", "median",
                      "optimality_gap"), {},
              tables.not_separated(agg, "mean", "mean_ci_low", "mean_ci_high")
              | tables.not_separated(agg, "iqm", "iqm_ci_low", "iqm_ci_high"), MARK_AGGREGATE),
        Table("prob_improvement", "Probability of improvement", tables.poi_table(sc, cfg, ref),
              ctx.footer("independent stratified percentile bootstraps of both algorithms", scores=False),
              "P(X > Y): chance that a run of X beats a run of Y on the same task (ties count 1/2), "
              "averaged over tasks; 0.5 = no difference."),
        Table("paired_differences", f"Differences from {ref}", paired, pfoot,
              f"Each algorithm minus the reference `{ref}` (chosen: "
              f"{'--reference' if cfg.reference else 'best aggregate IQM'}); unadjusted intervals. `mdd`: minimum "
              f"detectable difference at the observed spread (80% power, two-sided alpha = {1 - cfg.confidence:.2g}, "
              "t distribution, paired by seed where the runs are); `seeds_needed`: seeds per arm (and task) at "
              "which the observed difference would be detectable." + all_tasks,
              ctx.pct("diff", "ci_low", "ci_high", "mdd")),
        Table("verdicts", ("Exploratory: every pair" if cfg.comparisons else
                           "Verdicts: which differences are distinguishable"), tables.verdict_table(sc, cfg),
              ctx.footer("randomization-test intervals (unadjusted and at the Holm level)", coverage="randomization"),
              ("Exploratory (the spec plans its confirmatory comparisons: table `planned`). " if cfg.comparisons
               else "") +
              "Per task, every pair of algorithms and every algorithm vs the base (step 0): randomization tests "
              "(sign flips of the per-seed differences over shared seeds, relabellings where fewer than 2 are "
              "shared: one rule at every n), Holm-adjusted over the task's comparisons at "
              f"family-wise alpha = {1 - cfg.confidence:.2g}. The summary's verdicts come from this table. "
              + "; ".join(f"`{k}`: {v}" for k, v in tables.VERDICT_EXPLAINED.items()) + ".",
              ctx.pct("diff", "diff_min", "diff_max", "ci_low", "ci_high", "holm_ci_low", "holm_ci_high", "mdd")),
    ]
    two = tables.problem_interval_table(sc, ctx.runset.per_problem, cfg)
    out.append(Table(
        "problem_intervals", "Intervals that resample test problems as well as seeds", two,
        ctx.footer("percentile bootstrap: seeds only, and seeds × problems", coverage="bootstrap"),
        ("Per cell whose runs saved per-problem results (problems.jsonl): the mean with an interval over seeds only "
         "(conditional on this test set) and a two-level one that resamples the test problems too. "
         if len(two) else
         "No run saved per-problem results of the scored split (runs written before problems.jsonl, or "
         "`--score last-k`): every interval of this report is conditional on the test set (it resamples seeds, "
         "not problems). ")
        + "; ".join(f"`{k}`: {v}" for k, v in tables.PROBLEM_INTERVAL_EXPLAINED.items()) + ".",
        ctx.pct("mean", "seed_ci_low", "seed_ci_high", "ci_low", "ci_high")))
    gate = pd.DataFrame()
    if cfg.checks:
        from rlsuite.sweeps.spec import Check  # the spec's own check type (its fields and label)

        gate = checks_mod.evaluate([Check(*c) for c in cfg.checks], ctx.runset.runs, ctx.runset.metrics)
        out.insert(0, Table(
            "checks", "Manipulation checks", gate, ctx.footer("per run, the signal aggregated over its steps"),
            "The checks the spec fixed before the confirmatory runs: does the mechanism each comparison is about "
            "engage in these runs? A check passes when at least `share_needed` of the arm's runs meet it; "
            "`values`: the aggregated signal per run; `no data`: no run logged the signal. A failed check is "
            "reported beside the planned verdicts it concerns (column `checks`), never in their place."))
    if cfg.comparisons:
        planned = tables.planned_table(sc, cfg)
        if cfg.checks:
            planned["checks"] = ["; ".join(checks_mod.failed_for(gate, r.task, [r.a, r.b])) or "pass"
                                 for r in planned.itertuples()]
        listed = "; ".join(f"{a} {({'greater': '>', 'less': '<'}).get(d, '≠')} {b} (smallest effect {e:g})"
                           for a, b, d, e in cfg.comparisons)
        out.insert(0, Table(
            "planned", "Planned comparisons (confirmatory)", planned,
            ctx.footer("randomization-test intervals at the Holm level", coverage="randomization"),
            f"The comparisons the spec fixed before any run: {listed}. One Holm family over all of them (× tasks) "
            f"at family-wise alpha = {1 - cfg.confidence:.2g}; a planned comparison missing here had an arm "
            "without scored runs. " + "; ".join(f"`{k}`: {v}" for k, v in tables.PLANNED_EXPLAINED.items()) + "."
            + (" `checks`: the manipulation checks of either arm that did not pass in these runs (table `checks`), "
               "or pass." if cfg.checks else ""),
            ctx.pct("smallest_effect", "diff", "holm_ci_low", "holm_ci_high", "mdd", "a_gain_low", "b_gain_low")))
    return out, ref


RANDOMIZATION_NOTE = ("The tests are exact randomization tests (sign flips of the per-seed differences, or "
                      "relabellings), and each interval is the set of shifts its test does not reject, so its level "
                      "holds at every n without a normality assumption; with few seeds it is wide, or unbounded "
                      "(-inf, inf) where no shift can be rejected: n paired seeds reach at best p = 2 / 2^n.")
MARK_LEADERBOARD = ("the mean's interval overlaps the interval of the best mean of its task (the best included): "
                    "these intervals do not separate it from the best. An overlap check, not a test (the "
                    "Holm-adjusted verdicts are in table `verdicts`); cells without an interval (one seed) and the "
                    "base row are never marked.")
MARK_AGGREGATE = ("the mean's (IQM's) interval overlaps that of the best mean (IQM): not separated from the best by "
                  "these intervals (an overlap check, not a test); the base row is never marked.")


def _score_rule(cfg: ReportConfig) -> str:
    if cfg.score == "final":
        return "final test eval at the matched budget (diverged runs: last finite eval)"
    return f"mean of the last {cfg.k} val evals (diverged runs: last finite eval)"


def stability_tables(ctx: Context) -> list[Table]:
    """Flag counts per algorithm and the unstable runs with reasons."""
    th = ctx.cfg.stability
    desc = "Thresholds: " + ", ".join(f"{f}={getattr(th, f)}" for f in th.__slots__) + \
        ". Unstable runs stay in every aggregate."
    return [Table("stability_counts", "Stability per algorithm", stability.stability_summary(ctx.scored.scores),
                  "", "Runs without any flag out of the runs scored (all tasks), and how many runs each flag "
                  "fired in. " + desc),
            Table("stability_runs", "Flagged runs", stability.flagged_runs(ctx.scored.scores), "",
                  "Every run with at least one flag, and why.")]


def ablation_tables(ctx: Context) -> list[Table]:
    """Variant-vs-base and 2x2 interaction tables (empty list when there is no sweep with variants)."""
    abl = ablation.ablation_table(ctx.scored, ctx.runset, ctx.cfg)
    if abl.empty:
        return []
    inter = ablation.interaction_table(ctx.scored, ctx.runset, ctx.cfg)
    out = [Table("ablation", "Ablations: each variant vs its base arm", abl,
                 ctx.footer(f"{ctx.ci_label()} over seeds; differences paired over shared seeds", coverage="cell"),
                 "Per sweep group (sweep, task, algorithm): the step-0 row, the base arm, then each variant "
                 "with its difference from the base arm and P(variant > base).",
                 ctx.pct("mean", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high"))]
    if not inter.empty:
        out.append(Table("interactions", "2x2 interaction contrasts", inter,
                         ctx.footer("percentile bootstrap over seeds shared by all four arms"),
                         "(y11 - y01) - (y10 - y00): positive when the two changes help more together than "
                         "the sum of their separate effects.", ctx.pct("interaction", "ci_low", "ci_high")))
    return out


def timing_tables(ctx: Context) -> list[Table]:
    """Time-to-target per algorithm and, for batch-size sweeps, the batch-size rule table."""
    cfg = ctx.cfg
    times = timing.run_times(ctx.scored, cfg, cfg.x)
    desc = (f"First `{cfg.x}` at which the val score ({cfg.smooth}-eval trailing mean) reaches the target "
            f"({'--target' if cfg.target is not None else '80% of the best mean score of the task'}); "
            "inf = not reached (censored), median over runs.")
    out = [Table("time_to_target", "Time to target", timing.ttt_table(times, cfg, cfg.x),
                 ctx.footer("percentile bootstrap of the median over runs"), desc, ctx.pct("target"))]
    batch = timing.batch_table(ctx.scored, ctx.runset, cfg)
    if not batch.empty:
        out.append(Table("batch_size", "Batch size: throughput gain vs samples-to-target penalty", batch,
                         ctx.footer("percentile bootstrap of the ratio of medians (runs resampled per arm)",
                                    scores=False),
                         "Against the smallest batch of each sweep: a larger batch pays off only when its "
                         "throughput gain exceeds its samples-to-target penalty (speed-up = gain / penalty)."))
    return out


def scaling_tables(ctx: Context) -> list[Table]:
    """Sigmoid compute-scaling fits."""
    fits = scaling.scaling_table(ctx.scored, ctx.cfg)
    return [Table("scaling_fits", "Compute-scaling fits", fits,
                  ctx.footer("percentile bootstrap of refits over seeds", reps=ctx.cfg.scaling_reps),
                  f"R(C) - R0 = (A - R0) / (1 + (C_mid / C)^B) fitted to val `{ctx.cfg.metric}` against "
                  f"`{ctx.cfg.scaling_x}` (points below {ctx.cfg.scaling_skip_frac:.1%} of each run's compute "
                  "dropped, as ScaleRL drops its early compute); " + scaling.COLUMNS_TEXT,
                  ctx.pct("R0", "A_max", "A", "A_ci_low", "A_ci_high", "rmse", "holdout_rmse"))]


def provenance(runset: RunSet, scored: Scored, cfg: ReportConfig, code: str,
               source_of: dict[str, str] | None = None) -> list[str]:
    """Bullet lines: what the report summarises (commit, seeds, budget, model, hardware, tuning).
    `runset`: as loaded (one row per run folder); `source_of`: scored run id -> run folder id where
    battery runs were expanded per dataset (`battery.expand`)."""
    r = runset.runs
    src = source_of or {}

    def n_runs(frame: pd.DataFrame) -> int:
        return frame["run_id"].map(lambda i: src.get(i, i)).nunique()
    rows = (f" ({len(scored.scores)} scored rows: a battery run counts once per dataset)"
            if len(scored.scores) != n_runs(scored.scores) else "")

    def uniq(col):
        vals = sorted({str(v) for v in r[col].dropna()})
        return ", ".join(vals) if vals else "not recorded"
    seeds = sorted({s for s in r["seed"].dropna()}, key=lambda s: (str(type(s)), s))
    budgets = sorted({f"{u}={b:g}" for u, b in zip(r["budget_unit"], r["budget"], strict=True) if u and pd.notna(b)})
    hw = sorted({f"{d}/{p}/{t} thread(s)" for d, p, t in zip(r["device"], r["precision"], r["num_threads"],
                                                              strict=True) if pd.notna(d)})
    states = r["state"].value_counts().to_dict()
    if runset.roots:
        per_root = r["root"].value_counts().to_dict()
        where = ("Compare mode, one label per root (appended to every algorithm as `[label]`): "
                 + "; ".join(f"`[{lab}]` = `{path}` ({per_root.get(lab, 0)} run folders)" for lab, path in runset.roots)
                 + f". {len(r)} run folders in all")
    else:
        where = f"Root: `{runset.root}`; {len(r)} run folders"
    return [
        f"{where} ({', '.join(f'{k}: {v}' for k, v in sorted(states.items()))}); "
        f"{n_runs(scored.scores)} scored{rows}, {n_runs(scored.excluded)} excluded.",
        f"Code commit of the runs: {run_commits(runset)}; report code: {code}.",
        f"Seeds: {', '.join(map(str, seeds)) if len(seeds) <= 30 else f'{len(seeds)} distinct'}.",
        f"Matched budget: {', '.join(budgets) or 'not recorded'}.",
        f"Model: {uniq('model')}; tasks: {uniq('task')}.",
        f"Hardware (device/precision/threads): {', '.join(hw) or 'not recorded'}; hosts: {uniq('host')}; "
        f"CPU models: {uniq('cpu_model')}; torch: {uniq('torch')}.",
        "Tuning budget (configurations under this root, seeds excluded): " + tuning_budget(runset) + ".",
        f"Report settings: score={cfg.score}{f' (k={cfg.k})' if cfg.score == 'last-k' else ''}, metric={cfg.metric}, "
        f"reps={cfg.reps}, CI={cfg.ci} at {cfg.confidence:.0%}, random state {cfg.seed}, x={cfg.x}, "
        f"normalise={cfg.normalise}, per_dataset={ {None: 'auto', True: 'on', False: 'off'}[cfg.per_dataset]}; "
        "generated "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
    ]


def source_of(runset: RunSet) -> dict[str, str]:
    """Scored run id -> run folder id, for the pseudo-runs of `battery.expand` ({} without any)."""
    r = runset.runs
    if "source_run_id" not in r:
        return {}
    return dict(zip(r["run_id"], r["source_run_id"], strict=True))


def tuning_budget(runset: RunSet) -> str:
    """Per algo.name: distinct configurations per task and runs (and any spec `tuning` entry).

    Only what lies under the root is counted: a tuning sweep kept elsewhere is invisible
    unless spec.json declares it under `tuning`.
    """
    r = runset.runs.assign(cfg=[config_fingerprint(runset.specs[i]) for i in runset.runs["run_id"]])
    parts = []
    for algo, g in r.groupby("algo", sort=True):
        per_task = g.groupby("task")["cfg"].nunique()
        parts.append(f"{algo}: {per_task.max()} config(s) per task (variants included), {len(g)} run(s)")
    declared = {json.dumps(s["tuning"], sort_keys=True) for s in runset.specs.values() if s.get("tuning")}
    return "; ".join(parts) + (f"; declared in spec.json: {', '.join(sorted(declared))}" if declared else "")


def headlines(lb: pd.DataFrame, inter: pd.DataFrame | None, percent: bool, confidence: float = 0.95,
              verdicts: pd.DataFrame | None = None) -> list[str]:
    """One sentence per task (`render.summary_lines`: which algorithms beat the base and which
    pairs are distinguishable, Holm-adjusted) and per interaction contrast (unadjusted CI)."""
    g = (lambda v: f"{100 * v:+.1f}" if percent else f"{v:+.3g}")  # noqa: E731
    out = summary_lines(verdicts, lb, percent) if verdicts is not None else []
    for row in (inter.itertuples(index=False) if inter is not None else []):
        out.append(f"{row.algo} on {row.task} ({row.sweep}): interaction {row.factor_a} x {row.factor_b} "
                   f"{g(row.interaction)} [{g(row.ci_low)}, {g(row.ci_high)}] ({confidence:.0%} CI, unadjusted) "
                   f"over {row.n_seeds} seed(s).")
    return out


def examples(runset: RunSet, scored: Scored, n: int) -> pd.DataFrame:
    """Up to `n` example completions per algorithm (latest step first)."""
    s = runset.samples
    cols = ["algorithm", "run_id", "step", "split", "prompt", "completion", "reward", "gold"]
    if s.empty or n <= 0:
        return pd.DataFrame(columns=cols)
    label = scored.scores.set_index("run_id")["algorithm"]
    s = s[s["run_id"].isin(label.index)].assign(algorithm=lambda d: d["run_id"].map(label))
    s = s.sort_values(["algorithm", "step"], ascending=[True, False], kind="stable").groupby("algorithm").head(n)
    s = s.assign(**{c: s[c].astype(str).str.slice(0, MAX_TEXT) for c in ("prompt", "completion", "gold")})
    return s[cols].reset_index(drop=True)


def build_report(root: Path | Sequence[Path], out: Path, config: ReportConfig | None = None) -> Path:
    """Build the full report of the run folders under `root` into `out`.

    `root` may be a sequence of roots: a compare report, every algorithm labelled by the folder
    name of its root (`rlsuite.reports.load.load_roots`). Returns the path of `out/report.html`. Raises
    ReportError for bad input (no run folders, a missing root, unknown metric or reference, `out`
    inside a run folder). Without the `plotly` package report.html has no interactive figures
    (a warning and a notice in the page say so); everything else is written as usual.
    """
    cfg = config or ReportConfig()
    roots = [Path(root)] if isinstance(root, (str, Path)) else [Path(r) for r in root]
    out = Path(out)
    source = load_roots(roots, max_depth=cfg.max_depth, samples_per_run=max(20, cfg.examples_per_algorithm))
    check_out(out, source)
    runset, expanded = battery.expand(source, cfg)  # battery runs -> one scored row per dataset
    scored = score_runs(runset, cfg)
    scored = dataclasses.replace(scored, notes=scored.notes + expanded)
    check_x(scored, cfg)
    ctx = Context(runset, scored, cfg, source)
    sections = {
        "Leaderboard and comparisons": score_tables(ctx)[0], "Stability": stability_tables(ctx),
        "Ablations": ablation_tables(ctx), "Time to target": timing_tables(ctx),
        "Compute scaling": scaling_tables(ctx),
        "Runs": [Table("excluded_runs", "Excluded runs", scored.excluded, "", "Runs not scored, and why."),
                 Table("examples", "Example completions", examples(runset, scored, cfg.examples_per_algorithm),
                       "", "From samples.jsonl (latest step first).")],
    }
    out.mkdir(parents=True, exist_ok=True)
    written = [f for tabs in sections.values() for t in tabs for f in write_table(t, out)]
    fits = sections["Compute scaling"][0].frame
    drawn = cfg.figures and len(scored.scores) > 0
    profile = profile_frame(scored, cfg) if drawn else None
    figs = build_figures(runset, scored, fits, cfg, out, profile) if drawn else []
    js = interactive.plotly_js() if drawn else None
    if drawn and js is None:
        warnings.warn("plotly is not installed: report.html has no interactive figures (tables and static figures "
                      f"are complete); install it with {interactive.PLOTLY_HINT}", stacklevel=2)
    plots = interactive_plots(ctx, sections, profile) if js is not None else []
    blocks = compose(ctx, sections, figs, written, plots, plotly_missing=drawn and js is None)
    names = [lab for lab, _ in runset.roots] or [root_name(roots[0])]
    title = f"rlsuite report: {' vs '.join(names)}"
    atomic_write_text(out / "report.md", render_markdown(title, blocks))
    # report.html opens on its figures (each task's learning curves beside its verdicts, above the
    # fold), then the summary and the tables; report.md keeps the summary first
    return atomic_write_text(out / "report.html", render_html(title, section_first(blocks, FIGURES), js))


def root_name(root: Path) -> str:
    return root.name or str(root)


def interactive_plots(ctx: Context, sections: dict[str, list[Table]], profile: pd.DataFrame | None
                      ) -> list[interactive.Plot]:
    """report.html's interactive figures, drawn from the tables just built."""
    by_name = {t.name: t.frame for tabs in sections.values() for t in tabs}
    colors = hex_palette(ctx.scored.scores["algorithm"].unique().tolist())
    return interactive.build_plots(
        ctx.runset, ctx.scored, ctx.cfg, ctx.percent, agg=ctx.aggregate_intervals,
        poi=by_name.get("prob_improvement"), profile=profile, abl=by_name.get("ablation"),
        inter=by_name.get("interactions"), stab=by_name.get("stability_counts"),
        flags=tables.stability_counts(ctx.scored), colors=colors, verdicts=by_name.get("verdicts"),
        agg_note=ctx.norm.caption(ctx.percent) if ctx.norm is not None else "")


EMPTY_TEXT = {"stability_runs": "No flagged runs: every scored run is stable.",
              "problem_intervals": "No per-problem results: the intervals are conditional on the test set."}
"""What the report prints instead of an empty table (the .csv/.md/.tex files are still written)."""


FIGURES = "Figures"
"""The section report.html opens on (`render.section_first`)."""


def _plot_blocks(plots: list[interactive.Plot]) -> list[Block]:
    """Each plot under its heading; consecutive plots of one `group` side by side (a `row`)."""
    out: list[Block] = []
    i = 0
    while i < len(plots):
        j = i + 1
        while plots[i].group and j < len(plots) and plots[j].group == plots[i].group:
            j += 1
        cols = [[Block("h3", p.title), Block("plot", p)] for p in plots[i:j]]
        out += [Block("row", cols)] if len(cols) > 1 else cols[0]
        i = j
    return out


def _tables(tabs: list[Table]) -> list[Block]:
    return [b for t in tabs for b in (Block("h3", t.title),
                                      Block("p", EMPTY_TEXT[t.name]) if t.frame.empty and t.name in EMPTY_TEXT
                                      else Block("table", t))]


def compose(ctx: Context, sections: dict[str, list[Table]], figs: list[Figure], written: list[str],
            plots: list[interactive.Plot] | None = None, plotly_missing: bool = False) -> list[Block]:
    """The report's blocks, in report.md's reading order: summary, provenance, leaderboard, then each
    section's tables (empty sections skipped), figures (report.html: the interactive ones, each
    task's curves beside its verdicts, then the static ones collapsed), runs, unreadable input,
    files. report.html moves the figures to the front (`build_report`)."""
    score_tabs = sections["Leaderboard and comparisons"]
    lb = next(t for t in score_tabs if t.name == "leaderboard")  # planned comparisons and checks come first
    inter = next((t.frame for t in sections["Ablations"] if t.name == "interactions"), None)
    explained = [f"`{c}`: {d}" for c, d in lb.columns_explained.items()]
    verdicts = next((t.frame for t in score_tabs if t.name == "verdicts"), None)
    heads = headlines(lb.frame, inter, ctx.percent, ctx.cfg.confidence, verdicts) or ["No scored runs."]
    blocks = [Block("h2", "Summary"), Block("list", heads)]
    if verdicts is not None and len(verdicts):
        blocks.append(Block("note", verdict_footer(verdicts, ctx.cfg.confidence)))
    if ctx.runset.env_warnings:  # cells pooling different CPU models / torch versions (reports.load)
        blocks += [Block("h3", "Warnings"), Block("list", [f"Warning: {w}" for w in ctx.runset.env_warnings])]
    blocks += [Block("h2", "What this report summarises"),
               Block("list", provenance(ctx.source, ctx.scored, ctx.cfg, ctx.code, source_of(ctx.runset))
                     + list(ctx.scored.notes))]
    confirm = [t for t in score_tabs if t.name in ("planned", "checks")]  # the study's own questions first
    if confirm:
        blocks += [Block("h2", "Planned comparisons")] + _tables(confirm)
    blocks += [Block("h2", "Leaderboard"), Block("table", lb), Block("p", "Columns:"), Block("list", explained)]
    blocks += [Block("h2", "Comparisons")] + _tables([t for t in score_tabs if t is not lb and t not in confirm])
    for name in ("Stability", "Ablations", "Time to target", "Compute scaling"):
        if sections[name]:
            blocks += [Block("h2", name)] + _tables(sections[name])
    static = [b for f in figs for b in (Block("h3", f.title), Block("figure", f))]
    if plots:
        blocks += [Block("h2", FIGURES),
                   Block("html_only", [Block("p", "Interactive figures (hover for values, drag to zoom, click the "
                                                  "legend to hide or show an algorithm; the static PNG/SVG figures "
                                                  "for papers follow, collapsed). The summary and the tables "
                                                  "follow the figures.")]
                         + _plot_blocks(plots))]
        if static:
            blocks.append(Block("details", ("Static figures (PNG and SVG files under figures/, as in report.md)",
                                            static)))
    elif figs or plotly_missing:
        blocks.append(Block("h2", FIGURES))
        if plotly_missing:
            blocks.append(Block("html_only", [Block("notice", "No interactive figures: the `plotly` package is not "
                                                    f"installed ({interactive.PLOTLY_HINT}); the static figures "
                                                    "follow.")]))
        blocks += static
    blocks += [Block("h2", "Runs")] + _tables(sections["Runs"])
    problems = list(ctx.runset.problems)
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = [f"... and {len(problems) - len(shown)} more"] if len(problems) > len(shown) else []
        blocks += [Block("h3", "Unreadable input (skipped)"), Block("pre", "\n".join(shown + more))]
    blocks += [Block("h2", "Files"), Block("p", "Tables as CSV (raw values), Markdown and LaTeX (booktabs): "
                                                + ", ".join(f"`{w}`" for w in written) + ".")]
    return blocks
