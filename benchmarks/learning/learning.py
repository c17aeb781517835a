"""Does the embedded default learn? 3 seeds of GRPO and of PPO on `arith` at the default budget.

Prints and writes `benchmarks/learning/learning.md`: greedy val accuracy of the shared warm
start → after RL, per seed and on average (with the spread over seeds), and wall time.
Runs go through the real CLI (`rlsuite run`), two at a time with one torch thread each.

    python benchmarks/learning/learning.py [--seeds 0 1 2] [--algos grpo ppo] [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, run_cli, write_results  # noqa: E402
from learning_chain import MARK as CHAIN_MARK  # noqa: E402  (the chain section of learning.md, kept on a rewrite)



def one(algo: str, seed: int, out: Path) -> dict:
    r = run_cli(["--task", "arith", "--algo", algo, "--seed", str(seed), "--out", str(out)], f"{algo} seed {seed}")
    val, test, status = r["val"], r["test"], r["status"]
    return {"algo": algo, "seed": seed, "val_before": val[0]["eval/arith/greedy_acc"],
            "val_after": val[-1]["eval/arith/greedy_acc"], "before": test[0]["eval/arith/greedy_acc"],
            "after": test[-1]["eval/arith/greedy_acc"], "train_wall_s": status["budget"]["wall_s"],
            "process_wall_s": r["process_wall_s"], "steps": status["step"],
            "base_sha": r["env"]["warm_start"].get("sha256", "")[:12]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algos", nargs="+", default=["grpo", "ppo"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "learning.md")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rlsuite-learning-"))
    jobs = [(a, s) for a in args.algos for s in args.seeds]
    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = list(pool.map(lambda j: one(j[0], j[1], out), jobs))
    lines = ["# Learning on the embedded default (`arith`, tiny model, default budget)", "",
             f"Machine: {machine()}, 1 torch thread per run, "
             f"{args.workers} runs at a time. Command: `{command(__file__)}`. "
             "Every run starts from the "
             f"committed base (sha256 {rows[0]['base_sha']}…); Δ = final greedy test accuracy − the base's (step 0, "
             f"first 200 test prompts).", "",
             "| algorithm | seed | test acc before | after | Δ test | val before | val after | train wall s | steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | "
                     f"{r['after'] - r['before']:+.3f} | {r['val_before']:.3f} | {r['val_after']:.3f} | "
                     f"{r['train_wall_s']:.1f} | {r['steps']} |")
    lines += ["", "| algorithm | mean Δ (test) | min Δ | max Δ | sd Δ over seeds | mean train wall s |",
              "|---|---|---|---|---|---|"]
    for a in args.algos:
        d = [r["after"] - r["before"] for r in rows if r["algo"] == a]
        w = [r["train_wall_s"] for r in rows if r["algo"] == a]
        sd = statistics.stdev(d) if len(d) > 1 else 0.0
        lines.append(f"| {a} | {statistics.mean(d):+.3f} | {min(d):+.3f} | {max(d):+.3f} | {sd:.3f} | "
                     f"{statistics.mean(w):.1f} |")
    old = args.results.read_text() if args.results.exists() else ""
    chain = old[old.index(CHAIN_MARK):] if CHAIN_MARK in old else ""  # benchmarks/learning/learning_chain.py's section
    write_results(args.results, "\n".join(lines) + "\n", keep="\n" + chain if chain else "")


if __name__ == "__main__":
    main()
