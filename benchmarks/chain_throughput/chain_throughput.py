"""Samples per second of the `chain` preset, before and after, side by side in one invocation (#33).

Two sides run the same spec — `rlsuite run --task chain --algo grpo --seed S` at the preset
(50 steps × 128 samples, ~90 tokens each) with `eval.max_prompts=0`, so every eval scores the
whole val split and the two test evals the whole test split — with one torch thread each:

* **before**: the code of git ref `--before` (default bd55cf6, main before this work), checked out
  in a temporary `git worktree` and imported through `rlsuite.sweeps.study.namespace_path`;
* **after**: this checkout.

The sides alternate (AB, BA, AB, …; `--rounds`, default 3), one run at a time, so both see the same
machine; each side has its own fresh `$RLSUITE_CACHE`, so the after side's first run computes the
step-0 evals of the base (`eval.cache_base`) and the later ones read them (reported cold / warm).
Per run it reports the process wall time, the steps' rollout phase (generation, grading and
the π_old scoring pass where one runs: `perf/rollout_time`), the update (`perf/train_time`), the
rest (start-up and evals: wall − steps), samples per second (6,400 ÷ wall), and the update's achieved
GFLOP/s (the run's own `budget/flops_train` ÷ update time) against a one-thread fp32 GEMM peak
measured on the model's own matmul shapes (the forward's q/k/v, output, gate/up, down and head
projections over one step's tokens). Writes `benchmarks/chain_throughput/chain_throughput.md`.

    python benchmarks/chain_throughput/chain_throughput.py [--before REF] [--rounds 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlsuite.suite.runfolder import read_jsonl
from rlsuite.sweeps.study import namespace_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "chain_throughput.md"
CLI = "import sys; from rlsuite.suite.cli import main; sys.exit(main(sys.argv[1:]))"


def one(side: str, pythonpath: str, seed: int, out: Path, cache: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "RLSUITE_CACHE": str(cache)}  # a side's own cache: the first run of "after" computes the base evals
    memo = "warm" if (cache / "base_evals").is_dir() and any((cache / "base_evals").iterdir()) else "cold"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = ["run", "--task", "chain", "--algo", "grpo", "--seed", str(seed), "--out", str(out),
            "--set", "eval.max_prompts=0"]
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{side} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    run_dir = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    rows = read_jsonl(run_dir / "metrics.jsonl")
    evals = read_jsonl(run_dir / "evals.jsonl")
    env_json = json.loads((run_dir / "env.json").read_text())
    steps = sum(r["perf/step_time"] for r in rows)
    train = sum(r["perf/train_time"] for r in rows)
    return {"side": side, "wall": wall, "rollout": sum(r["perf/rollout_time"] for r in rows), "train": train,
            "rest": wall - steps, "samples": rows[-1]["budget/samples"], "steps": len(rows),
            "flops_train": rows[-1]["budget/flops_train"],
            "tokens_per_step": rows[-1]["budget/train_tokens"] / len(rows),
            "resolved": env_json.get("resolved", {}), "run_id": run_dir.name, "memo": memo if side == "after" else "—",
            "evals": [(e["step"], e["split"], e["n_prompts"], e["eval/chain/greedy_acc"]) for e in evals]}


def gemm_peak(tokens: int, reps: int = 5) -> float:
    """One-thread fp32 FLOP/s of the tiny model's forward matmuls over ``tokens`` rows (its
    q/k/v, output, gate/up, down and tied-head shapes: hidden 128, MLP 256, vocabulary 100)."""
    from rlsuite.suite.models import tiny_config

    c = tiny_config(100)
    h, i, v = c.hidden_size, c.intermediate_size, c.vocab_size
    shapes = [(h, 3 * h), (h, h), (h, 2 * i), (i, h), (h, v)]
    xs = {k: torch.randn(tokens, k) for k in {s[0] for s in shapes}}
    ws = [torch.randn(k, n) for k, n in shapes]
    flops = sum(2 * tokens * k * n for k, n in shapes)

    def once() -> float:
        t = time.perf_counter()
        for (k, _), w in zip(shapes, ws):
            torch.mm(xs[k], w)
        return time.perf_counter() - t

    once()
    return flops / min(once() for _ in range(reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="bd55cf6", help="the git ref of the 'before' side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", type=Path, default=RESULTS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="chain_tp_"))
    wt = tmp / "before_src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), a.before], check=True,
                   capture_output=True)
    try:
        before_pp = namespace_path(wt, tmp / "before_ns")
        sides = {"before": before_pp, "after": ""}
        results: list[dict] = []
        for rnd in range(a.rounds):
            order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
            for side in order:
                r = one(side, sides[side], a.seed, tmp / f"{side}_{rnd}", tmp / f"cache_{side}")
                r["round"], r["load"] = rnd + 1, os.getloadavg()[0]
                results.append(r)
                print(f"round {rnd + 1} {side}: {r['wall']:.1f} s, {r['samples'] / r['wall']:.1f} samples/s "
                      f"(rollout {r['rollout']:.1f}, update {r['train']:.1f}, rest {r['rest']:.1f}); load "
                      f"{r['load']:.2f}", flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], capture_output=True)
    peak = statistics.median(gemm_peak(int(results[0]["tokens_per_step"])) for _ in range(3))
    by = {s: [r for r in results if r["side"] == s] for s in ("before", "after")}
    ratios = [b["wall"] / f["wall"] for b, f in zip(by["before"], by["after"])]
    warm = [(b["wall"] / f["wall"]) for b, f in zip(by["before"], by["after"]) if f["memo"] == "warm"]
    cold = [(b["wall"] / f["wall"]) for b, f in zip(by["before"], by["after"]) if f["memo"] == "cold"]

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in by[side])

    rows = []
    for r in results:
        rows.append(f"| {r['round']} | {r['side']} | {r['resolved'].get('rollout.engine', '?')} | {r['memo']} | "
                    f"{r['wall']:.1f} | "
                    f"{r['rollout']:.1f} | {r['train']:.1f} | {r['rest']:.1f} | {r['samples'] / r['wall']:.1f} | "
                    f"{r['flops_train'] / r['train'] / 1e9:.1f} | {r['load']:.2f} |")
    same_evals = all(r["evals"] == results[0]["evals"] for r in results)
    text = "\n".join([
        "# `chain` preset throughput: before and after, side by side", "",
        f"Machine: {machine()}; 1 torch thread per run, one run at "
        f"a time; torch {torch.__version__}. Command: `{command(__file__, *sys.argv[1:])}`.", "",
        f"Spec: `rlsuite run --task chain --algo grpo --seed {a.seed} --set eval.max_prompts=0` (the preset: "
        f"{results[0]['steps']} steps × 128 samples; every eval scores the whole split: "
        + ", ".join(sorted({f'{s} {n}' for _, s, n, _ in results[0]['evals']})) + " prompts). "
        f"before = git `{a.before}` (a worktree), after = this checkout. Run ids: before "
        f"`{by['before'][0]['run_id']}`, after `{by['after'][0]['run_id']}`.", "",
        "| round | side | engine | base evals memo | wall s | rollout s | update s | start-up + evals s | samples/s | "
        "update GFLOP/s | load after |", "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        f"**Samples per second: after / before = {statistics.median(ratios):.2f}×** (median over rounds; per round "
        + ", ".join(f"{x:.2f}" for x in ratios) + "; the after side's first run computes the step-0 evals of the "
        "base into its fresh `$RLSUITE_CACHE` (`cold`), the later ones read them (`warm`, `eval.cache_base`): "
        + (f"cold {statistics.median(cold):.2f}×" if cold else "no cold run")
        + (f", warm {statistics.median(warm):.2f}×" if warm else ", no warm run") + "). Medians: rollout phase "
        f"{med('before', 'rollout'):.1f} → {med('after', 'rollout'):.1f} s, update {med('before', 'train'):.1f} → "
        f"{med('after', 'train'):.1f} s, start-up + evals {med('before', 'rest'):.1f} → "
        f"{med('after', 'rest'):.1f} s.", "",
        f"Update against its bound: one-thread fp32 GEMM peak on the model's matmul shapes over one step's "
        f"{int(results[0]['tokens_per_step']):,} tokens: **{peak / 1e9:.1f} GFLOP/s**; the update achieves "
        f"{statistics.median(r['flops_train'] / r['train'] for r in by['after']) / 1e9:.1f} GFLOP/s after "
        f"({statistics.median(r['flops_train'] / r['train'] for r in by['after']) / peak:.0%} of it; FLOPs charged "
        "as 6·P·positions computed, attention not counted).", "",
        "Every run's evals: " + ("the same scores on both sides and every round (greedy accuracy "
                                 + ", ".join(f"{s}@{st} {acc:.3f}" for st, s, _, acc in results[0]["evals"]) + ")."
                                 if same_evals else "differ between runs: " + "; ".join(
                                     f"{r['side']} r{r['round']}: {r['evals']}" for r in results)),
        ""])
    write_results(a.results, text)


if __name__ == "__main__":
    main()
