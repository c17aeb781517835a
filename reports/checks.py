"""Manipulation checks: does the mechanism an effect is about engage in these runs?

A study declares its checks before the confirmatory runs (a sweep spec's ``checks:``,
:class:`rlsuite.sweeps.spec.Check`): per arm a training signal (a ``metrics.jsonl`` key), its
aggregation over the steps after a warm-up share, a threshold and the share of runs that must pass.
:func:`evaluate` computes each check on a :class:`rlsuite.reports.load.RunSet`; the pilot gates on
it (``rlsuite sweep plan``: a comparison whose arm fails a check is "not testable at this preset"),
and a check that fails in the confirmatory runs is reported beside the verdict, never in its place.

Aggregations (per run, over the steps after the first ``after`` share of the run's steps, NaN
steps left out): ``mean``; ``final`` (the last value); ``change`` (last − first); ``rel_change``
((last − first) / |first|).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

PASS, FAIL, NO_DATA = "pass", "fail", "no data"



def run_value(metrics: pd.DataFrame, signal: str, agg: str, after: float) -> float:
    """One run's aggregated ``signal`` (its rows of the wide metrics frame, any order); NaN when the
    run never logged it."""
    if signal not in metrics.columns:
        return float("nan")
    m = metrics.sort_values("step")
    m = m.iloc[int(math.floor(after * len(m))):]
    v = pd.to_numeric(m[signal], errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan")
    if agg == "mean":
        return float(v.mean())
    if agg == "final":
        return float(v[-1])
    if agg == "change":
        return float(v[-1] - v[0])
    if agg == "rel_change":
        return float((v[-1] - v[0]) / abs(v[0])) if v[0] != 0 else float("nan")
    raise ValueError(f"unknown aggregation {agg!r}; valid: mean, final, change, rel_change")


def arm_mean(runs: pd.DataFrame, metrics: pd.DataFrame, arm: str, signal: str, after: float = 0.2) -> float:
    """The mean over the runs of ``arm`` (exactly that algorithm label) of each run's mean ``signal``
    after the first ``after`` share of its steps (:func:`run_value`); runs that never logged it are
    left out; NaN when none did. What a study's "how much each mechanism acts" table prints."""
    ids = runs.loc[runs["algorithm"] == arm, "run_id"]
    vals = [run_value(metrics[metrics["run_id"] == r], signal, "mean", after) for r in ids]
    vals = [v for v in vals if np.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def evaluate(checks: Iterable[Any], runs: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Every check on every task and arm it covers. ``checks``: objects with the fields of
    :class:`rlsuite.sweeps.spec.Check` (``arm``, ``signal``, ``agg``, ``op``, ``value``, ``seeds``,
    ``after``); ``runs`` / ``metrics``: a RunSet's frames. Columns: ``task, arm, check, n_runs,
    n_pass, share_needed, values, result`` (``pass`` / ``fail`` / ``no data``: no run logged it)."""
    rows = []
    for c in checks:
        arms = sorted(runs["algorithm"].unique()) if c.arm == "all" else [c.arm]
        for task in sorted(runs["task"].unique()):
            for arm in arms:
                # exactly that arm label: a variant (`x:v`) is an arm of its own, never pooled into `x`
                mine = runs[(runs["task"] == task) & (runs["algorithm"] == arm)]
                if mine.empty:
                    continue
                vals = [run_value(metrics[metrics["run_id"] == r], c.signal, c.agg, c.after) for r in mine["run_id"]]
                seen = [v for v in vals if np.isfinite(v)]
                ok = [v >= c.value if c.op == ">=" else v <= c.value for v in seen]
                result = NO_DATA if not seen else PASS if sum(ok) >= c.seeds * len(vals) - 1e-9 else FAIL
                rows.append({"task": task, "arm": arm, "check": c.label, "n_runs": len(vals), "n_pass": int(sum(ok)),
                             "share_needed": c.seeds, "values": ", ".join(f"{v:.3g}" for v in vals), "result": result})
    return pd.DataFrame(rows, columns=["task", "arm", "check", "n_runs", "n_pass", "share_needed", "values", "result"])


def failed_for(table: pd.DataFrame, task: str, arms: Iterable[str]) -> list[str]:
    """The checks of ``arms`` on ``task`` that did not pass (failed or without data), as text."""
    if table.empty:
        return []
    sel = table[(table["task"] == task) & table["arm"].isin(list(arms)) & (table["result"] != PASS)]
    return [f"{r.check} ({r.result}: {r.n_pass}/{r.n_runs})" for r in sel.itertuples()]
