"""Battery tasks as report tasks: one scored row per dataset of a multi-dataset run.

A battery (e.g. `reasoning_gym` with several `task.datasets`) trains one run on the mixture and
logs, beside the pooled metric `eval/<task>/<metric>`, one variant per dataset
`eval/<task>/<metric>_<label>` (reasoning_gym: `greedy_acc_<label>` / `sampled_acc_<label>`, label
= the dataset's name, `name_2` for its second entry; a single-dataset run logs none). A study so
pays one run per arm and seed for all the datasets, and reads them as separate tasks.

`expand` turns a run that logs at least two variants of the scored metric into one pseudo-run per
dataset (`ReportConfig.per_dataset`). Automatic (None, the default): only runs whose spec lists at
least two `task.datasets` (a mixture), since a variant is not always a dataset (`hops_toy` logs
`greedy_acc_h4` .. `greedy_acc_h8`, one per hop count of one task; those stay pooled unless
`--per-dataset`). True: every run that logs the variants. False: none.

* run id `<run_id>[<label>]`, task `<task>[<label>]`; algorithm, seed, state and config are the
  run's own, so seeds pair across arms as usual and every downstream table treats the datasets as
  tasks (the aggregates then run across them, normalised per dataset: `reports.normalise`);
* evals: the run's `<metric>_<label>` rows, as `<metric>` of task `<task>[<label>]`; its step-0
  row is the dataset's base; the pooled metric and the other metrics are left out;
* training metrics (one run, one set of signals) are copied to each pseudo-run; the run's samples
  go to its first dataset only (so examples are not repeated); its per-problem results are dropped
  (problems.jsonl does not say which dataset a problem came from, so no two-level interval).

Runs of the same task without variants (a single dataset) keep the pooled metric under `<task>`.
The pseudo-runs carry `source_run_id` (the run folder's id) and `dataset` (the label) in `runs`.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.load import RunSet

__all__ = ["dataset_labels", "expand", "is_mixture", "task_name"]

MIN_DATASETS = 2
"""A run is expanded when it logs variants for at least this many datasets (a mixture)."""


def task_name(task: str, label: str) -> str:
    """The report task of one dataset of a battery run: `<task>[<label>]`."""
    return f"{task}[{label}]"


def is_mixture(spec: dict) -> bool:
    """Whether a run's spec trains on a mixture: its `task.datasets` lists >= `MIN_DATASETS` entries."""
    task = spec.get("task")
    datasets = task.get("datasets") if isinstance(task, dict) else None
    return isinstance(datasets, (list, tuple)) and len(datasets) >= MIN_DATASETS


def dataset_labels(runset: RunSet, metric: str, *, mixtures_only: bool = False) -> dict[str, list[str]]:
    """run_id -> the dataset labels of the per-dataset variants `<metric>_<label>` it logs under its
    own task key (runs with fewer than `MIN_DATASETS` are left out; with `mixtures_only`, also runs
    whose spec is not a mixture: `is_mixture`), labels in first-logged order."""
    ev = runset.evals
    if ev.empty:
        return {}
    prefix = f"{metric}_"
    task_of = runset.runs.set_index("run_id")["task"]
    sel = ev[ev["metric"].astype(str).str.startswith(prefix)]
    sel = sel[sel["eval_task"].to_numpy() == sel["run_id"].map(task_of).to_numpy()]
    out: dict[str, list[str]] = {}
    for rid, g in sel.groupby("run_id", sort=False):
        labels = list(dict.fromkeys(m[len(prefix):] for m in g["metric"]))
        if len(labels) >= MIN_DATASETS and (not mixtures_only or is_mixture(runset.specs.get(rid, {}))):
            out[rid] = labels
    return out


def expand(runset: RunSet, cfg: ReportConfig) -> tuple[RunSet, tuple[str, ...]]:
    """The RunSet with each battery run replaced by its per-dataset pseudo-runs (module docstring),
    and the notes the report prints about it. Unchanged when `cfg.per_dataset` is False or no run
    logs variants of `cfg.metric` (then `per_dataset=True` is refused: ReportError); automatic
    (None) expands mixtures only (module docstring). Idempotent: a pseudo-run logs no variants."""
    if cfg.per_dataset is False:
        return runset, ()
    labels = dataset_labels(runset, cfg.metric, mixtures_only=cfg.per_dataset is None)
    if not labels:
        if cfg.per_dataset:
            raise ReportError(f"--per-dataset: no run logs per-dataset variants of eval metric {cfg.metric!r} "
                              f"(eval/<task>/{cfg.metric}_<label> for >= {MIN_DATASETS} datasets, as a "
                              "multi-dataset reasoning_gym run logs greedy_acc_<label>); drop --per-dataset")
        return runset, ()
    runs = runset.runs.assign(source_run_id=runset.runs["run_id"], dataset=None)
    keep = ~runs["run_id"].isin(list(labels))
    ids = list(labels)

    def split(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
        hit = frame["run_id"].isin(ids)
        return frame[~hit], dict(tuple(frame[hit].groupby("run_id", sort=False)))
    (ev0, ev_by), (m0, m_by), (s0, s_by) = split(runset.evals), split(runset.metrics), split(runset.samples)
    new_runs, new_evals, new_metrics, new_samples = [runs[keep]], [ev0], [m0], [s0]
    specs, envs = dict(runset.specs), dict(runset.envs)
    per_task: dict[str, set[str]] = {}
    for row in runs[~keep].to_dict("records"):
        rid, task = row["run_id"], row["task"]
        ev = ev_by[rid]
        for i, lab in enumerate(labels[rid]):
            pid, ptask = f"{rid}[{lab}]", task_name(task, lab)
            per_task.setdefault(task, set()).add(lab)
            new_runs.append(pd.DataFrame([{**row, "run_id": pid, "task": ptask, "dataset": lab}]))
            mine = ev[(ev["metric"] == f"{cfg.metric}_{lab}") & (ev["eval_task"] == task)]
            new_evals.append(mine.assign(run_id=pid, eval_task=ptask, metric=cfg.metric))
            if rid in m_by:
                new_metrics.append(m_by[rid].assign(run_id=pid))
            if i == 0 and rid in s_by:
                new_samples.append(s_by[rid].assign(run_id=pid))
            specs[pid], envs[pid] = runset.specs.get(rid, {}), runset.envs.get(rid, {})
        specs.pop(rid, None)
        envs.pop(rid, None)

    def cat(frames: list[pd.DataFrame], like: pd.DataFrame) -> pd.DataFrame:
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else like.iloc[:0]
    out_runs = cat(new_runs, runs)
    out_runs["seed"] = pd.Series([s for f in new_runs for s in f["seed"]], dtype=object)  # ints beside a None
    pp = runset.per_problem
    out = dataclasses.replace(
        runset, runs=out_runs, evals=cat(new_evals, runset.evals), metrics=cat(new_metrics, runset.metrics),
        samples=cat(new_samples, runset.samples), specs=specs, envs=envs,
        per_problem=pp[~pp["run_id"].isin(ids)].reset_index(drop=True))
    n_runs = runs[~keep].groupby("task").size()
    notes = tuple(
        f"{task}: battery runs scored per dataset ({n_runs[task]} run(s) -> tasks "
        + ", ".join(task_name(task, lab) for lab in sorted(labs))
        + f"), each from eval metric `{cfg.metric}_<label>` with its own step-0 base; --no-per-dataset scores "
        "the pooled metric instead. Their per-problem results are not used (problems.jsonl does not name the "
        "dataset)."
        for task, labs in sorted(per_task.items()))
    return out, notes
