"""LoRA against full fine-tuning on SmolLM2-135M-Instruct (issue 40 §2): step time, checkpoint size and
the real-model preset's gain (``sweeps/real_model.yaml``, GRPO arm), 3 seeds each, each arm's learning
rate tuned on its own at an equal tuning budget (``rlsuite sweep tune``: 3 learning rates × 2 tuning seeds
at the preset's budget, scored on val; GRPO's own knob held at its default ``clip_eps_high`` 0.2 in both
arms, the learning rate being the one setting LoRA is known to move).

Steps (each a command of the CLI, in a subprocess; finished runs are never redone, so the script
resumes where it stopped):

1. write two sweep specs into ``OUT/specs/``: ``lora_full`` (the preset, GRPO, every weight trains,
   lr grid around the preset's 2e-5) and ``lora_r16`` (the same with ``model.lora_rank=16``,
   ``lora_alpha=32``, every linear layer; lr grid around 3e-4, LoRA wanting a larger one);
2. ``rlsuite sweep tune`` each (the grid on seeds 1000, 1001), which writes ``OUT/<name>-tuned.yaml``;
3. ``rlsuite sweep run`` each tuned spec (seeds 0, 1, 2; ``train.keep_checkpoint=true`` so the
   checkpoint's size can be read; not in the run id);
4. read per run: the mean ``perf/step_time`` over its steps (``metrics.jsonl``), the size of
   ``checkpoint/state.pt``, and the gain = final test ``greedy_acc`` − step-0 test ``greedy_acc``
   (``evals.jsonl``); write ``benchmarks/lora/lora.md`` with the per-arm means and the per-run rows.

``--compact``: after a measurement, copy its final runs compactly into ``benchmarks/lora/runs/`` (spec,
status, env, evals, per-problem results, cut metrics with the ``perf/`` times; no weights) and each arm's
tuning ``selection.json`` into ``benchmarks/lora/runs/<arm>-selection.json``.

``--smoke``: two steps (32 samples a step), one learning rate, one tuning seed, one final seed and
4-prompt evals, into ``OUT`` (default a temp folder), to check the pipeline; nothing is written to
``benchmarks/lora/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import CLI, ROOT, command, machine, write_results  # noqa: E402

from rlsuite.suite.runfolder import read_jsonl  # noqa: E402

ARMS = {
    "lora_full": {"set": {}, "lr": [6.7e-6, 2.0e-5, 6.0e-5]},
    "lora_r16": {"set": {"model.lora_rank": 16, "model.lora_alpha": 32, "model.lora_targets": "all-linear"},
                 "lr": [1.0e-4, 3.0e-4, 1.0e-3]},
}
"""Each arm: its ``set`` on top of the preset and its own lr grid (the same size: an equal tuning budget)."""


def spec_for(name: str, arm: dict, smoke: bool) -> dict:
    """The real-model preset (GRPO arm) with the arm's settings and tuning grid."""
    base = yaml.safe_load((ROOT / "sweeps" / "real_model.yaml").read_text())
    spec = {k: base[k] for k in ("tasks", "budget", "model", "resources")}
    spec.update(name=name, description=f"issue 40 §2: {name} on the real-model preset (GRPO)",
                algorithms=["grpo"], seeds=[0, 1, 2],
                set={**base["set"], **arm["set"], "train.keep_checkpoint": True},
                tuning={"lr": list(arm["lr"]), "seeds": [1000, 1001], "knobs": {"grpo": {"clip_eps_high": [0.2]}}})
    if smoke:
        spec["seeds"], spec["budget"] = [0], {"samples": 64}
        spec["tuning"].update(lr=arm["lr"][1:2], seeds=[1000])
        spec["set"].update({"eval.max_prompts": 4, "eval.test_prompts": 4, "eval.n_samples": 0, "eval.ks": [1]})
    return spec


def cli(*args: str) -> None:
    print("$ rlsuite " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-c", CLI, *args], cwd=ROOT, check=True)


def measure(folder: Path) -> list[dict]:
    """Per completed run under a sweep folder: step time, checkpoint bytes, test gain."""
    rows = []
    for run in sorted(p for p in folder.iterdir() if (p / "status.json").exists()):
        if json.loads((run / "status.json").read_text())["state"] != "completed":
            continue
        steps = [r["perf/step_time"] for r in read_jsonl(run / "metrics.jsonl") if "perf/step_time" in r]
        test = [r for r in read_jsonl(run / "evals.jsonl") if r["split"] == "test"]
        key = next(k for k in test[0] if k.endswith("/greedy_acc"))
        ck = run / "checkpoint" / "state.pt"
        spec = json.loads((run / "spec.json").read_text())
        rows.append({"run": run.name, "seed": spec["seed"], "lr": spec["optim"]["lr"],
                     "step_s": statistics.mean(steps), "ckpt_mb": ck.stat().st_size / 1e6 if ck.exists() else None,
                     "base": test[0][key], "final": test[-1][key], "gain": test[-1][key] - test[0][key]})
    return rows


def table(results: dict[str, list[dict]]) -> str:
    out = ["| arm | lr (tuned) | runs | step time (s) | checkpoint (MB) | test greedy_acc gain (mean ± sd) |",
           "|---|---|---|---|---|---|"]
    for name, rows in results.items():
        gains = [r["gain"] for r in rows]
        sd = statistics.stdev(gains) if len(gains) > 1 else 0.0
        ck = [r["ckpt_mb"] for r in rows if r["ckpt_mb"] is not None]
        out.append(f"| {name} | {rows[0]['lr']:g} | {len(rows)} | {statistics.mean(r['step_s'] for r in rows):.2f} | "
                   f"{statistics.mean(ck) if ck else float('nan'):.1f} | {statistics.mean(gains):+.3f} ± {sd:.3f} |")
    out += ["", "| arm | run | seed | step time (s) | checkpoint (MB) | base | final | gain |",
            "|---|---|---|---|---|---|---|---|"]
    for name, rows in results.items():
        out += [f"| {name} | `{r['run']}` | {r['seed']} | {r['step_s']:.2f} | {r['ckpt_mb']:.1f} | {r['base']:.3f} | "
                f"{r['final']:.3f} | {r['gain']:+.3f} |" for r in rows]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="sweep root (default results/lora; --smoke: a temp folder)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cluster", default="local")
    ap.add_argument("--smoke", action="store_true", help="two steps, one lr, one seed: check the pipeline")
    ap.add_argument("--compact", action="store_true", help="copy OUT's final runs compactly into benchmarks/lora/runs/")
    a = ap.parse_args()
    if a.compact:
        import shutil

        from rlsuite.sweeps.study import compact_copy

        out, dest = a.out or ROOT / "results" / "lora", Path(__file__).with_name("runs")
        for name in ARMS:
            final = out / f"{name}-tuned"
            for run in sorted(p for p in final.iterdir() if (p / "status.json").exists()):
                compact_copy(run, dest / name / run.name, keep_prefixes=("budget/", "perf/"))
            shutil.copy2(out / f"{name}-tune" / "selection.json", dest / f"{name}-selection.json")
        print(f"compact copies in {dest}")
        return 0
    out = a.out or (Path(tempfile.mkdtemp(prefix="lora-smoke-")) if a.smoke else ROOT / "results" / "lora")
    (out / "specs").mkdir(parents=True, exist_ok=True)
    results = {}
    for name, arm in ARMS.items():
        path = out / "specs" / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec_for(name, arm, a.smoke), sort_keys=False))
        cli("sweep", "tune", str(path), "--out", str(out), "--cluster", a.cluster, "--workers", str(a.workers))
        tuned = out / f"{name}-tuned.yaml"
        cli("sweep", "run", str(tuned), "--out", str(out), "--cluster", a.cluster, "--workers", str(a.workers))
        results[name] = measure(out / yaml.safe_load(tuned.read_text())["name"])
    text = table(results)
    if a.smoke:
        print(text)
        return 0
    head = ["# LoRA against full fine-tuning on SmolLM2-135M-Instruct (issue 40 §2)", "",
            f"Command: `{command(__file__, *sys.argv[1:])}`. Machine: {machine()}. Each arm's lr tuned on its own "
            f"(`rlsuite sweep tune`, 3 lrs × 2 tuning seeds at clip_eps_high 0.2, val greedy_acc); final runs "
            f"on seeds 0, 1, 2. "
            f"Selections: `{out}/<arm>-tune/selection.json`.", ""]
    write_results(Path(__file__).with_name("lora.md"), "\n".join(head) + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
