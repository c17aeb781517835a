"""Per-task score normalisation for the aggregates across tasks (reports/METRICS.md §4.2).

An IQM (or mean) of raw accuracies over tasks of different difficulty is about the easy tasks:
their scores fill the middle of the pooled distribution whatever the hard ones do. Before the
aggregates (mean, IQM, median, optimality gap, and the "all tasks" rows of the paired
differences) each score s of task t is mapped onto one scale (`ReportConfig.normalise`):

* ``raw``: s, unchanged;
* ``gain``: s − b_t, the gain over the base model;
* ``headroom``: (s − b_t) / (1 − b_t), the share of the task's headroom above its base that the
  run closes (1 = a perfect score, 0 = no gain, < 0 = below the base);
* ``auto`` (default): ``headroom`` when the aggregates span more than one task and every score and
  base lies in [0, 1]; ``gain`` when they span several tasks but some score does not (a ceiling
  of 1 means nothing there); ``raw`` for a single task (nothing to put on one scale).

b_t is the task's base score: the mean of its leaderboard `base (step 0)` row, i.e. the step-0
evals of the task's runs on the split the runs are scored on (`scores.score_runs`), averaged
within each seed and then over seeds (the mean over the task's runs whenever every seed has as
many runs). ``gain`` and ``headroom`` refuse a task without a base, ``headroom`` one whose base is
≥ 1 (ReportError naming the task). The per-task tables (leaderboard, verdicts, P(improvement),
per-task paired differences) stay raw; P(improvement) compares runs within a task, which no
per-task increasing map changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from rlsuite.reports.errors import ReportError

__all__ = ["MODES", "Normalised", "normalise", "task_bases", "resolve_mode"]

NormaliseMode = Literal["auto", "raw", "gain", "headroom"]
MODES = ("auto", "raw", "gain", "headroom")

FORMULA = {"raw": "s", "gain": "s − b", "headroom": "(s − b) / (1 − b)"}
"""Each mode's map of a score s of a task with base score b."""
MEANING = {"raw": "raw scores, not normalised per task",
           "gain": "the gain over the task's base",
           "headroom": "the share of the task's headroom above its base that a run closes (1: a perfect score, "
                       "0: no gain, < 0: below the base)"}


def task_bases(base: pd.DataFrame) -> dict[str, float]:
    """b_t per task of a `Scored.base` frame: step-0 scores averaged within each seed, then over
    seeds (the leaderboard's base row). Tasks without a finite step-0 score are left out."""
    out: dict[str, float] = {}
    if base is None or base.empty:
        return out
    for task, g in base.groupby("task", sort=True):
        key = g["seed"].map(str) if "seed" in g else g["run_id"]
        per_seed = g.groupby(key, dropna=False)["score"].mean().to_numpy(dtype=float)
        per_seed = per_seed[np.isfinite(per_seed)]
        if per_seed.size:
            out[str(task)] = float(per_seed.mean())
    return out


def _in_unit(values) -> bool:
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    return bool(np.all((v >= 0) & (v <= 1)))


def resolve_mode(requested: str, scores: pd.DataFrame, bases: dict[str, float]) -> tuple[str, str]:
    """The mode applied (`raw`, `gain` or `headroom`) and why, in words, for `requested`."""
    if requested not in MODES:
        raise ReportError(f"unknown normalisation {requested!r}; valid: {', '.join(MODES)}")
    if requested != "auto":
        return requested, f"--normalise {requested}"
    n = scores["task"].nunique()
    if n <= 1:
        return "raw", "default for a single task: nothing to put on one scale"
    if _in_unit(scores["score"]) and _in_unit(bases.values()):
        return "headroom", f"default: the aggregates span {n} tasks"
    return "gain", f"default: the aggregates span {n} tasks, but not every score lies in [0, 1]"


@dataclass(frozen=True)
class Normalised:
    """Scores on the aggregates' scale. `scores` / `base`: copies of `Scored.scores` / `Scored.base`
    with `score` mapped (raw: unchanged); `bases`: b_t of every task of `scores`."""

    requested: str
    mode: str
    why: str
    bases: dict[str, float]
    scores: pd.DataFrame
    base: pd.DataFrame

    def caption(self, percent: bool) -> str:
        """The aggregate table's sentence on the scale: the mode, why, the formula and each b_t."""
        if self.mode == "raw":
            return f"Scores: {MEANING['raw']} ({self.why}; --normalise gain|headroom puts tasks on one scale)."
        shown = ", ".join(f"{t} {100 * b:.1f}%" if percent else f"{t} {b:.4g}" for t, b in self.bases.items())
        unit = (" (in percent" + (" of the headroom)" if self.mode == "headroom" else " points)")) if percent else ""
        return (f"Scores normalised per task before aggregating, {self.mode} = {FORMULA[self.mode]}{unit}: "
                f"{MEANING[self.mode]} ({self.why}; --normalise raw|gain|headroom). b = the task's base (step 0) "
                f"score, the mean of its leaderboard base row: {shown}. The leaderboard's cells stay raw; the base "
                "row here is the base model's own normalised score (0 on average); the optimality gap is the mean "
                "of max(1 − x, 0) of the normalised scores.")


def _mapped(frame: pd.DataFrame, mode: str, bases: dict[str, float]) -> pd.DataFrame:
    if mode == "raw" or frame is None or frame.empty:
        return frame.copy() if frame is not None else frame
    b = frame["task"].map(bases).to_numpy(dtype=float)
    s = frame["score"].to_numpy(dtype=float)
    return frame.assign(score=(s - b) if mode == "gain" else (s - b) / (1 - b))


def normalise(scores: pd.DataFrame, base: pd.DataFrame, requested: str = "auto") -> Normalised:
    """Map per-run scores (and the step-0 rows) of every task onto the aggregates' scale.

    Raises ReportError, naming the tasks, when `gain` or `headroom` meets a task without a base or
    `headroom` one whose base is ≥ 1 (also under `auto`: pass `raw` or `gain` explicitly)."""
    bases_all = task_bases(base)
    mode, why = resolve_mode(requested, scores, bases_all)
    tasks = sorted(scores["task"].unique(), key=str)
    bases = {str(t): bases_all[str(t)] for t in tasks if str(t) in bases_all}
    if mode != "raw":
        missing = [t for t in tasks if str(t) not in bases]
        full = [t for t in tasks if str(t) in bases and mode == "headroom" and bases[str(t)] >= 1]
        if missing or full:
            what = [f"task {t!r}: no base (step 0) score (no step-0 eval of the scored split)" for t in missing]
            what += [f"task {t!r}: base (step 0) score {bases[str(t)]:.4g} ≥ 1, so 1 − b leaves no headroom"
                     for t in full]
            fix = "--normalise gain or raw" if not missing else "--normalise raw"
            raise ReportError(f"cannot normalise the aggregates across tasks by {mode} = {FORMULA[mode]} ({why}): "
                              + "; ".join(what) + f". Use {fix}.")
    return Normalised(requested=requested, mode=mode, why=why, bases=bases,
                      scores=_mapped(scores, mode, bases), base=_mapped(base, mode, bases))
