"""Shared by the benchmark scripts, each of which lives in its study's folder ``benchmarks/<study>/``
and puts this folder on ``sys.path`` before importing it::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py

* ``run_cli(args)`` runs ``rlsuite run ARGS`` in a subprocess (``boot``: the Python statement that
  starts the CLI, so a benchmark can import a task module first), raises with the tail of stderr
  when the run fails, and returns the run's folder contents the benchmarks use: ``val`` and
  ``test`` eval rows, ``status.json``, ``env.json`` and the wall time of the process.
* ``machine()``, ``command(__file__, *args)`` and ``write_results(path, text)``: the machine and
  command every results file states, and the tail every benchmark ends with (print the text, write
  the results file, its folder made).
* ``matmul_peak`` and ``memory_bandwidth``: the bounds the speed benchmarks measure against
  (``rollout``, ``decode_bound``, ``vs_trl``).
"""

from __future__ import annotations

import math

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from rlsuite.suite.runfolder import cpu_model, read_jsonl

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


# -- what a results file states, and its writing --------------------------------------------------
def machine() -> str:
    """``<CPU model> (<architecture>), <n> cores``: the machine as a results file names it."""
    return f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} cores"


def command(script: str | Path, *args: str, python: str = "python") -> str:
    """``python benchmarks/<study>/<script>.py ARGS``: the command as a results file names it
    (``script``: the benchmark's ``__file__``; its path from the repository root)."""
    path = Path(script).resolve()
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return " ".join([python, path.as_posix(), *args])


def write_results(path: Path, text: str, keep: str = "") -> None:
    """The tail of every benchmark: print ``text``, then write it to the results file ``path`` (its
    folder made), followed by ``keep`` (another script's section of the same file, kept as it was)."""
    print(text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + keep)


# -- the machine's bounds ---------------------------------------------------------------------------
def matmul_peak(threads: int, n: int = 512) -> float:
    """fp32 FLOP/s of an ``n × n`` ``torch.mm`` at the current thread count (``threads`` is for the record)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    reps = max(2, int(20 * (512 / n) ** 3))
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def memory_bandwidth(mb: int = 512, reps: int = 5) -> float:
    """Bytes/s of a large ``copy_`` (read + write counted) at the current thread count."""
    import torch

    n = mb * (1 << 20) // 4
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    return 2 * 4 * n * reps / (time.perf_counter() - t0)


def fmt_number(v, digits: int = 3) -> str:
    """A results-table number: ``—`` for None or NaN, ``±∞``, small values in ``g`` format."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—" if v is None or math.isnan(v) else ("∞" if v > 0 else "−∞")
    return f"{v:.{digits}g}" if abs(v) < 1e-2 and v != 0 else f"{v:.{digits}f}"


def md_table(rows: list[dict], cols: list[str]) -> str:
    """A Markdown table of ``rows`` (dicts) in the columns ``cols`` (a missing cell is empty)."""
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out)
