"""LoRA's step time against full fine-tuning on SmolLM2-135M-Instruct, side by side in one invocation
(issue 40 §2): the real-model preset (``sweeps/real_model.yaml``, its GRPO arm, one torch thread),
``--steps`` update steps a run, the arms (full, full without the shared-prefix update, LoRA) alternated
``--repeats`` times
one process at a time, so both see the same machine. Per run: its peak resident memory (the child's
own ``ru_maxrss``), the mean ``perf/step_time``,
``perf/rollout_time`` and ``perf/train_time`` over its steps after the first (the first pays the
one-off costs: the kv engine's first generate, the optimizer's state); the table gives each arm's
median over its runs and the ratio LoRA / full. Evals are cut to 4 prompts (they are not timed).

    python benchmarks/lora/steptime.py [--steps 6] [--repeats 2]     # writes benchmarks/lora/steptime.md

Run it on an otherwise idle machine: it is a speed figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import CLI, ROOT, command, machine, write_results  # noqa: E402

from rlsuite.suite.runfolder import read_jsonl  # noqa: E402

ARMS = {"full": [], "full_no_share": ["train.share_prefix=false"],
        "lora_r16": ["model.lora_rank=16", "model.lora_alpha=32", "model.lora_targets=all-linear"]}
"""``full_no_share``: full fine-tuning without the shared-prefix update, which a LoRA run cannot use
(``share_prefix=auto`` resolves to off under LoRA): it separates LoRA's own cost from that of losing it."""
PHASES = ("perf/step_time", "perf/rollout_time", "perf/train_time")


def preset_sets() -> list[str]:
    """The real-model preset's task and ``set:`` entries as ``--set`` strings (evals cut to 4 prompts)."""
    spec = yaml.safe_load((ROOT / "sweeps" / "real_model.yaml").read_text())
    task = spec["tasks"][0]
    sets = {**task.get("set", {}), **spec["set"], "eval.max_prompts": 4, "eval.test_prompts": 4,
            "eval.n_samples": 0, "eval.ks": [1]}
    return [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
            for k, v in sets.items()]


def one(arm: str, steps: int, out: Path, seed: int) -> dict:
    args = ["--task", "arith", "--algo", "grpo", "--model", "smollm2-135m", "--seed", str(seed),
            "--budget", f"samples={32 * steps}", "--out", str(out)]
    for s in preset_sets() + ARMS[arm]:
        args += ["--set", s]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([sys.executable, "-c", CLI, "run", *args], stdout=out, stderr=err, text=True, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)  # this child's own rusage: its peak RSS
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{arm} failed:\n{err.read()[-3000:]}")
        run_dir = Path(out.read().strip().splitlines()[-1].split("run_dir: ")[1])
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "perf/step_time" in r][1:]
    return {"arm": arm, "run": run_dir.name, "steps": len(rows), "peak_gb": ru.ru_maxrss / 1e6,
            **{k: statistics.mean(r[k] for r in rows) for k in PHASES}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "lora_steptime")
    a = ap.parse_args()
    runs = []
    for rep in range(a.repeats):
        for arm in ARMS:
            r = one(arm, a.steps, a.out / f"rep{rep}", seed=rep)
            print(r, flush=True)
            runs.append(r)
    med = {arm: {k: statistics.median(r[k] for r in runs if r["arm"] == arm) for k in (*PHASES, "peak_gb")}
           for arm in ARMS}
    lines = ["# LoRA step time against full fine-tuning on SmolLM2-135M-Instruct (issue 40 §2)", "",
             f"Command: `{command(__file__, *sys.argv[1:])}`. Machine: {machine()}, one process at a time, one "
             f"torch thread. The real-model preset (GRPO, 4 prompts × 8 samples, 16 new tokens), {a.steps} steps a "
             f"run, the arms alternated {a.repeats} times; per run the mean over its steps after the first; "
             "below the median over an arm's runs.", "",
             "| arm | step (s) | rollout (s) | update (s) | step ratio to full | update ratio to full "
             "| peak RSS (GB) |",
             "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        m = med[arm]
        lines.append(f"| {arm} | {m['perf/step_time']:.2f} | {m['perf/rollout_time']:.2f} | {m['perf/train_time']:.2f}"
                     f" | {m['perf/step_time'] / med['full']['perf/step_time']:.2f} | "
                     f"{m['perf/train_time'] / med['full']['perf/train_time']:.2f} | {m['peak_gb']:.2f} |")
    lines += ["", "| arm | run | steps timed | step (s) | rollout (s) | update (s) | peak RSS (GB) |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['arm']} | `{r['run']}` | {r['steps']} | {r['perf/step_time']:.2f} | {r['perf/rollout_time']:.2f} "
              f"| {r['perf/train_time']:.2f} | {r['peak_gb']:.2f} |" for r in runs]
    write_results(Path(__file__).with_name("steptime.md"), "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
