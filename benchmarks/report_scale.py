"""Time a full report over 1,000 synthetic run folders, and measure bootstrap CI coverage.

Generates the runs into a temporary directory (5 tasks x 10 algorithms x 20 seeds by
default; 50 training steps and 11 evals each), builds the report with the published
settings (2000 resamples; 200 refits per scaling fit), and writes the timings, a phase
breakdown and the measured coverage of nominal 95% CIs (the caveat printed under every
table) to benchmarks/results/report_scale.md.

Run: python benchmarks/report_scale.py [--runs-per-cell 20] [--coverage-draws 10000]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reports import ReportConfig, build_report, synthetic  # noqa: E402
from reports.load import load_runs  # noqa: E402
from reports.scores import score_runs  # noqa: E402
from reports.stats import bootstrap_ci  # noqa: E402

TASKS = ["arith", "gsm8k", "math", "mbpp", "nq"]
RESULTS = Path(__file__).resolve().parent / "results" / "report_scale.md"


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


def coverage(n: int, method: str, draws: int) -> float:
    """Fraction of nominal 95% bootstrap CIs of the mean (n normal samples) that cover it."""
    rng = np.random.default_rng(2024)
    hits = 0
    for i in range(draws):
        ci = bootstrap_ci(rng.normal(0.0, 1.0, n), reps=2000, method=method, seed=i)
        hits += ci.low <= 0.0 <= ci.high
    return hits / draws


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-per-cell", type=int, default=20, help="seeds per (task, algorithm)")
    ap.add_argument("--coverage-draws", type=int, default=10000, help="0 skips the coverage study")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    seeds = list(range(args.runs_per_cell))
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
        f"`python benchmarks/report_scale.py` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU(s) (shared), Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.", "",
        f"Input: {n_runs} synthetic run folders ({len(TASKS)} tasks x {len(arms())} algorithms x "
        f"{len(seeds)} seeds; 50 training steps and 11 evals per run), generated in {t_gen:.1f} s.",
        "Settings: published defaults (2000 bootstrap resamples, percentile CIs, 200 refits per scaling fit, "
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
    ]
    if args.coverage_draws:
        lines += ["## Coverage of nominal 95% bootstrap CIs of a mean", "",
                  f"Normal data, {args.coverage_draws} samples per cell, 2000 resamples each "
                  f"(the caveat under every table):", "",
                  "| seeds n | percentile | BCa |", "|---|---|---|"]
        for n in (3, 5, 10, 20, 50):
            p, b = coverage(n, "percentile", args.coverage_draws), coverage(n, "bca", args.coverage_draws)
            lines.append(f"| {n} | {p:.1%} | {b:.1%} |")
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
