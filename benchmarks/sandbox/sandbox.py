"""How fast is each sandbox layer, and does each contain the hostile battery?

For every layer combination this machine provides, in one invocation: programs per second
with ``--workers`` workers, warm (forked from a zygote) and fresh (a new sandbox and
interpreter per program), for plain programs and for judged jobs (the solution and the tests
in two processes, what the code tasks grade with), side by side with a plain ``subprocess`` +
``setrlimit`` baseline (no isolation), as a ratio; then the hostile battery and the reward
hacks per combination; then, where ``$RLSUITE_DATA/code`` exists, the grading of every
canonical HumanEval / MBPP solution of the sample data (pass rate and time, judged jobs vs
the version-1 single programs). Writes ``benchmarks/sandbox/sandbox.md``.

    python benchmarks/sandbox/sandbox.py [--workers 2] [--warm-n 600] [--fresh-n 60] [--repeats 3] [--results PATH]

The ``uid`` layer needs an interpreter its uid can read; combinations with it use
``--system-python`` (default /usr/bin/python3) when the running one is not readable.
Rates depend on machine load: the load average before and after is recorded.
"""

from __future__ import annotations

from rlsuite.suite.runfolder import cpu_model
import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules

from rlsuite.tasks.sandbox import Judged, Sandbox, SandboxConfig, SandboxUnavailable, detect  # noqa: E402
from rlsuite.tasks.sandbox.battery import ITEMS, Env, claimed, hacks_claimed, run_battery, run_reward_hacks  # noqa: E402

from common import command, write_results  # noqa: E402

TRIVIAL = "assert sum(range(10)) == 45\n"
HUMANEVAL_LIKE = ("from typing import List\n\n\n"
                  "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
                  "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
                  "            if i != j and abs(a - b) < threshold:\n"
                  "                return True\n    return False\n\n\n"
                  "def check(candidate):\n    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True\n"
                  "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False\n\ncheck(has_close_elements)\n")
_SOL, _TEST = HUMANEVAL_LIKE.split("\n\n\ndef check", 1)
JUDGED_HE = Judged(solution=_SOL + "\n", tests="def check" + _TEST, context="", remote=("has_close_elements",))
CPU = cpu_model() or "?"


def plain_subprocess_rate(python: str, n: int, workers: int, code: str, flags: tuple[str, ...] = ("-S",)) -> float:
    """Baseline: ``python -S -c code`` with rlimits via preexec_fn, ``workers`` at a time."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (5, 6))
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))

    t0 = time.perf_counter()
    running: list[subprocess.Popen] = []
    started = 0
    while started < n or running:
        while started < n and len(running) < workers:
            running.append(subprocess.Popen([python, *flags, "-c", code], preexec_fn=limits, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True))
            started += 1
        running[0].wait()
        running.pop(0)
    return n / (time.perf_counter() - t0)


def sandbox_rate(cfg: SandboxConfig, n: int, code: str, repeats: int) -> tuple[float, str]:
    """Median programs/s over ``repeats`` timed batches of ``n`` (workers started before)."""
    with Sandbox(cfg) as sb:
        sb.run_many([code] * (2 * cfg.workers))  # workers up (warm); one round (fresh)
        rates, bad = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rs = sb.run_many([code] * n)
            rates.append(n / (time.perf_counter() - t0))
            bad += [r.status for r in rs if not r.passed]
        return statistics.median(rates), ("+".join(sb.layers) + (f" ({len(bad)} not passed: {bad[:3]})" if bad else ""))


def grade_samples(data: Path, workers: int) -> list[str]:
    """Every canonical solution of the sample data, graded as the tasks grade (judged jobs) and
    as the version-1 single programs, on the default layers; pass counts and seconds."""
    import rlsuite.tasks.code  # noqa: F401
    from rlsuite.tasks.base import read_jsonl
    from rlsuite.tasks.code import MBPP, CodeConfig, HumanEval, MBPPConfig, humaneval_program, mbpp_program

    lines = [f"## Grading the sample data's canonical solutions ({workers} workers, default layers)", "",
             "| task | rows | judged jobs (version 2): passed | seconds | rows/s | single programs (version 1): "
             "passed | seconds | rows/s |", "|---|---|---|---|---|---|---|---|"]
    for cls, cfgc, fname, sol, prog in ((HumanEval, CodeConfig, "humaneval.jsonl", "canonical_solution",
                                         humaneval_program),
                                        (MBPP, MBPPConfig, "mbpp_sample.jsonl", "code", mbpp_program)):
        rows = read_jsonl(data / fname, cls.FIELDS)
        task = cls(cfgc(name=cls.name, data_path=str(data), sandbox_workers=workers, cache_size=0))
        try:
            task.grade_batch(rows[:2 * workers], [r[sol] for r in rows[:2 * workers]])  # workers up
            t0 = time.perf_counter()
            g = task.grade_batch(rows, [r[sol] for r in rows])
            tj = time.perf_counter() - t0
            t0 = time.perf_counter()
            rs = task.sandbox.run_many([prog(r, r[sol]) for r in rows], task.cfg.timeout_s)
            tp = time.perf_counter() - t0
            layers = "+".join(task.sandbox.layers)
        finally:
            task.close()
        lines.append(f"| {cls.name} ({layers}) | {len(rows)} | {sum(x.correct for x in g)} | {tj:.2f} | "
                     f"{len(rows) / tj:.0f} | {sum(r.passed for r in rs)} | {tp:.2f} | {len(rows) / tp:.0f} |")
        print(lines[-1], flush=True)
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warm-n", type=int, default=600)
    ap.add_argument("--fresh-n", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3, help="timed batches per cell; the median is reported")
    ap.add_argument("--system-python", default="/usr/bin/python3")
    ap.add_argument("--skip-battery", action="store_true")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("RLSUITE_DATA", ROOT.parent / "shared" / "data"))
                    / "code", help="sample data for the canonical-solution grading (skipped when absent)")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "sandbox.md")
    args = ap.parse_args()
    load0 = os.getloadavg()
    d = detect()
    sysd = detect(args.system_python) if os.path.exists(args.system_python) else None
    combos = [("rlimit",), ("uid",), ("landlock",), ("bwrap",), ("bwrap", "landlock"), ("bwrap", "uid", "landlock")]
    lines = ["# Sandbox layers: throughput and the hostile battery", "",
             f"Machine: {CPU}, {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
             f"load average before {load0[0]:.1f} (shared machine: rates are noisy). "
             f"Command: `{command(__file__, '--workers', str(args.workers))}`.", "",
             "Detection (default interpreter, `python=None`):", "", "```", d.report(), "```", ""]
    if sysd is not None and sysd.python != d.python:
        lines += [f"Detection ({args.system_python}):", "", "```", sysd.report(), "```", ""]
    rows, plans = [], []
    for combo in combos:
        det = d
        py = None
        if "uid" in combo and not d.available["uid"] and sysd is not None:
            det, py = sysd, args.system_python
        if not all(det.available[x] for x in combo):
            why = "; ".join(f"{x}: {det.reasons[x]}" for x in combo if not det.available[x])
            rows.append(f"| {'+'.join(combo)} | — | — | — | — | — | — | not available: {why} |")
            continue
        plans.append((combo, py))
    base_py = d.python
    base = {name: statistics.median(plain_subprocess_rate(base_py, args.fresh_n, args.workers, code)
                                    for _ in range(args.repeats))
            for name, code in (("trivial", TRIVIAL), ("humaneval", HUMANEVAL_LIKE))}
    with_site = plain_subprocess_rate(base_py, args.fresh_n, args.workers, TRIVIAL, ())
    print(f"plain subprocess: {base}, with site: {with_site:.0f}/s", flush=True)
    for combo, py in plans:
        res = {}
        used = ""
        for warm in (True, False):
            for name, code in (("trivial", TRIVIAL), ("humaneval", HUMANEVAL_LIKE), ("judged", JUDGED_HE)):
                cfg = SandboxConfig(layers=combo, python=py, workers=args.workers, warm=warm,
                                    allow_unisolated=combo == ("rlimit",))
                try:
                    res[(warm, name)], used = sandbox_rate(cfg, args.warm_n if warm else args.fresh_n, code,
                                                           args.repeats)
                except SandboxUnavailable as e:
                    res[(warm, name)], used = float("nan"), str(e)
        print(combo, res, flush=True)
        pyname = Path(py or base_py).name + (f" ({py})" if py else "")
        rows.append(f"| {used} | {res[(True, 'trivial')]:.0f} ({res[(True, 'trivial')] / base['trivial']:.1f}×) | "
                    f"{res[(True, 'humaneval')]:.0f} ({res[(True, 'humaneval')] / base['humaneval']:.1f}×) | "
                    f"{res[(True, 'judged')]:.0f} ({res[(True, 'judged')] / base['humaneval']:.1f}×) | "
                    f"{res[(False, 'trivial')]:.0f} ({res[(False, 'trivial')] / base['trivial']:.2f}×) | "
                    f"{res[(False, 'humaneval')]:.0f} ({res[(False, 'humaneval')] / base['humaneval']:.2f}×) | "
                    f"{res[(False, 'judged')]:.0f} ({res[(False, 'judged')] / base['humaneval']:.2f}×) | "
                    f"{pyname} |")
    lines += [f"## Programs per second ({args.workers} workers; ratio to the plain-subprocess baseline)", "",
              f"Baseline, plain `subprocess` + `setrlimit` (no isolation), a fresh `python -S -c` per program: "
              f"{base['trivial']:.0f}/s (trivial), {base['humaneval']:.0f}/s (HumanEval-like); with `site` "
              f"(`python -c`) {with_site:.0f}/s (trivial). The sandbox's interpreters also run with `-S`. "
              f"Each cell is the median of {args.repeats} timed batches. "
              f"Warm: {args.warm_n} programs forked from a zygote per worker; fresh: {args.fresh_n} programs, a new "
              "sandbox + interpreter each. *Judged*: the HumanEval-like program as a judged job (the solution "
              "and the tests in two processes, calls crossing as JSON), ratio to the HumanEval-like baseline.", "",
              "| layers | warm, trivial | warm, HumanEval-like | warm, judged | fresh, trivial | "
              "fresh, HumanEval-like | fresh, judged | interpreter |",
              "|---|---|---|---|---|---|---|---|", *rows, ""]
    if not args.skip_battery:
        lines += ["## Hostile battery", "",
                  "✔ contained; ✘ not contained although the combination claims it (a bug); "
                  "○ not contained and not claimed by these layers (by design: e.g. `uid` leaves the network "
                  "open).", "",
                  "| layers | " + " | ".join(ITEMS) + " | claimed contained |", "|---|" + "---|" * (len(ITEMS) + 1)]
        for combo, py in plans:
            cfg = SandboxConfig(layers=combo, python=py, workers=1, memory_mb=256,
                                allow_unisolated=combo == ("rlimit",))
            sb = Sandbox(cfg)
            env = Env(Path(tempfile.mkdtemp(prefix="rlsb-bench-")))
            try:
                outs = run_battery(sb, env, timeout_s=1.0)
            finally:
                sb.close()
                env.close()
                shutil.rmtree(env.root, ignore_errors=True)
            must = claimed(sb.layers)
            cells = ["✔" if o.contained else ("✘" if o.item in must else "○") for o in outs]
            n_claimed = sum(o.contained for o in outs if o.item in must)
            lines.append(f"| {'+'.join(sb.layers)} | " + " | ".join(cells) + f" | {n_claimed}/{len(must)} |")
            for o in outs:
                if not o.contained:
                    lines.append(f"|  ↳ {o.item} | " + o.detail.replace("|", "/") + " |" + " |" * len(ITEMS))
            print(combo, [(o.item, o.contained) for o in outs], flush=True)
        lines.append("")
        lines += ["## Reward hacks", "",
                  "Wrong HumanEval and MBPP answers that try to be graded correct (`tasks/sandbox/battery.py`), "
                  "graded by the code tasks' judged jobs; a hack is caught when both answers are graded wrong. "
                  "*Naive harness*: how many of the 26 answers pass when the tests run in the program's own "
                  "process (version 1).", "",
                  "| layers | caught | claimed caught | not caught | naive harness: passed |", "|---|---|---|---|---|"]
        for combo, py in plans:
            sb = Sandbox(SandboxConfig(layers=combo, python=py, workers=args.workers,
                                       allow_unisolated=combo == ("rlimit",)))
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    outs = run_reward_hacks(sb, Path(tmp) / "gold", native=True)
            finally:
                sb.close()
            must = hacks_claimed(sb.layers)
            missed = ", ".join(o.hack for o in outs if not o.caught) or "—"
            lines.append(f"| {'+'.join(sb.layers)} | {sum(o.caught for o in outs)}/{len(outs)} | "
                         f"{sum(o.caught for o in outs if o.hack in must)}/{len(must)} | {missed} | "
                         f"{sum(o.native_passed for o in outs)}/{2 * len(outs)} |")
            print(lines[-1], flush=True)
        lines.append("")
    if args.data.exists():
        lines += grade_samples(args.data, args.workers)
    load1 = os.getloadavg()
    lines += [f"Load average after: {load1[0]:.1f}. Python {platform.python_version()} "
              f"(`{sys.executable}`). On a shared machine expect ±20% run to run even for medians."]
    write_results(args.results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
