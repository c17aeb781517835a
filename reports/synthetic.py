"""Synthetic run folders that follow the run-folder contract (for tests and benchmarks).

Not a simulator of training: each run's val score follows the ScaleRL sigmoid of its
arm's parameters in compute, plus a per-seed offset and per-eval noise; the per-step
metrics are plausible shapes (entropy decay, KL growth, ...) so that every report path is
exercised. Arms can diverge (NaN losses, status `diverged`), collapse (entropy -> 0), or
stop early (`running`, `failed`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GROUP_SIZE = 8
FLOPS_PER_SAMPLE = 2.0e9
PASS_KS = (1, 2, 4, 8)


@dataclass(frozen=True, kw_only=True)
class Arm:
    """One algorithm configuration; its runs are generated for every task and seed."""

    algo: str
    """`algo.name`."""
    variant: str | None = None
    """Sweep variant (None = base arm)."""
    sweep: str | None = None
    """Sweep name."""
    factors: dict = field(default_factory=dict)
    """`factors` written into spec.json (dotted field -> value)."""
    asymptote: float = 0.6
    """Score the run tends to (A)."""
    midpoint: float = 0.3
    """Fraction of the sample budget at which half the gain is reached (C_mid)."""
    slope: float = 2.0
    """Sigmoid exponent B."""
    seed_sd: float = 0.01
    """Std of the per-seed score offset."""
    noise: float = 0.01
    """Std of the per-eval noise."""
    prompts_per_step: int = 16
    """rollout.prompts_per_step."""
    samples_per_s: float = 200.0
    """Throughput (samples per wall second)."""
    diverge_at: float | None = None
    """Fraction of training after which the run diverges (NaN loss, status diverged)."""
    entropy_collapse: bool = False
    """Entropy falls to ~0 in the second half."""
    state: str = "completed"
    """Final status.json state (`running` stops half-way; `failed` writes no final eval)."""


def run_id(task: str, arm: Arm, seed: int) -> str:
    """`{task}__{algo}__s{seed}__{hash8}` with a hash of the arm's configuration."""
    blob = json.dumps([task, arm.algo, arm.variant, arm.sweep, arm.factors, seed], sort_keys=True)
    return f"{task}__{arm.algo}__s{seed}__{hashlib.sha1(blob.encode()).hexdigest()[:8]}"


def _spec(task: str, arm: Arm, seed: int, budget: int) -> dict:
    return {
        "run_id": run_id(task, arm, seed), "seed": seed, "task": {"name": task},
        "algo": {"name": arm.algo, "clip_eps": 0.2}, "model": {"name": "tiny"},
        "rollout": {"group_size": GROUP_SIZE, "prompts_per_step": arm.prompts_per_step,
                    "max_new_tokens": 8, "temperature": 1.0},
        "optim": {"lr": 1e-4}, "train": {"num_threads": 1},
        "budget": {"prompts": None, "samples": budget, "gen_tokens": None, "train_tokens": None,
                   "updates": None, "flops": None, "wall_s": None},
        "eval": {"every": 5, "n_samples": 8}, "sweep": arm.sweep, "variant": arm.variant,
        "factors": dict(arm.factors),
    }


def _env() -> dict:
    return {"git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": False,
            "packages": {"torch": "2.5.0"}, "device": "cpu", "precision": "float32", "num_threads": 1,
            "host": "synthetic", "python": "3.11.7"}


def _score(frac: float, arm: Arm, base: float, offset: float) -> float:
    if frac <= 0:
        return base
    return base + (arm.asymptote + offset - base) / (1 + (arm.midpoint / frac) ** arm.slope)


def _budget_row(step: int, arm: Arm) -> dict:
    samples = step * arm.prompts_per_step * GROUP_SIZE
    return {"budget/prompts": step * arm.prompts_per_step, "budget/samples": samples,
            "budget/gen_tokens": samples * 6, "budget/train_tokens": samples * 14, "budget/updates": step,
            "budget/flops": samples * FLOPS_PER_SAMPLE, "budget/wall_s": samples / arm.samples_per_s}


def _metric_row(step: int, frac: float, arm: Arm, score: float, rng: np.random.Generator, bad: bool) -> dict:
    entropy = 1.5 * math.exp(-frac) if not (arm.entropy_collapse and frac > 0.5) else 1e-4
    loss = float("nan") if bad else float(rng.normal(0, 0.1))
    return {"step": step, "time": 1.7e9 + step, **_budget_row(step, arm), "loss/policy": loss,
            "loss/total": loss, "stats/entropy": entropy, "stats/kl_ref": 0.02 * frac,
            "stats/clip_frac": 0.1, "stats/grad_norm": float("inf") if bad else 1.0,
            "reward/mean": float(np.clip(score + rng.normal(0, 0.03), 0, 1)), "reward/std": 0.3,
            "len/response_mean": 5.0, "len/truncated_frac": 0.05, "stability/nonfinite": int(bad),
            "perf/step_time": 0.5}


def _eval_rows(step: int, arm: Arm, task: str, score: float, split: str, final: bool) -> dict:
    p = float(np.clip(score, 0, 1))
    row = {"step": step, **_budget_row(step, arm), "split": split, f"eval/{task}/greedy_acc": score,
           f"eval/{task}/avg@8": p, f"eval/{task}/maj@8": min(1.0, p * 1.05),
           "n_samples": 8, "temperature": 1.0, "top_p": 1.0, "eval_seed": 0}
    for k in PASS_KS:
        row[f"eval/{task}/pass@{k}"] = 1 - (1 - p) ** k
    if final:
        row["final"] = True
    return row


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_run(root: Path, task: str, arm: Arm, seed: int, *, steps: int = 20, eval_every: int = 5,
              base_score: float = 0.3) -> Path:
    """Write one run folder under `root` and return its path.

    `steps` and `eval_every` are for 16 prompts per step; other batch sizes get the same
    sample budget (fewer, larger steps) and evals at the same budget fractions.
    """
    rid = run_id(task, arm, seed)
    rng = np.random.default_rng([seed, int(rid[-8:], 16)])
    offset = float(rng.normal(0, arm.seed_sd))
    scale = 16 / arm.prompts_per_step
    budget = steps * 16 * GROUP_SIZE
    steps, eval_every = max(2, round(steps * scale)), max(1, round(eval_every * scale))
    stop = steps if arm.state == "completed" else max(1, steps // 2)
    bad_from = int(arm.diverge_at * steps) if arm.diverge_at is not None else None
    if bad_from is not None:
        stop = min(stop, bad_from + 1)
    metrics, evals = [], [_eval_rows(0, arm, task, base_score, "val", False)]
    for step in range(1, stop + 1):
        frac, bad = step / steps, bad_from is not None and step > bad_from
        score = _score(frac, arm, base_score, offset) + float(rng.normal(0, arm.noise))
        metrics.append(_metric_row(step, frac, arm, score, rng, bad))
        if step % eval_every == 0 and step < steps and not bad:
            evals.append(_eval_rows(step, arm, task, score, "val", False))
    state = "diverged" if bad_from is not None and stop > bad_from else arm.state
    if state == "completed":
        final = _score(1.0, arm, base_score, offset) + float(rng.normal(0, arm.noise))
        evals += [_eval_rows(steps, arm, task, final, split, True) for split in ("val", "test")]
    folder = Path(root) / rid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps(_spec(task, arm, seed, budget)))
    (folder / "env.json").write_text(json.dumps(_env()))
    (folder / "metrics.jsonl").write_text(_lines(metrics))
    (folder / "evals.jsonl").write_text(_lines(evals))
    (folder / "samples.jsonl").write_text(_lines(
        [{"step": stop, "split": "val", "prompt": f"{i}+{seed}=", "completion": f"{i + seed}<eos>",
          "reward": 1.0, "parsed": str(i + seed), "gold": str(i + seed)} for i in range(3)]))
    (folder / "status.json").write_text(json.dumps({
        "state": state, "reason": f"NaN loss at step {bad_from + 1}" if state == "diverged" else
        ("worker OOM" if state == "failed" else None), "step": stop,
        "budget": {k.removeprefix("budget/"): v for k, v in _budget_row(stop, arm).items()},  # the trainer's counters
        "started_at": "2025-01-01T00:00:00", "updated_at": "2025-01-01T01:00:00", "host": "synthetic",
        "pid": 1, "attempt": 1}))
    return folder


def write_root(root: Path, arms: list[Arm], tasks: list[str], seeds: list[int], **kw) -> list[Path]:
    """Write every (task, arm, seed) run under `root`; keyword arguments go to `write_run`."""
    return [write_run(root, task, arm, seed, **kw) for task in tasks for arm in arms for seed in seeds]


def default_arms() -> list[Arm]:
    """A small leaderboard plus a 2x2 ablation and a batch-size sweep."""
    return [
        Arm(algo="grpo", asymptote=0.55),
        Arm(algo="comppo", asymptote=0.62),
        Arm(algo="ppo", asymptote=0.5, diverge_at=0.7),
        Arm(algo="dapo", sweep="abl", asymptote=0.55, factors={}),
        Arm(algo="dapo", sweep="abl", variant="clip", asymptote=0.57, factors={"algo.clip_higher": True}),
        Arm(algo="dapo", sweep="abl", variant="filter", asymptote=0.56, factors={"algo.filter": True}),
        Arm(algo="dapo", sweep="abl", variant="clip+filter", asymptote=0.62,
            factors={"algo.clip_higher": True, "algo.filter": True}),
        Arm(algo="grpo", sweep="batch", variant="b16", factors={"rollout.prompts_per_step": 16},
            prompts_per_step=16, samples_per_s=100.0, midpoint=0.2),
        Arm(algo="grpo", sweep="batch", variant="b64", factors={"rollout.prompts_per_step": 64},
            prompts_per_step=64, samples_per_s=300.0, midpoint=0.3),
    ]
