"""``rlsuite sweep run|tune|status|register|verify``, ``rlsuite quickstart``: :func:`add_arguments` and
:data:`COMMANDS`, registered explicitly by :mod:`rlsuite.suite.cli` (this module never imports it).

``--out`` is the root for every sweep command: results go to ``<root>/<sweep name>/<run_id>/``
(default root ``results/``); the quickstart report to ``<root>/quickstart/report/``.
``register`` and ``verify`` (and ``run --study``) are the study protocol of :mod:`rlsuite.sweeps.study`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rlsuite.suite.errors import BadInput


def add_arguments(sub) -> None:
    """Add the ``sweep`` and ``quickstart`` subcommands to ``sub`` (an argparse subparsers object)."""
    sw = sub.add_parser("sweep", help="expand and launch sweeps (submitit: SLURM job arrays or local)")
    ssub = sw.add_subparsers(dest="sweep_cmd", required=True)
    run = ssub.add_parser("run", help="run every missing run of a sweep spec")
    run.add_argument("spec", nargs="?", default=None,
                     help="bundled spec name (quickstart, leaderboard, batch_size, ...) or a YAML path (with --study: "
                          "default the registered spec)")
    run.add_argument("--out", type=Path, default=Path("results"), help="root folder (default results/)")
    run.add_argument("--cluster", choices=["auto", "slurm", "local", "debug"], default="local")
    run.add_argument("--workers", type=int, default=2, help="local runs at a time (1 torch thread each)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the runs, one per line, with their planned samples, FLOPs, checkpoint and "
                          "final-model disk and GPU-hours, and a total line; submit nothing (sweeps/cost.py)")
    run.add_argument("--throughput", type=float, default=None, metavar="FLOP/S",
                     help="--dry-run: per-GPU throughput of the GPU-hours (default 3.956e14: 40%% MFU of an "
                          "H100 SXM's 989 TFLOP/s dense bf16)")
    run.add_argument("--prompt-tokens", type=int, default=None, metavar="N",
                     help="--dry-run: assumed prompt tokens per sample (default 512)")
    run.add_argument("--retry-failed", action="store_true", help="also resubmit runs whose state is failed")
    run.add_argument("--no-wait", action="store_true", help="SLURM: return after submitting")
    from rlsuite.suite.trackers import TRACKERS

    run.add_argument("--log", action="append", default=[], metavar="NAME",
                     help=f"every run also logs to this experiment tracker: {', '.join(TRACKERS)} (the spec's "
                          f"set: {{log.trackers: [NAME]}}; repeatable; not in the run ids)")
    run.add_argument("--study", type=Path, default=None, metavar="STUDY_DIR",
                     help="a registered study folder (rlsuite sweep register): each finished run's compact copy "
                          "goes to STUDY_DIR/runs/<sweep>/<run_id>/ as it finishes; run ids already copied there "
                          "are skipped; refused when the run code differs from the registered commit")
    run.add_argument("--allow-code-change", action="store_true",
                     help="with --study: run although suite/, algorithms/, tasks/ or sweeps/*.py differ from the "
                          "registered commit (each copy records the commit it ran at; check with sweep verify)")
    rg = ssub.add_parser("register", help="pre-register a study at the current commit: STUDY_DIR/study.json")
    rg.add_argument("spec", help="bundled spec name or a YAML path (commit it with the study)")
    rg.add_argument("--out", type=Path, required=True, metavar="STUDY_DIR",
                    help="the study folder, inside the repository (e.g. benchmarks/<study>)")
    rg.add_argument("--keep-prefix", action="append", default=[], metavar="PREFIX",
                    help="the compact copies also keep the metrics starting with PREFIX (repeatable; budget/, the "
                         "usual curves and the checks' signals always)")
    vf = ssub.add_parser("verify", help="path identity: a short reference run at the registered commit vs this code")
    vf.add_argument("study", type=Path, metavar="STUDY_DIR")
    vf.add_argument("--run-id", default=None, help="the reference run (default: the study's first run id)")
    vf.add_argument("--updates", type=int, default=2, help="steps of the reference runs (budget.updates; default 2)")
    vf.add_argument("--against", default="current", metavar="REV",
                    help="compare the registered commit with this commit (a second worktree) instead of the "
                         "current code (default: current)")
    vf.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="an override for both sides (e.g. eval.max_prompts=8); repeatable")
    vf.add_argument("--out", type=Path, default=None, help="keep the two reference runs here (default: a temp folder)")
    vf.add_argument("--json", action="store_true")
    pl = ssub.add_parser("plan", help="seeds and CPU-hours for a spec's planned comparisons, from a pilot")
    pl.add_argument("spec", help="bundled spec name or a YAML path with comparisons: (and checks:)")
    pl.add_argument("--pilot", type=Path, required=True, metavar="ROOT",
                    help="root of the pilot's run folders (>= 5 seeds of each compared arm)")
    pl.add_argument("--confidence", type=float, default=None,
                    help="family-wise level 1 - alpha (default: the spec's score.confidence, else 0.95)")
    pl.add_argument("--power", type=float, default=0.8, help="power for the smallest effect (default 0.8)")
    pl.add_argument("--json", action="store_true")
    tu = ssub.add_parser("tune", help="equal-budget grid (LR x the entry's knob) on val; writes the final spec")
    tu.add_argument("spec")
    tu.add_argument("--out", type=Path, default=Path("results"))
    tu.add_argument("--cluster", choices=["auto", "slurm", "local", "debug"], default="local")
    tu.add_argument("--workers", type=int, default=2)
    st = ssub.add_parser("status", help="runs of a sweep folder by state, with reasons and logs")
    st.add_argument("folder", type=Path, help="<root>/<sweep name>")
    st.add_argument("--json", action="store_true")
    qs = sub.add_parser("quickstart", help="run the embedded quickstart sweep locally, then its report")
    qs.add_argument("--out", type=Path, default=Path("results"), help="root folder (default results/)")
    qs.add_argument("--workers", type=int, default=2)
    qs.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the report")


def cmd_sweep(args) -> int:
    from rlsuite.sweeps.launch import describe_compute, run_sweep, status

    if args.sweep_cmd == "tune":
        from rlsuite.sweeps.tune import tune

        path = tune(args.spec, args.out, args.cluster, args.workers)
        print(f"tuned spec: {path.resolve()}")
        return 0
    if args.sweep_cmd == "plan":
        from rlsuite.sweeps.plan import describe, plan

        if not ((args.confidence is None or 0.5 < args.confidence < 1) and 0 < args.power < 1):
            raise BadInput(f"--confidence must be in (0.5, 1) and --power in (0, 1); "
                           f"got {args.confidence}, {args.power}")
        p = plan(args.spec, args.pilot, args.confidence, args.power)
        print(json.dumps(p, indent=1, default=str) if args.json else describe(p))
        return 0
    if args.sweep_cmd == "register":
        from rlsuite.sweeps.study import load_study, register

        path = register(args.spec, args.out, tuple(args.keep_prefix))
        doc = load_study(args.out)
        print(f"registered {doc['name']} at commit {doc['commit'][:12]}: {len(doc['runs'])} runs, "
              f"{len(doc['comparisons'])} comparisons, {len(doc['checks'])} checks -> {path}\n"
              f"commit it now; then: rlsuite sweep run --study {args.out} [--cluster ...] [--out ROOT]")
        return 0
    if args.sweep_cmd == "verify":
        from rlsuite.suite.config import parse_assignment
        from rlsuite.sweeps.study import describe_verify, verify

        sets = [parse_assignment(s, "--set") for s in args.set]
        try:
            res = verify(args.study, args.run_id, args.updates, args.against, sets, args.out)
        except RuntimeError as e:  # a reference run failed (not bad input)
            print(f"rlsuite sweep verify: {e}", file=sys.stderr)
            return 1
        print(json.dumps(res, indent=1, default=str) if args.json else describe_verify(res))
        return 0 if res["identical"] else 1
    if args.sweep_cmd == "status":
        if not args.folder.is_dir():
            raise BadInput(f"{args.folder} is not a sweep folder (expected <root>/<sweep name>)")
        st = status(args.folder)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            print(f"{st['root']}: {st['total']} runs " + " ".join(f"{k}={v}" for k, v in st["counts"].items()))
            print(describe_compute(st["compute"]))
            for state, rows in st["runs"].items():
                if state in ("completed",):
                    continue
                for r in rows:
                    extra = f" ({r['reason']})" if r["reason"] else ""
                    log = f" log: {r['stderr']}" if r.get("stderr") else ""
                    print(f"  {state:<10} {r['run_id']}{extra}{log}")
        return 0
    cost = {}
    if args.throughput is not None:
        if not (math.isfinite(args.throughput) and args.throughput > 0):
            raise BadInput(f"--throughput must be a positive number of FLOP/s, got {args.throughput}")
        cost["throughput"] = args.throughput
    if args.prompt_tokens is not None:
        if args.prompt_tokens < 0:
            raise BadInput(f"--prompt-tokens must be ≥ 0, got {args.prompt_tokens}")
        cost["prompt_tokens"] = args.prompt_tokens
    logs = list(dict.fromkeys(n.strip() for v in args.log for n in v.split(",") if n.strip()))
    root, st = run_sweep(args.spec, args.out, args.cluster, args.workers, args.dry_run, args.retry_failed,
                         wait=not args.no_wait, cost=cost, log=logs, study=args.study,
                         allow_code_change=args.allow_code_change)
    if st:
        print(f"{root}: " + " ".join(f"{k}={v}" for k, v in st["counts"].items()))
    bad = {k: v for k, v in st.get("counts", {}).items() if k in ("failed",)}
    never = st.get("counts", {}).get("pending", 0) if not (args.no_wait and args.cluster in ("slurm", "auto")) else 0
    if never:  # the sweep waited for its jobs, yet these runs have no status: their jobs never started a run
        print(f"{never} run(s) never started (state pending): see the job errors above and the logs under "
              f"{root / 'logs'}", file=sys.stderr)
    return 1 if bad or never else 0


REPORT_EXTRA = ("seaborn", "matplotlib", "plotly")
"""The packages of the ``report`` extra (pyproject.toml): the only missing modules the quickstart
answers with a plain table instead of the report."""


def cmd_quickstart(args) -> int:
    from rlsuite.sweeps.launch import run_sweep

    root, st = run_sweep("quickstart", args.out, "local", args.workers)
    print(f"{root}: " + " ".join(f"{k}={v}" for k, v in st["counts"].items()), file=sys.stderr)
    report_dir = root / "report"
    try:
        from rlsuite.reports.build import build_report
        from rlsuite.reports.config import ReportConfig
    except ModuleNotFoundError as e:  # the report extra is missing: a plain table instead
        if (e.name or "").split(".")[0] not in REPORT_EXTRA:  # anything else is a bug: loud
            raise
        print(f"(report extra not installed: {e}; install with pip install -e '.[report]')", file=sys.stderr)
        print(_plain_table(root))
        return 0
    html = build_report(root, report_dir, ReportConfig(reps=args.reps))
    print((report_dir / "leaderboard.md").read_text() if (report_dir / "leaderboard.md").exists() else "")
    print(f"report: {Path(html).resolve().parent}")
    return 0


def _plain_table(root: Path) -> str:
    from rlsuite.suite.runfolder import read_jsonl

    lines = ["run_id\tstate\tfinal test greedy_acc"]
    for spec in sorted(root.glob("*/spec.json")):
        evals = [e for e in read_jsonl(spec.parent / "evals.jsonl") if e.get("final") and e["split"] == "test"]
        acc = next((v for k, v in evals[-1].items() if k.endswith("greedy_acc")), None) if evals else None
        st = json.loads((spec.parent / "status.json").read_text()).get("state")
        lines.append(f"{spec.parent.name}\t{st}\t{acc}")
    return "\n".join(lines)


COMMANDS = {"sweep": cmd_sweep, "quickstart": cmd_quickstart}
