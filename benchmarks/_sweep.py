"""Shared driver of the sweep benchmarks: run a bundled sweep locally, report, write a results file.

The table comes from the real report (`rlsuite report`): final greedy test accuracy per
algorithm with the bootstrap CI over seeds and the stability count, plus the ablation table
when the sweep has arms. Wall time is measured around the whole sweep.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(spec: str, results: str, title: str, note: str = "") -> None:
    ap = argparse.ArgumentParser(description=f"run the `{spec}` sweep and write {results}")
    ap.add_argument("--out", type=Path, default=None, help="sweep root (default: a temporary folder)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix=f"rlsuite-{spec}-"))
    t0 = time.time()
    res = subprocess.run([sys.executable, "-m", "suite.cli", "sweep", "run", spec, "--out", str(out),
                          "--workers", str(args.workers)], cwd=ROOT)
    wall = time.time() - t0
    if res.returncode not in (0, 1):
        sys.exit(f"sweep failed with exit {res.returncode}")
    from reports.build import build_report
    from reports.config import ReportConfig
    from sweeps.spec import load

    name = load(spec).name
    report = out / name / "report"
    build_report(out / name, report, ReportConfig(reps=2000))
    parts = [f"# {title}", "", note, "",
             f"Command: `python benchmarks/{Path(sys.argv[0]).name}` (sweep `{spec}`, {args.workers} local workers, "
             f"1 torch thread each). Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work "
             f"while it ran). Sweep wall time: {wall / 60:.1f} min. Full report: `rlsuite report <root>/{name}`.", "",
             "Scores: final greedy test accuracy, %.", "", (report / "leaderboard.md").read_text()]
    if (report / "ablation.md").exists():
        parts += ["## Ablation (each arm vs its base, paired over seeds)", "", (report / "ablation.md").read_text()]
    if (report / "stability_runs.md").exists():
        parts += ["## Stability per run", "", (report / "stability_runs.md").read_text()]
    path = ROOT / results
    path.write_text("\n".join(parts) + "\n")
    print(path.read_text())
