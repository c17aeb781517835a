"""Which `chain` arm learns reliably enough for a CI test? Per-seed gains of greedy val accuracy.

`tests/integration/test_learning.py` asserts that one seed of one arm at the `chain` preset raises
greedy val accuracy (200 prompts, from the committed base) by a margin. RL is not bit-reproducible
across CPUs, so a seed's gain on another CPU is a fresh draw: the margin is chosen from many seeds
so that, under a normal fit of the per-seed gains, P(gain < margin) ≤ 1% (margin ≤ mean − 2.326·sd).

Runs every arm × seed through the real CLI (`rlsuite run`), two at a time with one torch thread
each, prints the table and rewrites the `chain` section of `benchmarks/learning/learning.md`
(the `arith` section, written by `benchmarks/learning/learning.py`, is kept, and so is anything after the
`END` marker: the hand-written reading of the numbers).

    python benchmarks/learning/learning_chain.py [--arms dapo:mb4 grpo:lr3e-4@100,101 ...] [--seeds 0 1 ... 9] \
        [--workers 2]

Arms (label: the `--set` overrides on top of the `chain` preset and `rollout.engine=native`):
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, run_cli  # noqa: E402

from rlsuite.suite.runfolder import read_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "learning.md"
MARK = "<!-- chain section: benchmarks/learning_chain.py -->"  # as in learning.md (the script's old path)
END = "<!-- end of the generated chain section; what follows is kept -->"
Z99 = 2.326  # the one-sided 99% normal quantile

ARMS = {  # label -> (algorithm, overrides); the effects sweep's arms of the same labels
    "dapo:mb4": ("dapo", ["train.minibatches=4"]),
    "grpo": ("grpo", []),
    "grpo:B8-fixed": ("grpo", ["rollout.prompts_per_step=8"]),
    "grpo:lr3e-4": ("grpo", ["optim.lr=3e-4"]),
    "grpo:lr1e-3": ("grpo", ["optim.lr=1e-3"]),
}
__doc__ += "".join(f"  {k}: {a} {' '.join(s) or '(preset)'}\n" for k, (a, s) in ARMS.items())


def one(arm: str, seed: int, out: Path) -> dict:
    algo, sets = ARMS[arm]
    args = ["--task", "chain", "--algo", algo, "--seed", str(seed), "--out", str(out / arm.replace(":", "_")),
            "--set", "rollout.engine=native"] + [x for s in sets for x in ("--set", s)]
    r = run_cli(args, f"{arm} seed {seed}")
    val = r["val"]
    test = r["test"]
    # how far the policy moved: mean |k1 KL(π_old, π)| over the run's update steps (0 without updates)
    kl = [abs(m["stats/approx_kl"]) for m in read_jsonl(r["run_dir"] / "metrics.jsonl") if "stats/approx_kl" in m]
    return {"arm": arm, "seed": seed, "before": val[0]["eval/chain/greedy_acc"], "kl": sum(kl) / max(len(kl), 1),
            "after": val[-1]["eval/chain/greedy_acc"], "n": val[0]["n_prompts"],
            "test_gain": test[-1]["eval/chain/greedy_acc"] - test[0]["eval/chain/greedy_acc"],
            "train_wall_s": r["status"]["budget"]["wall_s"], "steps": r["status"]["step"],
            "base_sha": r["env"]["warm_start"].get("sha256", "")[:12]}


def fit(gains: list[float]) -> dict:
    m, sd = statistics.mean(gains), statistics.stdev(gains)
    margin = m - Z99 * sd
    return {"mean": m, "sd": sd, "min": min(gains), "max": max(gains), "margin_1pct": margin,
            "p_le_0": 0.5 * math.erfc(m / (sd * math.sqrt(2))) if sd > 0 else float(m <= 0)}


def render(rows: list[dict], workers: int) -> str:
    labels = dict.fromkeys(r["arm"] for r in rows)
    arms = [f"{a}@{','.join(str(r['seed']) for r in rows if r['arm'] == a)}" for a in labels]
    lines = [MARK, "", "# Learning on the embedded reasoning task (`chain`, tiny model, the preset's budget)", "",
             f"Machine: {machine()}, 1 torch thread per run, "
             f"{workers} runs at a time. Command: `{command(__file__, '--arms', *arms)}` "
             f"(seeds as listed). Every run starts from the "
             f"committed base (sha256 {rows[0]['base_sha']}…) with `rollout.engine=native`; Δ = final greedy val "
             f"accuracy − the base's (step 0, the first {rows[0]['n']} val prompts).", "",
             "| arm | overrides | seed | val before | after | Δ val | Δ test | mean abs approx_kl | train wall s "
             "| steps |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {' '.join(ARMS[r['arm']][1]) or '—'} | {r['seed']} | {r['before']:.3f} | "
                     f"{r['after']:.3f} | {r['after'] - r['before']:+.3f} | {r['test_gain']:+.3f} | {r['kl']:.2e} | "
                     f"{r['train_wall_s']:.1f} | {r['steps']} |")
    lines += ["", "Normal fit of the per-seed gains; `margin (P fail ≤ 1%)` = mean − 2.326·sd, the largest margin a "
              "one-seed test may assert so that a fresh seed (or the same seed on another CPU) falls below it "
              "with probability ≤ 1%.", "",
              "| arm | seeds | mean Δ val | sd Δ val | min Δ | max Δ | margin (P fail ≤ 1%) | P(Δ ≤ 0) | mean Δ test "
              "| sd Δ test | mean train wall s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in labels:
        d = [r["after"] - r["before"] for r in rows if r["arm"] == a]
        w = [r["train_wall_s"] for r in rows if r["arm"] == a]
        t = [r["test_gain"] for r in rows if r["arm"] == a]
        f = fit(d)
        lines.append(f"| {a} | {len(d)} | {f['mean']:+.3f} | {f['sd']:.3f} | {f['min']:+.3f} | {f['max']:+.3f} | "
                     f"{f['margin_1pct']:+.3f} | {f['p_le_0']:.2g} | {statistics.mean(t):+.3f} | "
                     f"{statistics.stdev(t):.3f} | {statistics.mean(w):.1f} |")
    return "\n".join(lines) + "\n\n" + END + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", nargs="+", default=["dapo:mb4"],
                    help=f"arm labels ({', '.join(ARMS)}), each optionally @SEEDS (comma-separated) instead of --seeds")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rlsuite-learning-chain-"))
    jobs = []
    for spec in args.arms:
        arm, _, seeds = spec.partition("@")
        if arm not in ARMS:
            ap.error(f"unknown arm {arm!r}; valid: {', '.join(ARMS)}")
        jobs += [(arm, int(s)) for s in seeds.split(",")] if seeds else [(arm, s) for s in args.seeds]
    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = list(pool.map(lambda j: one(j[0], j[1], out), jobs))
    text = render(rows, args.workers)
    print(text)
    old = args.results.read_text() if args.results.exists() else ""
    keep = old.split(MARK)[0].rstrip() + "\n\n" if old.strip() else ""
    tail = old.split(END, 1)[1] if END in old else ""
    args.results.write_text(keep + text + tail)


if __name__ == "__main__":
    main()
