"""Time a full report over 1,000 synthetic run folders, and measure the coverage of its CIs.

Scale part: generates the runs into a temporary directory (5 tasks x 10 algorithms x 20
seeds by default; 50 training steps and 11 evals each), builds the report with the
published settings (2000 resamples; 200 refits per scaling fit), and writes the timings and
a phase breakdown to benchmarks/report_scale/report_scale.md.

Coverage part: the fraction of nominal 95% intervals that cover the true value, for every
CI method (percentile, BCa, Student-t, studentized bootstrap) of one sample's mean at
n = 2, 3, 5, 10, 20 seeds, and for the stratified aggregates (mean, IQM over 2 and 5 tasks;
percentile, t, studentized), on normal, Beta(2, 8) and collapse-mixture scores; written to
benchmarks/report_scale/report_coverage.md with the tables as Python literals, which
reports/coverage.json stores for `CELL_COVERAGE` and `AGGREGATE_COVERAGE` (the `--ci auto` choice
per n). About 5 minutes on 2 shared cores.

Run: python benchmarks/report_scale/report_scale.py [--part all|scale|coverage] [--runs-per-cell 20]
     [--coverage-draws 2000] [--aggregate-draws 500]
"""

from __future__ import annotations

from rlsuite.suite.runfolder import cpu_model
import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rlsuite.reports import (  # noqa: E402
    ReportConfig,
    build_report,
    stats,  # noqa: E402
    synthetic,
)
from rlsuite.reports.load import load_runs  # noqa: E402
from rlsuite.reports.scores import score_runs  # noqa: E402

TASKS = ["arith", "gsm8k", "math", "mbpp", "nq"]
RESULTS = Path(__file__).resolve().parent / "report_scale.md"
COVERAGE_RESULTS = Path(__file__).with_name("report_coverage.md")
"""Where it stays until ``rlsuite.reports.stats.COVERAGE_FILE`` (the report's note names it) moves with it."""


def arms() -> list[synthetic.Arm]:
    """10 algorithms: a plain leaderboard plus a 2x2 ablation and a batch-size pair."""
    out = [synthetic.Arm(algo=name, asymptote=a) for name, a in
           [("grpo", 0.55), ("comppo", 0.62), ("dapo", 0.58), ("gspo", 0.57)]]
    out.append(synthetic.Arm(algo="ppo", asymptote=0.5, diverge_at=0.8))
    out += [synthetic.Arm(algo="cispo", sweep="abl", asymptote=0.55),
            synthetic.Arm(algo="cispo", sweep="abl", variant="a", factors={"algo.a": True}, asymptote=0.57),
            synthetic.Arm(algo="cispo", sweep="abl", variant="b", factors={"algo.b": True}, asymptote=0.56),
            synthetic.Arm(algo="cispo", sweep="abl", variant="ab", factors={"algo.a": True, "algo.b": True},
                          asymptote=0.61)]
    out.append(synthetic.Arm(algo="grpo", sweep="batch", variant="b64", factors={"rollout.prompts_per_step": 64},
                             prompts_per_step=64, samples_per_s=600.0, midpoint=0.4))
    return out


# --- coverage study ---------------------------------------------------------------------

def _normal(rng, size):
    return rng.normal(0.0, 1.0, size)


def _beta(rng, size):
    return rng.beta(2.0, 8.0, size)


def _collapse(rng, size):
    """90% of runs near 0.6 (sd 0.05), 10% collapsed near 0.1 (sd 0.05)."""
    return np.where(rng.random(size) < 0.1, rng.normal(0.1, 0.05, size), rng.normal(0.6, 0.05, size))


DISTS = {"normal": (_normal, 0.0, 1.0), "Beta(2, 8)": (_beta, 0.2, (2 * 8 / (10**2 * 11)) ** 0.5),
         "collapse mixture": (_collapse, 0.55, (0.05**2 + 0.09 * 0.5**2) ** 0.5)}
"""name -> (sampler(rng, size), true mean, true sd); names as stats.COVERAGE_DISTS."""
CELL_NS = (2, 3, 5, 10, 20)
AGG_NS = (2, 3, 5, 10, 20)
AGG_TASKS = (2, 5)


def cell_coverage(dist: str, n: int, method: str, draws: int, reps: int = 2000) -> tuple[float, float]:
    """(coverage, mean width) of nominal 95% CIs of the mean of n draws (the report's own
    `stats.bootstrap_ci`); the same samples for every method (random state 2024)."""
    sample, mean, _ = DISTS[dist]
    rng = np.random.default_rng(2024)
    hits, width = 0, 0.0
    for i in range(draws):
        ci = stats.bootstrap_ci(sample(rng, n), reps=reps, method=method, seed=i)
        hits += ci.low <= mean <= ci.high
        width += ci.high - ci.low
    return hits / draws, width / draws


def true_iqm(dist: str, n_tasks: int) -> float:
    """IQM of the pooled population (tasks offset by 0, 1, ... sd, equal weights), 4M draws."""
    sample, _, sd = DISTS[dist]
    rng = np.random.default_rng(7)
    x = np.concatenate([sample(rng, 4_000_000 // n_tasks) + j * sd for j in range(n_tasks)])
    return float(stats.iqm(x))


def aggregate_coverage(dist: str, n_tasks: int, n: int, draws: int, reps: int) -> dict[str, dict[str, tuple]]:
    """(coverage, median width) of the stratified aggregate intervals (`stats.stratified_interval`)
    over n_tasks tasks (task j = the distribution shifted by j sd), n seeds each:
    {"mean": {method: (cov, width)}, "iqm": {...}}."""
    sample, mean, sd = DISTS[dist]
    truth = {"mean": mean + sd * (n_tasks - 1) / 2, "iqm": true_iqm(dist, n_tasks)}
    rng = np.random.default_rng(2025)
    hits = {name: dict.fromkeys(stats.STRATIFIED_METHODS, 0) for name in truth}
    widths = {name: {m: [] for m in stats.STRATIFIED_METHODS} for name in truth}
    for i in range(draws):
        scores = sample(rng, (n, n_tasks)) + sd * np.arange(n_tasks)
        for method in stats.STRATIFIED_METHODS:
            ints = stats.stratified_interval(scores, ("mean", "iqm"), reps=reps, seed=i, method=method)
            for name in truth:
                hits[name][method] += ints[name].low <= truth[name] <= ints[name].high
                widths[name][method].append(ints[name].high - ints[name].low)
    return {name: {m: (h / draws, float(np.median(widths[name][m]))) for m, h in row.items()}
            for name, row in hits.items()}


def _literal(table: stats.CoverageTable, indent: str) -> list[str]:
    out = [f"stats.CoverageTable({table.draws}, {{"]
    for n, row in table.rows.items():
        out.append(f"{indent}    {n}: {{")
        out += [f'{indent}        "{m}": ({", ".join(repr(round(c, 4)) for c in v)}),' for m, v in row.items()]
        out.append(f"{indent}    }},")
    return out + [f"{indent}}})"]


def coverage_study(draws: int, agg_draws: int, agg_reps: int) -> list[str]:
    t0 = time.perf_counter()
    rows: dict[int, dict[str, tuple]] = {}
    width: dict[int, dict[str, float]] = {}
    for n in CELL_NS:
        rows[n], width[n] = {}, {}
        for method in stats.CI_METHODS:
            res = [cell_coverage(d, n, method, draws) for d in DISTS]
            rows[n][method] = tuple(round(c, 4) for c, _ in res)
            width[n][method] = res[0][1]
    cell = stats.CoverageTable(draws, rows)
    t_cell = time.perf_counter() - t0
    agg: dict[str, dict[int, stats.CoverageTable]] = {"mean": {}, "iqm": {}}
    agg_width: dict[tuple, float] = {}
    for n_tasks in AGG_TASKS:
        tabs: dict[str, dict[int, dict[str, tuple]]] = {"mean": {}, "iqm": {}}
        for n in AGG_NS:
            per_dist = [aggregate_coverage(d, n_tasks, n, agg_draws, agg_reps) for d in DISTS]
            for name in tabs:
                tabs[name][n] = {m: tuple(round(r[name][m][0], 4) for r in per_dist) for m in per_dist[0][name]}
                for m in per_dist[0][name]:
                    agg_width[(name, n_tasks, n, m)] = per_dist[0][name][m][1]
        for name in tabs:
            agg[name][n_tasks] = stats.CoverageTable(agg_draws, tabs[name])
    t_agg = time.perf_counter() - t0 - t_cell
    dists = " | ".join(DISTS)
    rule = ("`auto` = the method `--ci auto` uses at this n (`stats.choose_method`: best worst-case coverage, "
            "capped at 95%; methods within two Monte Carlo standard errors of the best are tied and go to "
            f"{' > '.join(stats.PREFERENCE)}; an n between rows uses the row below it, an n above the last row "
            "the last row).")
    lines = [
        "# Coverage of the report's nominal 95% intervals", "",
        f"`python benchmarks/report_scale/report_scale.py --part coverage` on {cpu_model()} "
        f"({os.cpu_count()} CPU(s), shared), "
        f"Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"{time.strftime('%Y-%m-%d')}; {t_cell:.0f} s + {t_agg:.0f} s.", "",
        "Coverage = fraction of intervals containing the true value. Distributions: normal; Beta(2, 8) "
        "(right-skewed, skewness 0.83); collapse mixture (90% of runs ~ N(0.6, 0.05), 10% collapsed "
        "~ N(0.1, 0.05); true mean 0.55). The same samples for every method (fixed random states).", "",
        "## One sample's mean (leaderboard cells, per-task paired differences; `stats.bootstrap_ci`)", "",
        f"{draws} samples per cell, 2000 resamples per bootstrap; standard error of a coverage near 95% is "
        f"about {100 * (0.95 * 0.05 / draws) ** 0.5:.1f} points. `width` = mean width on normal data "
        "relative to Student-t's. " + rule, "",
        f"| n | method | {dists} | width | auto |", "|---|---|---|---|---|---|---|",
    ]
    for n in CELL_NS:
        pick = stats.choose_method(n, cell)
        for m in stats.CI_METHODS:
            covs = " | ".join(f"{100 * c:.1f}%" for c in cell.rows[n][m])
            mark = "**yes**" if m == pick else ""
            lines.append(f"| {n} | {m} | {covs} | {width[n][m] / width[n]['t']:.2f} | {mark} |")
    lines += ["", "## Stratified aggregates (`stats.stratified_interval`)", "",
              f"T tasks (task j = the distribution shifted by j sd), n seeds per task; {agg_draws} samples per cell, "
              f"{agg_reps} resamples; true IQM from 4M draws of the pooled population. `t` = Welch-Satterthwaite "
              "(mean) or Tukey-McLaughlin with Satterthwaite df (IQM); studentized = bootstrap-t with the analytic SE "
              "(mean) or the stratified Tukey-McLaughlin SE (IQM). `width` = median width on normal data relative "
              f"to t's. Standard error near 95%: about {100 * (0.95 * 0.05 / agg_draws) ** 0.5:.1f} points. "
              "A report with T tasks uses the table of the largest measured T' <= T (3-4 tasks: T = 2).", ""]
    for name in agg:
        for n_tasks, table in agg[name].items():
            lines += [f"### {name}, T = {n_tasks} tasks", "", f"| n | method | {dists} | width | auto |",
                      "|---|---|---|---|---|---|---|"]
            for n in AGG_NS:
                pick = stats.choose_method(n, table, stats.STRATIFIED_METHODS)
                for m, covs in table.rows[n].items():
                    ref = agg_width[(name, n_tasks, n, "t")]
                    w = f"{agg_width[(name, n_tasks, n, m)] / ref:.2f}" if ref > 0 else "n/a"
                    lines.append(f"| {n} | {m} | " + " | ".join(f"{100 * c:.1f}%" for c in covs)
                                 + f" | {w} | {'**yes**' if m == pick else ''} |")
            lines.append("")
    lines += ["## As stored in reports/stats.py", "", "```python", "CELL_COVERAGE = " + "\n".join(_literal(cell, ""))]
    lines.append("AGGREGATE_COVERAGE = {")
    for name, by_tasks in agg.items():
        lines.append(f'    "{name}": {{')
        for n_tasks, table in by_tasks.items():
            lines.append(f"        {n_tasks}: " + "\n".join(_literal(table, "        ")) + ",")
        lines.append("    },")
    lines += ["}", "```", ""]
    return lines


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["all", "scale", "coverage"], default="all")
    ap.add_argument("--runs-per-cell", type=int, default=20, help="seeds per (task, algorithm)")
    ap.add_argument("--coverage-draws", type=int, default=2000, help="samples per cell of the one-sample study")
    ap.add_argument("--aggregate-draws", type=int, default=500, help="samples per cell of the aggregate study")
    ap.add_argument("--aggregate-reps", type=int, default=500, help="resamples per aggregate interval")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--coverage-out", type=Path, default=COVERAGE_RESULTS)
    args = ap.parse_args()
    if args.part in ("all", "scale"):
        write(args.out, scale_study(args.runs_per_cell))
    if args.part in ("all", "coverage"):
        write(args.coverage_out, coverage_study(args.coverage_draws, args.aggregate_draws, args.aggregate_reps))


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print("\n".join(lines))


def scale_study(runs_per_cell: int) -> list[str]:
    seeds = list(range(runs_per_cell))
    lines = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        _, t_gen = timed(synthetic.write_root, root, arms(), TASKS, seeds, steps=50, eval_every=5)
        n_runs = sum(1 for _ in root.iterdir())
        cfg = ReportConfig()
        runset, t_load = timed(load_runs, root)
        _, t_score = timed(score_runs, runset, cfg)
        _, t_total = timed(build_report, root, Path(tmp) / "report", cfg)
        _, t_nofig = timed(build_report, root, Path(tmp) / "report_nofig", ReportConfig(figures=False))
        size = sum(f.stat().st_size for f in (Path(tmp) / "report").rglob("*") if f.is_file())
        html = (Path(tmp) / "report" / "report.html").stat().st_size
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines += [
        "# Report scale benchmark", "",
        f"`python benchmarks/report_scale/report_scale.py --part scale` on {cpu_model()}, "
        f"{os.cpu_count()} CPU(s) (shared), Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.", "",
        f"Input: {n_runs} synthetic run folders ({len(TASKS)} tasks x {len(arms())} algorithms x "
        f"{len(seeds)} seeds; 50 training steps and 11 evals per run), generated in {t_gen:.1f} s.",
        "Settings: published defaults (2000 bootstrap resamples, `--ci auto`, 200 refits per scaling fit, "
        "PNG + SVG figures).", "",
        "| phase | wall seconds |", "|---|---|",
        f"| load (run folders -> frames) | {t_load:.1f} |",
        f"| score + stability | {t_score:.1f} |",
        f"| **full report (load, tables, fits, figures, render)** | **{t_total:.1f}** |",
        f"| report without figures | {t_nofig:.1f} |", "",
        f"The 2 cores are shared with other work (1-min load average {load[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after), so wall times vary by 2x or more with the load; figures (32 PNG/SVG "
        "saves) and the 50 scaling fits x 200 bootstrap refits dominate.", "",
        f"Output: {size / 1e6:.1f} MB in total, report.html {html / 1e6:.1f} MB; peak RSS {rss:.0f} MB.", "",
        f"Coverage of the report's intervals: `benchmarks/results/{COVERAGE_RESULTS.name}` (`--part coverage`).", "",
    ]
    return lines


if __name__ == "__main__":
    main()
