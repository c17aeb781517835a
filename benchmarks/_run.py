"""Shared by the learning benchmarks: one ``rlsuite run`` in a subprocess, read back.

``run_cli(args)`` runs ``rlsuite run ARGS`` (``boot``: the Python statement that starts the CLI,
so a benchmark can import a task module first), raises with the tail of stderr when the run
fails, and returns the run's folder contents the benchmarks use: ``val`` and ``test`` eval
rows, ``status.json``, ``env.json`` and the wall time of the process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rlsuite.suite.runfolder import read_jsonl

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from rlsuite.suite.cli import main; sys.exit(main(sys.argv[1:]))"


def run_cli(args: list[str], label: str, boot: str = CLI) -> dict:
    t0 = time.time()
    res = subprocess.run([sys.executable, "-c", boot, "run", *args], capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{label} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    run_dir = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    evals = read_jsonl(run_dir / "evals.jsonl")
    return {"run_dir": run_dir, "val": [e for e in evals if e["split"] == "val"],
            "test": [e for e in evals if e["split"] == "test"],
            "status": json.load(open(run_dir / "status.json")), "env": json.load(open(run_dir / "env.json")),
            "process_wall_s": wall}
