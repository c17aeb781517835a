"""Shared driver of the sweep benchmarks (``benchmarks/<study>/<study>.py``): run a bundled sweep locally,
report, write a results file.

The table comes from the real report (`rlsuite report`): final greedy test accuracy per
algorithm with the bootstrap CI over seeds and the stability count, plus the ablation table
when the sweep has arms. Wall time is measured around the whole sweep.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import command, machine, write_results

from rlsuite.suite.runfolder import read_jsonl

ROOT = Path(__file__).resolve().parent.parent


def gains_table(root: Path) -> list[str]:
    """Per algorithm: final greedy test accuracy − the run's own step-0 test accuracy, per seed."""
    import json

    gains: dict[str, dict[int, float]] = {}
    for run in sorted(p for p in root.iterdir() if (p / "evals.jsonl").exists()):
        spec = json.loads((run / "spec.json").read_text())
        ev = read_jsonl(run / "evals.jsonl")
        key = next((k for k in ev[0] if k.startswith("eval/") and k.endswith("/greedy_acc")), None)
        test = [e for e in ev if e["split"] == "test" and key in e]
        if len(test) < 2 or test[0]["step"] != 0 or not test[-1].get("final"):
            continue
        label = spec["algo"]["name"] + (f":{spec['variant']}" if spec.get("variant") else "")
        gains.setdefault(label, {})[spec["seed"]] = 100 * (test[-1][key] - test[0][key])
    seeds = sorted({s for g in gains.values() for s in g})
    rows = ["| algorithm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | min |",
            "|---|" + "---|" * (len(seeds) + 2)]
    for label, g in sorted(gains.items(), key=lambda kv: -sum(kv[1].values()) / len(kv[1])):
        vals = [g.get(s) for s in seeds]
        got = [v for v in vals if v is not None]
        rows.append(f"| {label} | " + " | ".join("n/a" if v is None else f"{v:+.1f}" for v in vals)
                    + f" | {sum(got) / len(got):+.1f} | {min(got):+.1f} |")
    return ["Points of greedy test accuracy over each run's own step-0 test eval (the committed base; "
            "the same 200 test prompts).", "", *rows]


def main(spec: str, results: str, title: str, note: str = "") -> None:
    ap = argparse.ArgumentParser(description=f"run the `{spec}` sweep and write {results}")
    ap.add_argument("--out", type=Path, default=None, help="sweep root (default: a temporary folder)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--report-only", type=float, default=None, metavar="WALL_MIN",
                    help="the sweep already ran into --out (in WALL_MIN minutes): only rebuild the results file")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix=f"rlsuite-{spec}-"))
    t0 = time.time()
    if args.report_only is not None:  # the runs are already in --out: rebuild the results file only
        res = subprocess.CompletedProcess([], 0)
    else:
        res = subprocess.run([sys.executable, "-m", "rlsuite.suite.cli", "sweep", "run", spec, "--out", str(out),
                              "--workers", str(args.workers)], cwd=ROOT)
    wall = time.time() - t0 if args.report_only is None else 60 * args.report_only
    if res.returncode not in (0, 1):
        sys.exit(f"sweep failed with exit {res.returncode}")
    from rlsuite.reports.build import build_report
    from rlsuite.reports.config import ReportConfig
    from rlsuite.sweeps.spec import load

    name = load(spec).name
    report = out / name / "report"
    build_report(out / name, report, ReportConfig(reps=2000))
    parts = [f"# {title}", "", note, "",
             f"Command: `{command(sys.argv[0])}` (sweep `{spec}`, {args.workers} local workers, "
             f"1 torch thread each). Machine: {machine()} (shared with other work "
             f"while it ran). Sweep wall time: {wall / 60:.1f} min. Full report: `rlsuite report <root>/{name}`.", "",
             "Scores: final greedy test accuracy, %.", "", (report / "leaderboard.md").read_text()]
    parts += ["## Gain over the base per seed", "", *gains_table(out / name), ""]
    if (report / "ablation.md").exists():
        parts += ["## Ablation (each arm vs its base, paired over seeds)", "", (report / "ablation.md").read_text()]
    if (report / "stability_counts.md").exists():
        parts += [(report / "stability_counts.md").read_text()]
    flagged = (report / "stability_runs.csv")
    if flagged.exists() and len(flagged.read_text().strip().splitlines()) > 1:
        parts += [(report / "stability_runs.md").read_text()]
    else:
        parts += ["## Flagged runs", "", "No flagged runs: every scored run is stable."]
    summary = (report / "report.md").read_text().split("## Summary", 1)[-1].split("\n## ", 1)[0].strip()
    at = parts.index("Scores: final greedy test accuracy, %.")
    parts[at:at] = ["## Summary (from the report)", "", summary, ""]
    write_results(ROOT / results, "\n".join(parts) + "\n")
