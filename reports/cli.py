"""Command line: `rlsuite report ROOT [ROOT ...] [--out DIR] [options]` (also `python -m reports ...`).

The lead's CLI calls `add_arguments(subparser)` and then `main(args)`; `main` returns the
exit code: 0 on success, 2 on bad input (the message goes to stderr). Several roots make a
compare report (every algorithm labelled by its root's folder name, `rlsuite.reports.load.load_roots`);
`--out` is then required (a default inside one root would mix a compare report into that
root's own report folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rlsuite.reports.config import X_AXES, ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.normalise import MODES as NORMALISE_MODES
from rlsuite.reports.stability import StabilityThresholds
from rlsuite.reports.stats import CI_CHOICES


class _Unset:
    """An option not given on the command line (``None`` is a value: ``per_dataset``'s automatic)."""

    def __repr__(self) -> str:
        return "unset"


UNSET = _Unset()
"""The default of the score options a planned file may fix (``SCORED``): unset on the command line, the
planned file's value applies, else ReportConfig's."""
SCORED = {"score": "--score", "k": "--k", "metric": "--metric", "normalise": "--normalise",
          "per_dataset": "--per-dataset", "confidence": "--confidence"}
"""ReportConfig field -> its option, for the fields a sweep spec's ``score`` (a study's ``report``) fixes."""

REPORT_EXTRA = ("seaborn", "matplotlib")
"""Top-level modules of the ``report`` extra (``pip install -e ".[report]"``)."""
STABILITY_FIELDS = tuple(f.name for f in dataclasses.fields(StabilityThresholds))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the report options to `parser` (defaults are ReportConfig's)."""
    d = ReportConfig()
    parser.add_argument("root", type=Path, nargs="+", metavar="ROOT",
                        help="report root: run folders (with spec.json) at depth <= 3; several roots (two code "
                             "versions, two machines) make a compare report, algorithms labelled 'grpo [ROOTNAME]'")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: ROOT/report; required with several roots)")
    parser.add_argument("--score", choices=["final", "last-k"], default=UNSET,
                        help=f"final test eval at the matched budget, or the mean of the last k val evals "
                             f"(default: {d.score}, or the planned comparisons' registered score)")
    parser.add_argument("--k", type=int, default=UNSET, help=f"evals averaged by --score last-k (default {d.k})")
    parser.add_argument("--metric", default=UNSET,
                        help=f"eval metric after eval/<task>/ (e.g. pass@1; default {d.metric})")
    parser.add_argument("--target", type=float, default=None,
                        help="time-to-target threshold (default: 80%% of the best mean score per task)")
    parser.add_argument("--normalise", choices=list(NORMALISE_MODES), default=UNSET,
                        help="how each task's scores enter the aggregates across tasks: raw, gain (s - base) or "
                             "headroom ((s - base) / (1 - base)), base = the task's step-0 score; auto (default): "
                             "headroom when the aggregates span > 1 task, raw for one; per-task tables stay raw")
    parser.add_argument("--per-dataset", action=argparse.BooleanOptionalAction, default=UNSET,
                        help="score a battery run (its evals log <metric>_<label> per dataset) as one task per "
                             "dataset, <task>[<label>]; default: runs whose spec lists >= 2 task.datasets (a mixture); "
                             "--no-per-dataset scores the pooled metric")
    parser.add_argument("--reps", type=int, default=d.reps, help="bootstrap resamples (>= 2000 to publish)")
    parser.add_argument("--ci", choices=list(CI_CHOICES), default=d.ci,
                        help="interval method of means over seeds: auto (default: per n, the method with the best "
                             "measured coverage), percentile, bca, t (Student-t), studentized (bootstrap-t)")
    parser.add_argument("--confidence", type=float, default=UNSET, help=f"interval level (default {d.confidence})")
    parser.add_argument("--seed", type=int, default=d.seed, help="random state of every bootstrap")
    parser.add_argument("--x", default=d.x, choices=X_AXES, help="x-axis of curves and time-to-target")
    parser.add_argument("--smooth", type=int, default=d.smooth, help="evals in the time-to-target moving average")
    parser.add_argument("--reference", default=None, help="algorithm label that differences compare against")
    parser.add_argument("--include-partial", action="store_true", help="score running/preempted/cancelled runs")
    parser.add_argument("--scaling-x", default=d.scaling_x, choices=X_AXES, help="compute axis of the sigmoid fit")
    parser.add_argument("--scaling-reps", type=int, default=d.scaling_reps, help="bootstrap refits per fit")
    parser.add_argument("--scaling-skip-frac", type=float, default=d.scaling_skip_frac,
                        help="fraction of each run's compute range dropped before fitting "
                             "(default: ScaleRL's 1.5k of ~100k GPU-hours)")
    parser.add_argument("--examples", type=int, default=d.examples_per_algorithm, help="completions per algorithm")
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    parser.add_argument("--comparisons", type=Path, default=None, metavar="FILE",
                        help="the planned comparisons: a sweep spec (YAML, its `comparisons:`, `checks:` and "
                             "`score:`) or a study's study.json; default: ROOT/study.json or ROOT/../study.json when "
                             "there is one; `none`: no planned comparisons (an exploratory report)")
    parser.add_argument("--stability", action="append", default=[], metavar="FIELD=VALUE",
                        help=f"stability threshold override ('none' disables); fields: {', '.join(STABILITY_FIELDS)}")
    return parser


def parse_stability(items: list[str]) -> StabilityThresholds:
    """Build thresholds from FIELD=VALUE strings; raises ReportError naming the valid fields."""
    base, changes = StabilityThresholds(), {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in STABILITY_FIELDS:
            raise ReportError(f"bad --stability {item!r}; expected FIELD=VALUE with FIELD in: "
                              f"{', '.join(STABILITY_FIELDS)}")
        default = getattr(base, name)
        try:
            changes[name] = None if raw.lower() == "none" else (int(raw) if isinstance(default, int) else float(raw))
        except ValueError as exc:
            raise ReportError(f"bad value for --stability {name}: {raw!r} ({exc})") from None
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise ReportError(str(exc)) from None


def _planned(path: Path | None, roots: list[Path], key: str) -> list | dict:
    """The raw ``key`` list (``comparisons`` or ``checks``; ``score``: a mapping, a study.json's
    ``report``) of a sweep spec (YAML) or a study.json;
    with no path, a study.json in or above the first root (a study folder's ``runs/<sweep>/`` is two
    levels down)."""
    import json

    if path is not None and str(path) == "none":
        return []
    if path is None:
        for cand in (roots[0] / "study.json", roots[0].parent / "study.json", roots[0].parent.parent / "study.json"):
            if cand.is_file():
                path = cand
                break
        else:
            return []
    if not Path(path).is_file():
        raise ReportError(f"--comparisons {path}: no such file (give a sweep spec YAML or a study.json)")
    if Path(path).suffix == ".json":
        try:
            return json.loads(Path(path).read_text()).get("report" if key == "score" else key) or []
        except (json.JSONDecodeError, AttributeError) as exc:
            raise ReportError(f"--comparisons {path}: not a study.json ({exc})") from None
    from rlsuite.suite.errors import BadInput
    from rlsuite.sweeps.spec import load

    try:
        value = getattr(load(str(path)), key)
        return dict(value) if key == "score" else [dataclasses.asdict(c) for c in value]
    except BadInput as exc:
        raise ReportError(f"--comparisons {path}: {exc}") from None


def planned_comparisons(path: Path | None, roots: list[Path]) -> tuple[tuple[str, str, str, float], ...]:
    """The comparisons of a sweep spec (YAML) or a study.json (see :func:`_planned`)."""
    raw = _planned(path, roots, "comparisons")
    try:
        return tuple((c["a"], c["b"], c.get("direction", "two-sided"), float(c.get("smallest_effect", 0.0)))
                     for c in raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"--comparisons {path}: each comparison needs a and b ({exc})") from None


def planned_checks(path: Path | None, roots: list[Path]) -> tuple[tuple, ...]:
    """The manipulation checks of the same file, as ``(arm, signal, agg, op, value, seeds, after)``."""
    from rlsuite.sweeps.spec import CHECK_KEYS, Check

    raw = _planned(path, roots, "checks")
    try:
        return tuple(dataclasses.astuple(Check(**{k: c[k] for k in c if k in CHECK_KEYS})) for c in raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"--comparisons {path}: each check needs arm and signal ({exc})") from None


def planned_score(path: Path | None, roots: list[Path]) -> dict:
    """The score settings fixed with the planned comparisons of the same file (a spec's ``score``, a
    study.json's ``report``): ``{}`` when it fixes none."""
    raw = _planned(path, roots, "score") or {}
    if not isinstance(raw, dict):
        raise ReportError(f"--comparisons {path}: its score settings are not a mapping ({raw!r})")
    return raw


def scored_settings(args: argparse.Namespace, fixed: dict) -> dict:
    """The ``SCORED`` fields of the report: the command line's where given, else ``fixed`` (the
    planned file's score), else ReportConfig's. A command-line value that contradicts ``fixed`` is
    refused: the planned comparisons are judged by the score they were fixed with
    (``--comparisons none`` drops them for an exploratory report)."""
    d, out = ReportConfig(), {}
    for name, flag in SCORED.items():
        given = getattr(args, name, UNSET)
        if given is UNSET:
            out[name] = fixed.get(name, getattr(d, name))
            continue
        if name in fixed and given != fixed[name]:
            where = getattr(args, "comparisons", None) or "the study.json beside the runs"
            raise ReportError(f"{flag} {given!r}: the planned comparisons ({where}) were fixed with {name} = "
                              f"{fixed[name]!r}, and are judged by that score; drop {flag}, or give --comparisons "
                              f"none for an exploratory report")
        out[name] = given
    return out


def config_from_args(args: argparse.Namespace) -> ReportConfig:
    """ReportConfig from parsed arguments (validation errors become ReportError)."""
    roots = [Path(r) for r in (args.root if isinstance(args.root, (list, tuple)) else [args.root])]
    planned = getattr(args, "comparisons", None)
    comparisons = planned_comparisons(planned, roots)
    return ReportConfig(
        comparisons=comparisons, checks=planned_checks(planned, roots),
        target=args.target, reps=args.reps, ci=args.ci,
        seed=args.seed, x=args.x, smooth=args.smooth, reference=args.reference,
        include_partial=args.include_partial, scaling_x=args.scaling_x, scaling_reps=args.scaling_reps,
        scaling_skip_frac=args.scaling_skip_frac, examples_per_algorithm=args.examples,
        figures=not args.no_figures, stability=parse_stability(args.stability),
        **scored_settings(args, planned_score(planned, roots) if comparisons else {}),
    )


def main(args: argparse.Namespace) -> int:
    """Run a report; print the path of report.html. Returns 0, or 2 on bad input or a missing
    report extra (one line naming the install command)."""
    try:
        from rlsuite.reports.build import build_report  # the figures need the report extra (seaborn, matplotlib)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in REPORT_EXTRA:
            raise
        print(f"rlsuite report: error: {exc.name} is not installed; install the report extra: "
              f'pip install -e ".[report]"', file=sys.stderr)
        return 2
    roots = [Path(r) for r in (args.root if isinstance(args.root, (list, tuple)) else [args.root])]
    try:
        if len(roots) > 1 and args.out is None:
            raise ReportError(f"--out is required with several roots (compare mode: {len(roots)} roots given); "
                              "e.g. --out compare_report")
        cfg = config_from_args(args)
        out = args.out if args.out is not None else roots[0] / "report"
        path = build_report(roots if len(roots) > 1 else roots[0], out, cfg)
    except ReportError as exc:
        print(f"rlsuite report: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(add_arguments(argparse.ArgumentParser(prog="rlsuite report")).parse_args()))
