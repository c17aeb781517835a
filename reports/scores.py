"""Per-run scores and stability verdicts (reports/METRICS.md §4.1, §4.5).

Scoring rules, per run (one run = one training seed, the unit of replication):
  1. `final` mode: the final test eval (`split == "test"`, `final: true`) at the matched
     budget; a completed run without one falls back to its last finite val eval (labelled).
  2. `last-k` mode: the mean of the last k finite val evals.
  3. A `diverged` run scores its last finite eval and counts as unstable.
  4. `failed` runs are excluded (listed with their reason); `running`, `preempted` and
     `cancelled` runs are excluded unless `include_partial` (they have not reached the
     matched budget). A run without status.json is scored only if it has a final test eval.
  5. Duplicate (task, algorithm, seed) cells from different configurations (e.g. a tuning
     sweep) are told apart by a config fingerprint appended to the label.
The step-0 eval of each run (the base model) gives the "base (step 0)" rows, on the split the
runs are scored on (test in `final` mode, val in `last-k` mode).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.load import RunSet
from rlsuite.reports.stability import classify_run
from rlsuite.suite.config import identity_hash  # stdlib + yaml only: no trainer import

BASE_LABEL = "base (step 0)"
PARTIAL_STATES = ("running", "preempted", "cancelled")
SCORE_COLUMNS = ("run_id", "task", "algorithm", "algo", "variant", "sweep", "seed", "state",
                 "score", "score_source", "score_step", "budget_unit", "budget", "stable", "reasons")


@dataclass(frozen=True)
class Scored:
    """Per-run scores plus what was left out.

    scores: one row per scored run (`SCORE_COLUMNS`); `reasons` is "; "-joined.
    excluded: `run_id, task, algorithm, seed, state, why` for runs not scored.
    base: `run_id, task, seed, model, score` step-0 scores (one per run that has one).
    metric_evals: the chosen metric's evals, tidy (`run_id, step, split, final, value, budget/*`).
    notes: scoring decisions worth a line in the report.
    """

    scores: pd.DataFrame
    excluded: pd.DataFrame
    base: pd.DataFrame
    metric_evals: pd.DataFrame
    notes: tuple[str, ...]


def available_metrics(evals: pd.DataFrame) -> list[str]:
    """Eval metric names present anywhere (the part after `eval/<task>/`)."""
    return sorted(evals["metric"].dropna().unique().tolist())


def select_metric(runset: RunSet, metric: str) -> pd.DataFrame:
    """Evals of one metric, using each run's own task key when present, one row per
    (run, step, split, final) with eval seeds averaged.

    Raises ReportError listing the valid metrics when `metric` appears nowhere.
    """
    ev = runset.evals
    sel = ev[ev["metric"] == metric]
    if sel.empty:
        valid = ", ".join(available_metrics(ev)) or "(no eval rows at all)"
        raise ReportError(f"unknown eval metric {metric!r}; valid: {valid}")
    task_of = runset.runs.set_index("run_id")["task"]
    own = sel["eval_task"].to_numpy() == sel["run_id"].map(task_of).to_numpy()
    have_own = set(sel.loc[own, "run_id"])
    other = sel[~own & ~sel["run_id"].isin(have_own)]
    first_task = other.groupby("run_id")["eval_task"].transform("min")
    chosen = pd.concat([sel[own], other[other["eval_task"] == first_task]])
    # several rows at one (step, split) are eval seeds of one eval: average them within the run
    # first (reports/METRICS.md §2), so the training seed stays the unit of replication
    keys = ["run_id", "step", "split", "final"]
    rest = {c: (c, "first") for c in chosen.columns if c not in keys and c != "value"}
    chosen = chosen.groupby(keys, as_index=False, sort=False, dropna=False).agg(value=("value", "mean"), **rest)
    return chosen.sort_values(["run_id", "step", "split"], kind="stable").reset_index(drop=True)


def _last_finite(ev: pd.DataFrame) -> pd.Series | None:
    fin = ev[np.isfinite(ev["value"].to_numpy(dtype=float))]
    if fin.empty:
        return None
    top = fin[fin["step"] == fin["step"].max()]
    test = top[top["split"] == "test"]
    return (test if len(test) else top).iloc[-1]


def score_run(ev: pd.DataFrame, state: str, cfg: ReportConfig) -> tuple[float, str, float] | str:
    """Score one run from its metric evals (sorted by step).

    Returns (score, source, step) or, when the run is not scored, the reason as a string.
    """
    if state == "failed":
        return "failed"
    partial = state in PARTIAL_STATES or state == "unknown"
    final = ev[(ev["split"] == "test") & ev["final"].astype(bool)]
    if state == "unknown" and len(final):
        partial = False
    if partial and not cfg.include_partial:
        return f"{state}: not at the matched budget (use include_partial to score it)"
    if state == "diverged":
        row = _last_finite(ev)
        return "no finite eval" if row is None else (float(row["value"]), "last finite eval (diverged)",
                                                    float(row["step"]))
    if cfg.score == "last-k":
        val = ev[(ev["split"] == "val") & (ev["step"] > 0) & np.isfinite(ev["value"].to_numpy(dtype=float))]
        if val.empty:
            return "no finite val eval after step 0"
        last = val.tail(cfg.k)
        return float(last["value"].mean()), f"mean of last {len(last)} val evals", float(last["step"].max())
    if len(final) and np.isfinite(final["value"].iloc[-1]):
        return float(final["value"].iloc[-1]), "final test eval", float(final["step"].iloc[-1])
    row = _last_finite(ev[ev["step"] > 0])
    if row is None:
        return "no finite eval after step 0"
    return float(row["value"]), f"last finite {row['split']} eval (no final test eval)", float(row["step"])


def config_fingerprint(spec: dict) -> str:
    """The run id's config hash without the run seed (runs of one configuration share it):
    :func:`rlsuite.suite.config.identity_hash` of the (migrated) spec document, the one rule of
    identity (stdlib only, no trainer import)."""
    return identity_hash(spec, seed=False)


def _disambiguate(runs: pd.DataFrame, runset: RunSet) -> tuple[pd.DataFrame, list[str]]:
    """Append `#<config>` to labels of (task, algorithm) cells holding several configs."""
    runs = runs.copy()
    runs["config"] = [config_fingerprint(runset.specs[r]) for r in runs["run_id"]]
    n_cfg = runs.groupby(["task", "algorithm"])["config"].transform("nunique")
    dup = runs.duplicated(["task", "algorithm", "seed"], keep=False) & (n_cfg > 1)
    cells = runs.loc[dup, ["task", "algorithm"]].drop_duplicates()
    notes = [f"{t}/{a}: several configurations share this label; rows split by config hash"
             for t, a in cells.itertuples(index=False)]
    mask = runs.set_index(["task", "algorithm"]).index.isin(cells.set_index(["task", "algorithm"]).index)
    runs.loc[mask, "algorithm"] = runs.loc[mask, "algorithm"] + "#" + runs.loc[mask, "config"]
    return runs, notes


def _text(value) -> str:
    return value if isinstance(value, str) and value else "no reason given"


def _stability(runset: RunSet, run: pd.Series, ev: pd.DataFrame, metrics_by_run, cfg: ReportConfig):
    metrics = metrics_by_run.get(run["run_id"])
    if metrics is None:
        metrics = pd.DataFrame({"step": []})
    val = ev[ev["split"] == "val"]
    mnt = run["max_new_tokens"]
    mnt = float(mnt) if isinstance(mnt, (int, float)) and not pd.isna(mnt) else None
    return classify_run(metrics, val["step"].to_numpy(), val["value"].to_numpy(dtype=float),
                        state=run["state"], reason=run["reason"], max_new_tokens=mnt,
                        thresholds=cfg.stability)


def score_runs(runset: RunSet, cfg: ReportConfig) -> Scored:
    """Score and classify every run of a RunSet (rules in the module docstring)."""
    ev = select_metric(runset, cfg.metric)
    runs, notes = _disambiguate(runset.runs, runset)
    ev_by_run = dict(tuple(ev.groupby("run_id", sort=False)))
    metrics_by_run = dict(tuple(runset.metrics.sort_values(["run_id", "step"]).groupby("run_id", sort=False)))
    empty = ev.iloc[:0]
    scored, excluded, base = [], [], []
    stale_base: set = set()
    for run in runs.to_dict("records"):
        rev = ev_by_run.get(run["run_id"], empty)
        zero = rev[(rev["step"] == 0) & np.isfinite(rev["value"].to_numpy(dtype=float))]
        # the base is scored on the split the runs are scored on (test for `final`, val for
        # `last-k`); runs written before the step-0 test eval existed fall back to val
        same = zero[zero["split"] == ("test" if cfg.score == "final" else "val")]
        if cfg.score == "final" and same.empty and len(zero):
            stale_base.add(run["task"])
        zero = same if len(same) else zero[zero["split"] == "val"]
        if len(zero):
            base.append({"run_id": run["run_id"], "task": run["task"], "seed": run["seed"],
                         "model": run["model"], "score": float(zero["value"].mean())})
        result = score_run(rev, run["state"], cfg)
        if isinstance(result, str):
            excluded.append({**{k: run[k] for k in ("run_id", "task", "algorithm", "seed", "state")},
                             "why": result if result != "failed" else f"failed: {_text(run['reason'])}"})
            continue
        verdict = _stability(runset, pd.Series(run), rev, metrics_by_run, cfg)
        scored.append({**{k: run[k] for k in SCORE_COLUMNS if k in run}, "score": result[0],
                       "score_source": result[1], "score_step": result[2], "stable": verdict.stable,
                       "reasons": "; ".join(verdict.reasons)})
    if stale_base:
        notes.append(f"base (step 0) of {', '.join(sorted(stale_base))}: some runs have no step-0 test eval "
                     "(written before it existed); their val step-0 score stands in for the base")
    scores = pd.DataFrame(scored, columns=list(SCORE_COLUMNS))
    scores["stable"] = scores["stable"].astype(bool)
    return Scored(
        scores=scores,
        excluded=pd.DataFrame(excluded, columns=["run_id", "task", "algorithm", "seed", "state", "why"]),
        base=pd.DataFrame(base, columns=["run_id", "task", "seed", "model", "score"]),
        metric_evals=ev, notes=tuple(notes),
    )


def score_matrix(scores: pd.DataFrame, algorithm: str, tasks: list[str],
                 seeds: list | None = None) -> np.ndarray:
    """rliable-style (R, T) array of one algorithm's scores, NaN-padded.

    Rows are `seeds` in the given order when passed (for pairing), else the algorithm's
    own runs per task, packed from the top. Shapes: -> (R, len(tasks)).
    """
    sub = scores[scores["algorithm"] == algorithm]
    if seeds is not None:
        piv = sub.pivot_table(index="seed", columns="task", values="score", aggfunc="mean")
        return piv.reindex(index=seeds, columns=tasks).to_numpy(dtype=float)
    cols = [sub.loc[sub["task"] == t, "score"].to_numpy(dtype=float) for t in tasks]
    out = np.full((max([len(c) for c in cols] + [1]), len(tasks)), np.nan)
    for j, c in enumerate(cols):
        out[: len(c), j] = c
    return out
