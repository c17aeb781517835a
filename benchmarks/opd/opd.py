"""On-policy distillation against RL from the base on the embedded task `arith` (issue 40 §1).

    python benchmarks/opd/opd.py run --out runs/opd            # the teacher first, then the arms
    python benchmarks/opd/opd.py report runs/opd [--out benchmarks/opd/opd.md]
    python benchmarks/opd/opd.py compact runs/opd benchmarks/opd/runs   # the files a commit keeps
    python benchmarks/opd/opd.py run --out /tmp/opd_smoke --smoke   # a few steps of every run
    # the second round: a 4× stronger teacher, the students on a quarter of its budget, every arm
    # evaluated every 1,280 samples
    python benchmarks/opd/opd.py run --out runs/opd2 --samples 102400 --student-samples 25600 --eval-samples 1280

The teacher is trained here (no weights are committed): GRPO from the committed `arith` base
(``tasks/bases/arith__tiny``) at the task preset (16 prompts × 8 a step, lr 1e-4) for
``--samples`` samples, seed 0; its ``final/`` is the teacher. The same run is the seed-0 arm of
"RL from the base" (same spec, same run id: the runner finds it done). Then per seed s ∈ 0..2:

* ``rl``: GRPO from the base, ``--samples`` samples (seed 0: the teacher run itself);
* ``opd``: the entry ``opd`` from the base, teacher = the teacher run's folder, ``--student-samples``
  samples (default ``--samples``/2: the goal's "≤ 50% of the samples").

Every run evaluates val every 5% of its budget, or every ``--eval-samples`` samples when given (the
same interval in samples for every arm; greedy accuracy on 200 val prompts), and the whole test split
at the end. The report reads, per seed: the base's val accuracy (step 0), the teacher's
final val accuracy, the student's final val accuracy a_S, the student's share of the teacher's gain
(a_S − a_base)/(a_T − a_base) (goal ≥ 0.8), the samples RL from the base (seed s) needed to first
reach a_S on val, n_RL (None: never within its budget), and the student's samples over n_RL
(goal ≤ 0.5); plus the final test accuracies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite

TASK, MODEL = "arith", "tiny"
SEEDS = (0, 1, 2)
EVAL_EVERY = 0.05  # of each run's budget, unless --eval-samples fixes the interval in samples


def _spec(algo: str, seed: int, samples: int, *sets, eval_samples: Optional[int] = None):
    from rlsuite.suite.spec import resolve

    every = EVAL_EVERY if eval_samples is None else eval_samples / samples
    return resolve(TASK, algo, MODEL, seed, sets=[("eval.every", every), ("log.progress", "off"), *sets],
                   budgets=[("samples", samples)])


def _execute(spec, out: Path) -> tuple[Path, float]:
    from rlsuite.suite.runner import execute

    t0 = time.perf_counter()
    code, run_dir = execute(spec, out)
    if code != 0:
        raise SystemExit(f"{spec.run_id}: exit {code} (see {run_dir}/status.json)")
    return run_dir, time.perf_counter() - t0


def run(out: Path, samples: int, seeds: tuple[int, ...], student_samples: Optional[int] = None,
        eval_samples: Optional[int] = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    student_samples = student_samples or samples // 2
    timing = {}
    # the teacher = RL from the base, seed 0
    teacher, timing["rl_s0"] = _execute(_spec("grpo", 0, samples, eval_samples=eval_samples), out)
    print(f"teacher: {teacher}", flush=True)
    for s in seeds:
        if s != 0:
            _, timing[f"rl_s{s}"] = _execute(_spec("grpo", s, samples, eval_samples=eval_samples), out)
        _, timing[f"opd_s{s}"] = _execute(_spec("opd", s, student_samples, ("algo.teacher", str(teacher)),
                                                eval_samples=eval_samples), out)
    (out / "opd_plan.json").write_text(json.dumps({"teacher": str(teacher), "samples": samples,
                                                   "student_samples": student_samples, "eval_samples": eval_samples,
                                                   "seeds": list(seeds), "wall_s": timing}, indent=1))
    print(json.dumps(timing, indent=1))


def _runs(out: Path) -> dict[tuple[str, int], Path]:
    found = {}
    for spec_path in sorted(out.glob("*/spec.json")):
        d = spec_path.parent
        status = json.loads((d / "status.json").read_text())
        if status.get("state") != "completed":
            continue
        spec = json.loads(spec_path.read_text())
        found[(spec["algo"]["name"], int(spec["seed"]))] = d
    return found


def _curve(run_dir: Path, split: str = "val") -> list[tuple[float, float]]:
    """(samples, greedy accuracy) of every eval of ``split``, step 0 included."""
    from rlsuite.suite.runfolder import read_jsonl

    metrics = {r["step"]: r.get("budget/samples", 0.0) for r in read_jsonl(run_dir / "metrics.jsonl")}
    out = []
    for r in read_jsonl(run_dir / "evals.jsonl"):
        if r["split"] == split:
            out.append((metrics.get(r["step"], 0.0), r[f"eval/{TASK}/greedy_acc"]))
    return out


def _samples_to_reach(curve: list[tuple[float, float]], acc: float) -> Optional[float]:
    return next((n for n, a in curve if a >= acc), None)


def report(out: Path) -> str:
    runs = _runs(out)
    lines = ["| seed | base val | teacher val | student val | gain share | student samples | RL samples to reach it "
             "| ratio | teacher test | student test | RL test |", "|" + "---|" * 11]
    ok = []
    teacher = runs.get(("grpo", 0))
    if teacher is None:
        return "no completed teacher run (grpo, seed 0) under " + str(out)
    t_curve = _curve(teacher)
    a_base, a_t = t_curve[0][1], t_curve[-1][1]
    t_test = _curve(teacher, "test")[-1][1]
    for s in SEEDS:
        st, rl = runs.get(("opd", s)), runs.get(("grpo", s))
        if st is None or rl is None:
            continue
        s_curve, rl_curve = _curve(st), _curve(rl)
        a_s, n_s = s_curve[-1][1], s_curve[-1][0]
        share = (a_s - a_base) / (a_t - a_base) if a_t != a_base else float("nan")
        n_rl = _samples_to_reach(rl_curve[1:], a_s)
        ratio = n_s / n_rl if n_rl else None
        ok.append(share >= 0.8 and ratio is not None and ratio <= 0.5)
        lines.append(f"| {s} | {a_base:.3f} | {a_t:.3f} | {a_s:.3f} | {share:.2f} | {n_s:.0f} | "
                     f"{'never' if n_rl is None else f'{n_rl:.0f}'} | {'—' if ratio is None else f'{ratio:.2f}'} | "
                     f"{t_test:.3f} | {_curve(st, 'test')[-1][1]:.3f} | {_curve(rl, 'test')[-1][1]:.3f} |")
    verdict = (f"goal met on {sum(ok)} of {len(ok)} seeds (gain share ≥ 0.8 and ≤ 50% of RL's samples to the same "
               f"val accuracy)")
    students = sorted({_curve(d)[-1][0] for (algo, _), d in runs.items() if algo == "opd"})
    budgets = f"teacher and RL {t_curve[-1][0]:,.0f} samples, students {', '.join(f'{n:,.0f}' for n in students)}"
    return "\n".join(["# On-policy distillation vs RL from the base (arith, tiny)", "", budgets + "; " + verdict, "",
                      *lines, ""])


KEEP = ("spec.json", "status.json", "env.json", "metrics.jsonl", "evals.jsonl")
"""A compact run copy: no weights (``final/``, ``checkpoint/``), no samples."""


def compact(src: Path, dest: Path) -> None:
    import shutil

    for run_dir in _runs(src).values():
        (dest / run_dir.name).mkdir(parents=True, exist_ok=True)
        for name in KEEP:
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, dest / run_dir.name / name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--samples", type=int, default=25600, help="RL's and the teacher's budget")
    r.add_argument("--student-samples", type=int, help="the students' budget (default: half of --samples)")
    r.add_argument("--eval-samples", type=int, help="evaluate val every this many samples in every arm "
                   "(default: every 5%% of each run's budget)")
    r.add_argument("--smoke", action="store_true", help="2 steps of RL, 1 of opd, one seed: the script works")
    p = sub.add_parser("report")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path)
    c = sub.add_parser("compact")
    c.add_argument("src", type=Path)
    c.add_argument("dest", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "compact":
        compact(a.src, a.dest)
        return 0
    if a.cmd == "run":
        if a.smoke:
            run(a.out, 256, (0,))
        else:
            run(a.out, a.samples, SEEDS, a.student_samples, a.eval_samples)
        return 0
    text = report(a.dir)
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
