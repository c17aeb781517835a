"""``rlsuite sweep run|status``, ``rlsuite quickstart`` (installed into :mod:`suite.cli`).

``--out`` is the root for every sweep command: results go to ``<root>/<sweep name>/<run_id>/``
(default root ``results/``); the quickstart report to ``<root>/quickstart/report/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite import cli as _cli
from suite.errors import BadInput


def _add(sub) -> None:
    sw = sub.add_parser("sweep", help="expand and launch sweeps (submitit: SLURM job arrays or local)")
    ssub = sw.add_subparsers(dest="sweep_cmd", required=True)
    run = ssub.add_parser("run", help="run every missing run of a sweep spec")
    run.add_argument("spec", help="bundled spec name (quickstart, leaderboard, batch_size, ...) or a YAML path")
    run.add_argument("--out", type=Path, default=Path("results"), help="root folder (default results/)")
    run.add_argument("--cluster", choices=["auto", "slurm", "local", "debug"], default="local")
    run.add_argument("--workers", type=int, default=2, help="local runs at a time (1 torch thread each)")
    run.add_argument("--dry-run", action="store_true", help="print the runs, one per line; submit nothing")
    run.add_argument("--retry-failed", action="store_true", help="also resubmit runs whose state is failed")
    run.add_argument("--no-wait", action="store_true", help="SLURM: return after submitting")
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


def _progress_bar(total: int):
    from tqdm import tqdm

    bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def update(done: int, _total: int) -> None:
        bar.n = done
        bar.refresh()

    return bar, update


def run_sweep(spec_ref: str, out: Path, cluster: str, workers: int, dry_run: bool = False,
              retry_failed: bool = False, wait: bool = True, progress: bool = True) -> tuple[Path, dict]:
    from sweeps.spec import load

    return run_sweep_spec(load(spec_ref), out, cluster, workers, dry_run, retry_failed, wait, progress)


def run_sweep_spec(sweep, out: Path, cluster: str, workers: int, dry_run: bool = False,
                   retry_failed: bool = False, wait: bool = True, progress: bool = True) -> tuple[Path, dict]:
    """Expand (validating everything first), skip what is done, launch the rest, wait."""
    from sweeps.launch import launch, status, to_submit, wait_for_live, write_manifest
    from sweeps.spec import expand

    runs = expand(sweep)
    root = out / sweep.name
    if dry_run:
        for r in runs:
            print(f"{r.run_id}\ttask={r.task.name}\talgo={r.algo.name}\tseed={r.seed}\tvariant={r.variant or '-'}")
        return root, {}
    from suite.spec import out_dir_problem

    problem = out_dir_problem(root)
    if problem:
        raise BadInput(problem)
    write_manifest(sweep, runs, root)
    todo, skipped = to_submit(runs, root, retry_failed)
    for why, ids in skipped.items():
        print(f"skipping {len(ids)} {why} run(s)", file=sys.stderr)
    print(f"{sweep.name}: {len(runs)} runs, {len(todo)} to run", file=sys.stderr)
    bar, update = _progress_bar(len(todo)) if progress and todo and cluster != "slurm" else (None, None)
    try:
        results = launch(todo, root, cluster, sweep.resources, workers=workers, wait=wait, progress=update)
    finally:
        if bar is not None:
            bar.close()
    for res in results:
        if isinstance(res, dict) and res.get("locked"):
            print(f"skipped {res.get('run_id') or 'a run'}: {res['locked'].strip().splitlines()[-1]}", file=sys.stderr)
        elif isinstance(res, dict) and res.get("error"):
            print(f"job error (exit {res.get('code')}): {res['error'].strip().splitlines()[-1]}", file=sys.stderr)
    if cluster != "slurm" or wait:
        wait_for_live(runs, root)
    return root, status(root)


def cmd_sweep(args) -> int:
    from sweeps.launch import status

    if args.sweep_cmd == "tune":
        from sweeps.tune import tune

        path = tune(args.spec, args.out, args.cluster, args.workers)
        print(f"tuned spec: {path.resolve()}")
        return 0
    if args.sweep_cmd == "status":
        if not args.folder.is_dir():
            raise BadInput(f"{args.folder} is not a sweep folder (expected <root>/<sweep name>)")
        st = status(args.folder)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            print(f"{st['root']}: {st['total']} runs " + " ".join(f"{k}={v}" for k, v in st["counts"].items()))
            for state, rows in st["runs"].items():
                if state in ("completed",):
                    continue
                for r in rows:
                    extra = f" ({r['reason']})" if r["reason"] else ""
                    log = f" log: {r['stderr']}" if r.get("stderr") else ""
                    print(f"  {state:<10} {r['run_id']}{extra}{log}")
        return 0
    root, st = run_sweep(args.spec, args.out, args.cluster, args.workers, args.dry_run, args.retry_failed,
                         wait=not args.no_wait)
    if st:
        print(f"{root}: " + " ".join(f"{k}={v}" for k, v in st["counts"].items()))
    bad = {k: v for k, v in st.get("counts", {}).items() if k in ("failed",)}
    never = st.get("counts", {}).get("pending", 0) if not (args.no_wait and args.cluster in ("slurm", "auto")) else 0
    if never:  # the sweep waited for its jobs, yet these runs have no status: their jobs never started a run
        print(f"{never} run(s) never started (state pending): see the job errors above and the logs under "
              f"{root / 'logs'}", file=sys.stderr)
    return 1 if bad or never else 0


def cmd_quickstart(args) -> int:
    root, st = run_sweep("quickstart", args.out, "local", args.workers)
    print(f"{root}: " + " ".join(f"{k}={v}" for k, v in st["counts"].items()), file=sys.stderr)
    report_dir = root / "report"
    try:
        from reports.build import build_report
        from reports.config import ReportConfig
    except ImportError as e:  # the report extra is missing: a plain table instead
        print(f"(report extra not installed: {e}; install with pip install -e '.[report]')", file=sys.stderr)
        print(_plain_table(root))
        return 0
    html = build_report(root, report_dir, ReportConfig(reps=args.reps))
    print((report_dir / "leaderboard.md").read_text() if (report_dir / "leaderboard.md").exists() else "")
    print(f"report: {Path(html).resolve().parent}")
    return 0


def _plain_table(root: Path) -> str:
    from suite.runfolder import read_jsonl

    lines = ["run_id\tstate\tfinal test greedy_acc"]
    for spec in sorted(root.glob("*/spec.json")):
        evals = [e for e in read_jsonl(spec.parent / "evals.jsonl") if e.get("final") and e["split"] == "test"]
        acc = next((v for k, v in evals[-1].items() if k.endswith("greedy_acc")), None) if evals else None
        st = json.loads((spec.parent / "status.json").read_text()).get("state")
        lines.append(f"{spec.parent.name}\t{st}\t{acc}")
    return "\n".join(lines)


def _install(sub) -> None:
    _add(sub)


_cli._EXTENSIONS.append(_install)
_cli.COMMANDS["sweep"] = cmd_sweep
_cli.COMMANDS["quickstart"] = cmd_quickstart
