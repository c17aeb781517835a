"""Does GRPO improve ``code_toy`` over its supervised warm start? 3 seeds at the preset budget.

Each run is ``python -m rlsuite.suite.cli run --task code_toy --algo grpo --seed S`` (through a small
bootstrap that imports ``tasks.code_toy`` first, which is a no-op once ``tasks/__init__.py``
imports it). The first seed runs alone (it builds and caches the shared warm start), the
others ``--workers`` at a time. Prints and writes ``benchmarks/tasks_code/tasks_code.md``: greedy
val accuracy of the warm start → after RL per seed, test after, the warm-start facts, wall time.

    python benchmarks/tasks_code/tasks_code.py [--seeds 0 1 2] [--workers 2] [--out DIR] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, run_cli, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOT = "import sys, tasks.code_toy; from rlsuite.suite.cli import main; sys.exit(main(sys.argv[1:]))"


def one(seed: int, out: Path, sets: list[str]) -> dict:
    r = run_cli(["--task", "code_toy", "--algo", "grpo", "--seed", str(seed), "--out", str(out)]
                + [x for s in sets for x in ("--set", s)], f"seed {seed}", boot=BOOT)
    val, test, status = r["val"], r["test"], r["status"]
    key = "eval/code_toy/greedy_acc"
    return {"seed": seed, "before": val[0][key], "after": val[-1][key], "curve": [round(e[key], 3) for e in val],
            "test_after": test[-1][key], "train_wall_s": status["budget"]["wall_s"],
            "process_wall_s": r["process_wall_s"],
            "steps": status["step"], "samples": status["budget"]["samples"], "warm": r["env"].get("warm_start", {})}


def warm_start_test_acc(warm_path: str) -> float:
    """Greedy test accuracy of the cached warm start itself (the runs only evaluate test at
    the end), with the run's eval protocol (preset max_new_tokens, all test prompts ≤ 200)."""
    import torch

    sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite
    import rlsuite.tasks.code_toy  # noqa: F401
    from rlsuite.suite.config import EvalConfig, ModelConfig
    from rlsuite.suite.evaluate import evaluate
    from rlsuite.suite.models import load_model
    from rlsuite.suite.engines.factory import make_engine
    from rlsuite.suite.prompts import encode_prompt
    from rlsuite.tasks.code_toy import CodeToy, CodeToyConfig

    torch.set_num_threads(1)
    task = CodeToy(CodeToyConfig(name="code_toy"))
    try:
        model, tok, _ = load_model(ModelConfig())
        model.load_state_dict(torch.load(Path(warm_path) / "model.pt", weights_only=True))
        ex = task.splits()["test"][:200]
        enc = [encode_prompt(task, e, tok, "auto") for e in ex]
        max_new = CodeToy.presets["embedded"]["rollout"]["max_new_tokens"]
        res, _ = evaluate(make_engine("auto", model, tok), tok, task, ex, [e[0] for e in enc], [e[1] for e in enc],
                          EvalConfig(), max_new, (tok.eos_token_id,))
        return res["greedy_acc"]
    finally:
        task.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--set", action="append", default=[], help="extra --set overrides for every run")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "tasks_code.md")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rlsuite-tasks-code-"))
    load0 = os.getloadavg()
    first = one(args.seeds[0], out, args.set)  # builds the shared warm start once
    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = [first] + list(pool.map(lambda s: one(s, out, args.set), args.seeds[1:]))
    warm = first["warm"]
    test_before = warm_start_test_acc(warm["path"])
    lines = ["# GRPO on `code_toy` (tiny model, preset budget, 3 seeds)", "",
             f"Machine: {machine()}, 1 torch thread per run, "
             f"up to {args.workers} runs at a time, load average {load0[0]:.1f} at the start "
             "(shared machine: wall times are inflated). "
             f"Command: `{command(__file__, *(f'--set {s}' for s in args.set))}`.", "",
             f"Warm start (shared by every seed, cached): {warm.get('warm_steps')} SFT steps, greedy accuracy "
             f"{warm.get('warm_check_acc')} on 200 held-out train problems (target 0.3).", "",
             f"Greedy test accuracy of the warm start itself: {test_before:.3f} (the runs evaluate test only at "
             "the end).", "",
             "| seed | greedy val acc before | after | Δ | val curve (every 25% of the budget) | test after | Δ test | "
             "train wall s | steps | samples |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | {r['after'] - r['before']:+.3f} | "
                     f"{' → '.join(f'{x:.3f}' for x in r['curve'])} | {r['test_after']:.3f} | "
                     f"{r['test_after'] - test_before:+.3f} | "
                     f"{r['train_wall_s']:.1f} | {r['steps']} | {r['samples']:.0f} |")
    d = [r["after"] - r["before"] for r in rows]
    sd = statistics.stdev(d) if len(d) > 1 else 0.0
    dt = [r["test_after"] - test_before for r in rows]
    lines += ["", "| mean Δ (val) | min Δ | max Δ | sd Δ over seeds | seeds improved (val) | mean Δ (test) | "
              "seeds improved (test) | mean train wall s |", "|---|---|---|---|---|---|---|---|",
              f"| {statistics.mean(d):+.3f} | {min(d):+.3f} | {max(d):+.3f} | {sd:.3f} | "
              f"{sum(x > 0 for x in d)}/{len(d)} | {statistics.mean(dt):+.3f} | {sum(x > 0 for x in dt)}/{len(dt)} | "
              f"{statistics.mean(r['train_wall_s'] for r in rows):.1f} |", "",
              "Val and test are ~200 problems each, so one problem is 0.005 and the sampling noise of an accuracy "
              "near 0.4 is about ±0.035 (1 sd)."]
    write_results(args.results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
