"""The search for a `chain` preset where the policy moves (#34 §2), every preset tried logged.

The goal: GRPO gains ≥ 10 points of greedy **test** accuracy (the whole test split, 993 prompts) over
the committed base, with the KL of the policy to the base ≥ 0.05 (`stats/kl_ref`: the k1 estimate of
KL(π_old ‖ π_ref) on the step's samples, π_ref = the base; GRPO's default β = 0.04 keeps it loaded)
at the end of training, on **tuning seeds** (100, 101, …: disjoint from the study seeds 0–99).
Each candidate is the preset plus overrides; the runs go two at a time with one torch thread each,
through the real CLI, and every run is appended to `benchmarks/chain_preset_search/chain_preset_search.md`
(candidate, overrides, seed, test before → after, gain, final KL to the base, mean |approx_kl|,
steps, run time), so the log keeps every preset tried, including those that failed.

    python benchmarks/chain_preset_search/chain_preset_search.py --candidates long long-lr2e-4 --seeds 100 101
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import run_cli  # noqa: E402

from rlsuite.suite.runfolder import cpu_model, read_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "chain_preset_search.md"
EVALS = ["eval.max_prompts=0", "eval.every=1.0"]  # the whole splits, at the start and the end only
CANDIDATES = {  # label -> overrides on the chain preset (50 steps × 128 samples, lr 1e-4)
    "preset": [],
    "long": ["budget.samples=25600"],
    "long-lr2e-4": ["budget.samples=25600", "optim.lr=2e-4", "optim.warmup_updates=20"],
    "long-kl0": ["budget.samples=25600", "algo.kl_coef=0.0"],
    "long-T1.2": ["budget.samples=25600", "rollout.temperature=1.2"],
    "long-G16": ["budget.samples=25600", "rollout.group_size=16", "rollout.prompts_per_step=8"],
    "xlong": ["budget.samples=51200"],
    "xlong-kl0": ["budget.samples=51200", "algo.kl_coef=0.0"],
}
HEADER = ["# `chain` preset search (#34 §2): every preset tried", "",
          "Goal: GRPO gains ≥ 10 points of greedy test accuracy (whole test split) with the final KL to the "
          "base ≥ 0.05, on tuning seeds (≥ 100). Each row is one run "
          "(`benchmarks/chain_preset_search/chain_preset_search.py`); "
          "overrides are on top of the `chain` preset; `KL to base` = `stats/kl_ref` of the last step; "
          "`|approx_kl|` = the mean per-step |k1 KL(π_old ‖ π_θ)| of the updates (0 by construction with one "
          "update per rollout batch: π_old is the weights that sampled it).", ""]
TABLE = ["## Runs with the KL of a whole response", "",
         "`KL per response` = the mean over the last 10 steps of `stats/kl_ref` × `len/response_mean` (the step's "
         "per-token estimate summed over a response: the batch's token sum per response); `goal met` still reads "
         "the per-token `KL to base` against 0.05.", "",
         "| when | machine | candidate | overrides | seed | test before → after | gain (points) | KL to base | "
         "KL per response | mean \\|approx_kl\\| | steps | wall s | goal met |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def one(cand: str, seed: int, out: Path) -> dict:
    sets = [x for s in CANDIDATES[cand] + EVALS for x in ("--set", s)]
    t0 = time.time()
    r = run_cli(["--task", "chain", "--algo", "grpo", "--seed", str(seed), "--out", str(out / cand), *sets],
                f"{cand} seed {seed}")
    rows = read_jsonl(r["run_dir"] / "metrics.jsonl")
    kl_ref = rows[-1].get("stats/kl_ref", float("nan"))
    # the KL of a whole response: the step's token mean times its mean response length is the sum
    # over the batch's tokens per response (exact for a masked token mean); mean of the last 10 steps
    last = [m for m in rows[-10:] if "stats/kl_ref" in m]
    kl_seq = sum(m["stats/kl_ref"] * m["len/response_mean"] for m in last) / max(1, len(last))
    approx = [abs(m["stats/approx_kl"]) for m in rows if "stats/approx_kl" in m]
    before, after = r["test"][0]["eval/chain/greedy_acc"], r["test"][-1]["eval/chain/greedy_acc"]
    gain = 100 * (after - before)
    return {"cand": cand, "seed": seed, "before": before, "after": after, "gain": gain, "kl_ref": kl_ref,
            "kl_seq": kl_seq, "approx": sum(approx) / max(1, len(approx)), "steps": len(rows), "wall": time.time() - t0,
            "met": gain >= 10 and kl_ref >= 0.05}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", nargs="+", default=["long"], help=f"from: {', '.join(CANDIDATES)}")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101])
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    bad = [c for c in a.candidates if c not in CANDIDATES]
    if bad:
        ap.error(f"unknown candidate(s) {', '.join(bad)}; valid: {', '.join(CANDIDATES)}")
    if min(a.seeds) < 100:
        ap.error("tuning seeds are ≥ 100 (0–99 are the study seeds)")
    out = Path(tempfile.mkdtemp(prefix="rlsuite-chain-search-"))
    jobs = [(c, s) for c in a.candidates for s in a.seeds]
    machine = f"{cpu_model()}, {os.cpu_count()} cores ({platform.machine()})"
    if not RESULTS.exists():
        RESULTS.write_text("\n".join(HEADER) + "\n")
    if TABLE[0] not in RESULTS.read_text():
        with RESULTS.open("a") as f:
            f.write("\n" + "\n".join(TABLE) + "\n")
    with cf.ThreadPoolExecutor(a.workers) as pool:
        for r in pool.map(lambda j: one(j[0], j[1], out), jobs):
            line = (f"| {time.strftime('%Y-%m-%d %H:%M')} | {machine} | {r['cand']} | "
                    f"{' '.join(CANDIDATES[r['cand']]) or '—'} | {r['seed']} | {r['before']:.3f} → {r['after']:.3f} | "
                    f"{r['gain']:+.1f} | {r['kl_ref']:.3g} | {r['kl_seq']:.3g} | {r['approx']:.2e} | {r['steps']} | "
                    f"{r['wall']:.0f} | "
                    f"{'yes' if r['met'] else 'no'} |")
            with RESULTS.open("a") as f:
                f.write(line + "\n")
            print(line, flush=True)


if __name__ == "__main__":
    main()
