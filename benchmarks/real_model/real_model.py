"""Real-task evals of a real pretrained model (default ``smollm2-135m``) through its chat template.

For each task's shared data sample (gsm8k, math, humaneval, mbpp, search; ``$RLSUITE_DATA``):
greedy accuracy on the first 100 test rows (or all, when the sample holds fewer) and avg@4 at
temperature 1 on the first 25, at most 384 new tokens, through ``rlsuite``'s own eval path
(``rlsuite.suite.evaluate.evaluate`` with the task's prompt, chat template, stop tokens and grader).
Every completion is written to ``benchmarks/real_model/<task>.jsonl`` so the numbers can
be read against the text; the figures go to ``benchmarks/real_model/real_model.md`` (section
"Evals"), with the machine, the versions and the wall time of each task.

    rlsuite models fetch smollm2-135m
    python benchmarks/real_model/real_model.py evals [--tasks gsm8k,math] [--greedy 100] [--sampled 25]
    python benchmarks/real_model/real_model.py render            # the Evals table from the saved JSON
    rlsuite sweep run sweeps/real_model.yaml --cluster local --workers 2
    python benchmarks/real_model/real_model.py learning runs/real_model   # per-run learning table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
"""The study folder: real_model.md and each task's figures (``<task>.json``) and completions (``<task>.jsonl``)."""
DATA = {"gsm8k": "gsm8k", "math": "math", "humaneval": "code", "mbpp": "code", "search": "search"}


def data_root() -> Path:
    return Path(os.environ.get("RLSUITE_DATA", ROOT.parent / "shared" / "data"))


def eval_task(task_name: str, model: str, n_greedy: int, n_sampled: int, k: int, max_new: int,
              threads: int, extra_sets=()) -> dict:
    import torch

    from rlsuite import tasks  # noqa: F401
    from rlsuite.suite.config import EvalConfig
    from rlsuite.suite.evaluate import evaluate
    from rlsuite.suite.models import load_model
    from rlsuite.suite.prompts import encode_prompt
    from rlsuite.suite.engines.factory import make_engine
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.stop import stop_ids as stop_ids_of
    from rlsuite.tasks.base import TASKS

    torch.set_num_threads(threads)
    sets = [("task.data_path", str(data_root() / DATA[task_name])), ("rollout.max_new_tokens", max_new),
            *extra_sets]
    spec = resolve(task_name, "grpo", model, 0, sets=sets)
    task = TASKS.get(task_name)(spec.task)
    rows, out = [], {"task": task_name, "model": model, "max_new_tokens": max_new}
    if n_greedy == 0:  # keep the committed greedy figures and completions; run only the sampled protocol
        prev = OUT / f"{task_name}.json"
        if prev.exists() and "greedy" in json.loads(prev.read_text()):
            out["greedy"] = json.loads(prev.read_text())["greedy"]
            with open(OUT / f"{task_name}.jsonl") as f:
                rows = [r for r in map(json.loads, f) if r.get("mode") == "greedy"]
            for r in rows:
                r.pop("cpu_model", None)
    t0 = time.perf_counter()
    try:
        mdl, tok, _ = load_model(spec.model)
        mdl.eval()
        engine = make_engine(spec.rollout.engine, mdl, tok, spec.rollout)
        stops = stop_ids_of(tok, mdl)
        test = task.splits()["test"]
        for mode, n_rows, cfg in (
                ("greedy", n_greedy, EvalConfig(greedy=True, n_samples=0, save_samples=10 ** 6, batch_size=32)),
                ("sampled", n_sampled, EvalConfig(greedy=False, n_samples=k, ks=(1, k), temperature=1.0,
                                                  save_samples=10 ** 6, batch_size=32))):
            ex = test[:n_rows]
            if not ex:
                continue
            enc = [encode_prompt(task, e, tok, spec.model.chat_template) for e in ex]
            t = time.perf_counter()
            res, samples = evaluate(engine, tok, task, ex, [e[0] for e in enc], [e[1] for e in enc], cfg,
                                    max_new, stops, spec.rollout.max_turns, spec.rollout.max_obs_tokens)
            out[mode] = {"n_prompts": len(ex), **res, "wall_s": round(time.perf_counter() - t, 1)}
            rows += samples
            print(f"[{task_name}] {mode}: {json.dumps(out[mode])}", file=sys.stderr, flush=True)
            out["wall_s"] = round(time.perf_counter() - t0, 1)
            out["test_rows_available"] = len(test)
            _save(task_name, out, rows)  # after each protocol: a stopped job keeps what it finished
    finally:
        task.close()
    return out


def _save(task_name: str, out: dict, rows: list) -> None:
    """Write the task's figures and completions, each naming the CPU model they were measured on."""
    from rlsuite.suite.runfolder import cpu_model

    cpu = cpu_model()
    out["cpu_model"] = cpu
    rows = [{**r, "cpu_model": cpu} for r in rows]
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{task_name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
    (OUT / f"{task_name}.json").write_text(json.dumps(out, indent=1) + "\n")


CARD = {  # published figures of the original (bf16) SmolLM2-135M-Instruct, where a task matches
    "gsm8k": "1.4% (5-shot, the model card's table as recalled; the card cannot be re-read from this "
             "machine); 0.38% (0-shot lm-eval flexible-extract, a third-party report of the original)",
}


def render_evals(model: str) -> str:
    """The "Evals" section of real_model.md from the per-task JSON files."""
    from rlsuite.suite.runfolder import cpu_model

    lines = ["## Evals", "",
             f"Model `{model}` (fp32, dequantized from the 4-bit GGUF), through its chat template (the task's "
             "prompt as the user turn, the template's default system prompt), 0-shot, at most 384 new tokens, "
             "stop at `<|im_end|>`; greedy on the first 100 test rows of each shared sample (all rows where it "
             "holds fewer), avg@4 / pass@4 at temperature 1 on the first 25. "
             f"CPU: {cpu_model()}, 1 torch thread (the other core busy with other jobs: wall times are inflated).",
             "", "| task | greedy (n) | avg@4 (n) | pass@4 | published (original bf16 model) | wall |",
             "|---|---|---|---|---|---|"]
    for t in DATA:
        p = OUT / f"{t}.json"
        if not p.exists():
            lines.append(f"| {t} | not run | | | {CARD.get(t, '—')} | |")
            continue
        r = json.loads(p.read_text())
        g, s = r.get("greedy", {}), r.get("sampled", {})
        fmt = lambda d, k: f"{d[k]:.3f}" if k in d else "not run"
        lines.append(f"| {t} | {fmt(g, 'greedy_acc')} ({g.get('n_prompts', 0)}) | {fmt(s, 'avg@4')} "
                     f"({s.get('n_prompts', 0)}) | {fmt(s, 'pass@4')} | {CARD.get(t, '—')} | "
                     f"{(g.get('wall_s', 0) + s.get('wall_s', 0)) / 60:.0f} min |")
    lines += ["", "Every completion is in `benchmarks/real_model/<task>.jsonl` (prompt, completion, "
              "parsed answer, gold, reward)."]
    return "\n".join(lines) + "\n"


def render_learning(root: Path) -> str:
    """Per-run table of a ``sweeps/real_model.yaml`` sweep: test greedy and avg@4 at step 0 and
    at the end, train wall time; then per-algorithm means."""
    rows, by_algo = [], {}
    for d in sorted(p for p in Path(root).iterdir() if (p / "spec.json").exists()):
        spec = json.loads((d / "spec.json").read_text())
        st = json.loads((d / "status.json").read_text())
        ev = [json.loads(x) for x in (d / "evals.jsonl").read_text().splitlines() if x.strip()]
        test = [e for e in ev if e["split"] == "test"]
        if st["state"] != "completed" or len(test) < 2:
            rows.append(f"| {spec['algo']['name']} | {spec['seed']} | {st['state']} | | | | | | | |")
            continue
        t0, t1 = test[0], test[-1]
        task = spec["task"]["name"]
        g0, g1 = t0[f"eval/{task}/greedy_acc"], t1[f"eval/{task}/greedy_acc"]
        a0, a1 = t0[f"eval/{task}/avg@4"], t1[f"eval/{task}/avg@4"]
        m = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        wall = m[-1]["budget/wall_s"]
        from datetime import datetime

        run_wall = (datetime.fromisoformat(st["updated_at"]) - datetime.fromisoformat(st["started_at"])).total_seconds()
        by_algo.setdefault(spec["algo"]["name"], []).append((g1 - g0, a1 - a0, wall))
        rows.append(f"| {spec['algo']['name']} | {spec['seed']} | {g0:.3f} | {g1:.3f} | {g1 - g0:+.3f} | {a0:.3f} | "
                    f"{a1:.3f} | {a1 - a0:+.3f} | {wall:.0f} | {run_wall:.0f} |")
    out = ["| algorithm | seed | greedy before | after | Δ greedy | avg@4 before | after | Δ avg@4 | train wall s | "
           "run wall s (evals, load) |", "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
           "| algorithm | seeds | mean Δ greedy | min | mean Δ avg@4 | min | mean train wall s |",
           "|---|---|---|---|---|---|---|"]
    for a, v in sorted(by_algo.items()):
        out.append(f"| {a} | {len(v)} | {sum(x[0] for x in v) / len(v):+.3f} | {min(x[0] for x in v):+.3f} | "
                   f"{sum(x[1] for x in v) / len(v):+.3f} | {min(x[1] for x in v):+.3f} | "
                   f"{sum(x[2] for x in v) / len(v):.0f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("evals", help="greedy + avg@k evals on every task's shared sample")
    ev.add_argument("--model", default="smollm2-135m")
    ev.add_argument("--tasks", default=",".join(DATA))
    ev.add_argument("--greedy", type=int, default=100,
                    help="first N test rows, greedy (0: keep the committed greedy figures, run only --sampled)")
    ev.add_argument("--sampled", type=int, default=25, help="first N test rows, k samples each at temperature 1")
    ev.add_argument("--k", type=int, default=4)
    ev.add_argument("--max-new-tokens", type=int, default=384)
    ev.add_argument("--threads", type=int, default=1)
    rd = sub.add_parser("render", help="print the Evals section of real_model.md from the saved JSON")
    rd.add_argument("--model", default="smollm2-135m")
    le = sub.add_parser("learning", help="print the per-run learning table of a real_model sweep root")
    le.add_argument("root", help="e.g. runs/real_model")
    args = ap.parse_args(argv)
    if args.cmd == "render":
        print(render_evals(args.model))
    if args.cmd == "learning":
        print(render_learning(Path(args.root)))
    if args.cmd == "evals":
        for t in args.tasks.split(","):
            eval_task(t, args.model, args.greedy, args.sampled, args.k, args.max_new_tokens, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
