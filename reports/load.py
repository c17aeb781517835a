"""Run folders -> tidy pandas frames (read-only; tolerant of partial and corrupt runs).

A run folder is any directory at depth <= `max_depth` below the root that holds a
`spec.json` (the root itself counts, for a single run); its `checkpoint/` and `final/`
are never entered. Every file is opened read-only. Whatever cannot be read is skipped
with a message in `RunSet.problems` (also emitted as a `UserWarning`):

- an unreadable or invalid `spec.json` skips the whole folder (it cannot be identified);
- a missing `status.json` gives state `unknown`; a missing `env.json` empty provenance;
- a bad JSONL line is skipped (a truncated last line is reported as "still being written?").
- `metrics.jsonl` rows repeating a step (two writers in one folder, e.g. two copies of a run
  started at once before run folders were locked) are kept but reported.

A cell (one task x algorithm label, the seeds a leaderboard row pools) whose runs recorded
different CPU models (`env.json` `cpu_model`) or torch versions (`packages.torch`) gets a
message in `RunSet.env_warnings`, also emitted as a `UserWarning` (runs that did not record
the field are left out of the comparison).

Frames (one row per ...):
- `runs`: run folder. Columns `run_id, path, task, algo, variant, algorithm, sweep, seed,
  state, reason, status_step, model, budget_unit, budget, prompts_per_step, group_size,
  max_new_tokens, factors, git_commit, git_dirty, device, precision, num_threads, host,
  cpu_model, torch`.
  `algorithm` is the display label `algo.name` or `algo.name:variant`.
- `metrics`: training step (wide): `run_id, step, <metric keys...>, _nonfinite`.
- `evals`: (eval row x eval metric), tidy: `run_id, step, split, final, budget/*,
  eval_task, metric, value` (`eval/<eval_task>/<metric>` keys; NaN values dropped).
- `samples`: sample, the last `samples_per_run` of each run: `run_id, step, split, prompt,
  completion, reward, parsed, gold`.

Compare mode (`load_roots` with several roots, e.g. two code versions or two machines): each
root is loaded as above and labelled by its folder name (parent folders are added until the
labels differ); its runs' `algorithm` and `algo` become `grpo [LABEL]`, their run ids
`LABEL/<run_id>` (two machines running one sweep write the same run ids), and `runs.root`
holds the label. Everything downstream (cells, pairing by seed, ablation groups) then treats
the roots' runs as different algorithms.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rlsuite.suite.errors import BadInput
from rlsuite.suite.migrate import migrate, schema_of
from rlsuite.reports.config import BUDGET_KEYS
from rlsuite.reports.errors import ReportError
from rlsuite.reports.stability import NONFINITE_COL
from rlsuite.suite.runfolder import read_jsonl  # stdlib only: the reports still need nothing from the trainer

RUN_COLUMNS = (
    "run_id", "path", "task", "algo", "variant", "algorithm", "sweep", "seed", "state",
    "reason", "status_step", "model", "budget_unit", "budget", "prompts_per_step",
    "group_size", "max_new_tokens", "factors", "git_commit", "git_dirty", "device",
    "precision", "num_threads", "host", "cpu_model", "torch",
)
MIXED_ENV_FIELDS = (("cpu_model", "CPU models"), ("torch", "torch versions"))
"""Run columns (from env.json) that must agree within a cell, with their names in warnings."""
EVAL_ID_COLUMNS = ("run_id", "step", "split", "final") + tuple(f"budget/{k}" for k in BUDGET_KEYS)
SAMPLE_COLUMNS = ("run_id", "step", "split", "prompt", "completion", "reward", "parsed", "gold")
SKIP_DIRS = frozenset({"checkpoint", "final", "__pycache__"})


PROBLEM_COLUMNS = ("run_id", "split", "problem", "greedy", "correct", "n")


@dataclass(frozen=True)
class RunSet:
    """Everything loaded from one report root (frames described in the module docstring)."""

    root: Path
    runs: pd.DataFrame
    metrics: pd.DataFrame
    evals: pd.DataFrame
    samples: pd.DataFrame
    specs: dict[str, dict] = field(default_factory=dict)
    """run_id -> the parsed spec.json (for dotted-field look-ups)."""
    envs: dict[str, dict] = field(default_factory=dict)
    """run_id -> the parsed env.json ({} when missing)."""
    problems: tuple[str, ...] = ()
    """What was skipped or could not be read, one message each."""
    env_warnings: tuple[str, ...] = ()
    """Cells that pool runs from different CPU models or torch versions, one message each."""
    roots: tuple[tuple[str, str], ...] = ()
    """Compare mode: (label, path) of each root, in the order given; () for a single root."""
    per_problem: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(PROBLEM_COLUMNS)))
    """The final evals' per-problem results (``problems.jsonl``): ``PROBLEM_COLUMNS``, one row per
    run × split × problem (empty for runs written before the file existed)."""


def find_run_dirs(root: Path, max_depth: int = 3) -> list[Path]:
    """Directories holding `spec.json` at depth <= max_depth below root (root = depth 0)."""
    found, stack = [], [(Path(root), 0)]
    while stack:
        folder, depth = stack.pop()
        if (folder / "spec.json").is_file():
            found.append(folder)
            continue
        if depth >= max_depth:
            continue
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name not in SKIP_DIRS \
                    and not entry.name.startswith("."):
                stack.append((Path(entry.path), depth + 1))
    return sorted(found)


def read_json(path: Path, problems: list[str], *, required: bool = False) -> dict | None:
    """Parse a JSON object file; None (and a problem message) if missing or invalid."""
    try:
        with open(path, "rb") as fh:
            obj = json.loads(fh.read().decode("utf-8", errors="replace"))
    except FileNotFoundError:
        if required:
            problems.append(f"{path}: missing")
        return None
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: unreadable ({type(exc).__name__}: {str(exc)[:80]}); skipped")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{path}: not a JSON object; skipped")
        return None
    return obj


def _dig(obj: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def _budget(spec: dict) -> tuple[str, float | None]:
    budget = spec.get("budget") if isinstance(spec.get("budget"), dict) else {}
    set_ = [(k, v) for k, v in budget.items() if v is not None and k in BUDGET_KEYS]
    if not set_:
        return "", None
    if len(set_) == 1:
        return set_[0][0], float(set_[0][1])
    return ";".join(k for k, _ in set_), float("nan")


def _run_row(folder: Path, spec: dict, env: dict, status: dict | None) -> dict:
    algo = _dig(spec, "algo", "name", default="unknown")
    variant = spec.get("variant")
    unit, value = _budget(spec)
    status = status or {}
    return {
        "run_id": str(spec.get("run_id") or folder.name), "path": str(folder),
        "task": str(_dig(spec, "task", "name", default="unknown")), "algo": str(algo),
        "variant": variant, "algorithm": f"{algo}:{variant}" if variant else str(algo),
        "sweep": spec.get("sweep"), "seed": spec.get("seed"),
        "state": str(status.get("state") or "unknown"), "reason": status.get("reason"),
        "status_step": status.get("step"), "model": _dig(spec, "model", "name"),
        "budget_unit": unit, "budget": value,
        "prompts_per_step": _dig(spec, "rollout", "prompts_per_step"),
        "group_size": _dig(spec, "rollout", "group_size"),
        "max_new_tokens": _dig(spec, "rollout", "max_new_tokens"),
        "factors": json.dumps(spec.get("factors") or {}, sort_keys=True, default=str),
        "git_commit": env.get("git_commit"), "git_dirty": env.get("git_dirty"),
        "device": env.get("device"), "precision": env.get("precision"),
        "num_threads": env.get("num_threads"), "host": env.get("host"),
        "cpu_model": env.get("cpu_model"), "torch": _dig(env, "packages", "torch"),
    }


def _check_duplicate_steps(path: Path, rows: list[dict], problems: list[str]) -> None:
    """Report steps with more than one row (the run folder had two writers)."""
    seen: dict[Any, int] = {}
    for row in rows:
        step = row.get("step")
        if step is not None:
            seen[step] = seen.get(step, 0) + 1
    dup = sorted((s for s, n in seen.items() if n > 1), key=str)
    if dup:
        extra = sum(seen[s] - 1 for s in dup)
        shown = ", ".join(str(s) for s in dup[:5]) + (", ..." if len(dup) > 5 else "")
        problems.append(f"{path}: {len(dup)} step(s) have more than one row ({extra} extra rows; steps {shown}): "
                        "two writers trained into this folder? its curves and scores are unreliable; re-run it")


def _is_bad(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


PROVENANCE_KEYS = ("cpu_model",)
"""Per-row provenance strings, not metrics: compact run copies (``benchmarks/effects/effects.py export``)
name the CPU a row was measured on in every row; the run's env.json holds the same, so they are
dropped from the metric rows instead of being read as non-numeric metrics."""


def _metric_rows(rows: list[dict], run_id: str) -> list[dict]:
    out = []
    for i, row in enumerate(rows):
        row = {k: v for k, v in row.items() if k not in PROVENANCE_KEYS}
        row["run_id"] = run_id
        row.setdefault("step", i + 1)
        flag = row.get("stability/nonfinite")
        row[NONFINITE_COL] = bool(flag) and not _is_bad(flag) or any(
            _is_bad(v) for k, v in row.items() if k.startswith("loss/"))
        out.append(row)
    return out


def _eval_rows(rows: list[dict], run_id: str) -> list[dict]:
    out = []
    for row in rows:
        base = {k: row.get(k) for k in EVAL_ID_COLUMNS[1:]}
        base["run_id"], base["final"] = run_id, bool(row.get("final", False))
        base["split"] = str(row.get("split") or "val")
        for key, value in row.items():
            parts = key.split("/", 2)
            if len(parts) == 3 and parts[0] == "eval" and isinstance(value, (int, float)):
                out.append({**base, "eval_task": parts[1], "metric": parts[2], "value": float(value)})
    return out


def _frame(records: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=list(columns))
    for col in columns:
        if col not in frame:
            frame[col] = pd.NA
    return frame


def _numeric(frame: pd.DataFrame, keep: tuple[str, ...], problems: list[str], what: str) -> pd.DataFrame:
    """Coerce every column but `keep` to numbers; non-numeric values become NaN (reported)."""
    for col in frame.columns:
        if col in keep or pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col]):
            continue
        num = pd.to_numeric(frame[col], errors="coerce")
        bad = int((num.isna() & frame[col].notna()).sum())
        if bad:
            problems.append(f"{what}: {bad} non-numeric value(s) of {col!r} treated as missing")
        frame[col] = num.astype(float)
    return frame


def mixed_env_warnings(runs: pd.DataFrame) -> list[str]:
    """One message per (cell, field) where a (task, algorithm) cell's runs disagree on a
    `MIXED_ENV_FIELDS` column, naming the cell and each distinct value with its run count."""
    out = []
    for (task, alg), g in runs.groupby(["task", "algorithm"], sort=True):
        for col, what in MIXED_ENV_FIELDS:
            vals = g[col].dropna().astype(str)
            vals = vals[vals != ""].value_counts()
            if len(vals) > 1:
                listed = ", ".join(f"{v!r} ({n} run{'s' if n > 1 else ''})" for v, n in sorted(vals.items()))
                out.append(f"cell {task}/{alg} pools runs from different {what}: {listed} (its seeds differ "
                           "in more than the seed: numerics and timings may differ)")
    return out


def load_runs(root: Path, *, max_depth: int = 3, samples_per_run: int = 20) -> RunSet:
    """Load every run folder under `root` into a `RunSet` (see the module docstring).

    Raises:
        ReportError: root is missing, or holds no readable run folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"report root {root} is not a directory")
    folders = find_run_dirs(root, max_depth)
    if not folders:
        raise ReportError(f"no run folders (directories with spec.json, depth <= {max_depth}) "
                          f"under {root}")
    problems: list[str] = []
    runs, metrics, evals, samples, specs, envs, per_problem = [], [], [], [], {}, {}, []
    for folder in folders:
        spec = read_json(folder / "spec.json", problems, required=True)
        if spec is None:
            problems.append(f"{folder}: run skipped (no readable spec.json)")
            continue
        try:
            spec = migrate(spec) | {"schema_read": schema_of(spec)}  # older folders: one migration
        except BadInput as e:
            problems.append(f"{folder}: run skipped ({e})")
            continue
        env = read_json(folder / "env.json", problems) or {}
        row = _run_row(folder, spec, env, read_json(folder / "status.json", problems))
        if row["run_id"] in specs:
            problems.append(f"{folder}: duplicate run_id {row['run_id']}; keyed by path instead")
            row["run_id"] = str(folder.relative_to(root))
        run_id = row["run_id"]
        specs[run_id], envs[run_id] = spec, env
        runs.append(row)
        metric_rows = read_jsonl(folder / "metrics.jsonl", problems)
        _check_duplicate_steps(folder / "metrics.jsonl", metric_rows, problems)
        metrics += _metric_rows(metric_rows, run_id)
        evals += _eval_rows(read_jsonl(folder / "evals.jsonl", problems), run_id)
        for s in read_jsonl(folder / "samples.jsonl", problems, keep_last=samples_per_run):
            samples.append({"run_id": run_id, **{k: s.get(k) for k in SAMPLE_COLUMNS[1:]}})
        per_problem += [{"run_id": run_id, **{k: r.get(k) for k in PROBLEM_COLUMNS[1:]}}
                        for r in read_jsonl(folder / "problems.jsonl", problems) if r.get("final")]
    if not runs:
        raise ReportError(f"no readable run folders under {root} ({len(folders)} found, all "
                          f"without a readable spec.json): " + "; ".join(problems[:5]))
    metrics_f = _numeric(_frame(metrics, ("run_id", "step", NONFINITE_COL)), ("run_id", NONFINITE_COL),
                         problems, "metrics.jsonl")
    evals_f = _numeric(_frame(evals, EVAL_ID_COLUMNS + ("eval_task", "metric", "value")),
                       ("run_id", "split", "final", "eval_task", "metric"), problems, "evals.jsonl")
    for msg in problems:
        warnings.warn(msg, stacklevel=2)
    runs_f = _frame(runs, RUN_COLUMNS)
    runs_f["seed"] = pd.Series([r["seed"] for r in runs], dtype=object)  # keep ints even beside a None
    mixed = mixed_env_warnings(runs_f)
    for msg in mixed:
        warnings.warn(msg, stacklevel=2)
    return RunSet(
        root=root, runs=runs_f, metrics=metrics_f, evals=evals_f,
        samples=_frame(samples, SAMPLE_COLUMNS), specs=specs, envs=envs,
        problems=tuple(problems), env_warnings=tuple(mixed), per_problem=_frame(per_problem, PROBLEM_COLUMNS),
    )


def spec_value(spec: dict, dotted: str) -> Any:
    """Value of a dotted field (`rollout.prompts_per_step`) in a spec dict, else None."""
    return _dig(spec, *dotted.split("."))


def root_labels(roots: list[Path]) -> list[str]:
    """Labels of several roots: each folder's name, with parent folders prepended (`a/sweep`,
    `b/sweep`) until no two are equal. Raises ReportError when one root is given twice."""
    resolved = [Path(r).resolve() for r in roots]
    seen: dict[Path, Path] = {}
    for given, res in zip(roots, resolved, strict=True):
        if res in seen:
            raise ReportError(f"report root {given} is given twice (as {seen[res]} too); pass each root once")
        seen[res] = Path(given)
    parts = [res.parts[1:] or (str(res),) for res in resolved]
    depth = [1] * len(roots)
    while True:
        labels = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        clash = {lab for lab in labels if labels.count(lab) > 1}
        if not clash:
            return labels
        for i, lab in enumerate(labels):
            if lab in clash and depth[i] < len(parts[i]):
                depth[i] += 1


def load_roots(roots: list[Path], *, max_depth: int = 3, samples_per_run: int = 20) -> RunSet:
    """One root: `load_runs`. Several: each loaded and labelled (compare mode, module docstring).

    Raises:
        ReportError: no root, a root given twice, or any root missing or without readable run
            folders (the message names that root).
    """
    roots = [Path(r) for r in roots]
    if not roots:
        raise ReportError("no report root given")
    if len(roots) == 1:
        return load_runs(roots[0], max_depth=max_depth, samples_per_run=samples_per_run)
    labels = root_labels(roots)
    sets = []
    for root, label in zip(roots, labels, strict=True):
        try:
            sets.append(load_runs(root, max_depth=max_depth, samples_per_run=samples_per_run))
        except ReportError as exc:
            raise ReportError(f"compare mode, root [{label}]: {exc}") from None
    runs, metrics, evals, samples, specs, envs, problems, per_problem = [], [], [], [], {}, {}, [], []
    for rs, label in zip(sets, labels, strict=True):
        rid = {r: f"{label}/{r}" for r in rs.runs["run_id"]}
        r = rs.runs.assign(run_id=rs.runs["run_id"].map(rid), algorithm=rs.runs["algorithm"] + f" [{label}]",
                           algo=rs.runs["algo"] + f" [{label}]", root=label)
        runs.append(r)
        for frame, acc in ((rs.metrics, metrics), (rs.evals, evals), (rs.samples, samples),
                           (rs.per_problem, per_problem)):
            acc.append(frame.assign(run_id=frame["run_id"].map(rid)))
        specs.update({rid[k]: v for k, v in rs.specs.items()})
        envs.update({rid[k]: v for k, v in rs.envs.items()})
        problems += [f"[{label}] {m}" for m in rs.problems]

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [f for f in frames if len(f)] or frames[:1]
        return pd.concat(frames, ignore_index=True)
    runs_f = cat(runs)
    runs_f["seed"] = pd.Series([s for r in runs for s in r["seed"]], dtype=object)
    mixed = mixed_env_warnings(runs_f)
    return RunSet(
        root=roots[0], runs=runs_f, metrics=cat(metrics), evals=cat(evals), samples=cat(samples),
        specs=specs, envs=envs, problems=tuple(problems), env_warnings=tuple(mixed), per_problem=cat(per_problem),
        roots=tuple((label, str(root)) for label, root in zip(labels, roots, strict=True)),
    )
