"""Ablation tables: each variant vs its base arm, and 2x2 interaction contrasts.

A sweep group is the runs sharing (sweep, task, algo.name); its arms are the variants
(`variant = null` is the base arm). An arm's level of a factor is its `factors` entry, or,
when the arm does not list that factor, the value of the dotted field in its spec.json
(so a base arm with `factors = {}` still gets its levels).

Differences are paired over the seeds the two arms share (bootstrap over seeds); arms with
no shared seed fall back to an unpaired bootstrap, labelled as such (reports/METRICS.md §4.4).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd

from rlsuite.reports import stats
from rlsuite.reports.config import ReportConfig
from rlsuite.reports.load import RunSet, spec_value
from rlsuite.reports.scores import BASE_LABEL, Scored, score_matrix
from rlsuite.reports.tables import base_by_seed, compare

ABLATION_COLUMNS = ("sweep", "task", "algo", "arm", "factors", "n_seeds", "mean", "ci_low",
                    "ci_high", "diff", "diff_ci_low", "diff_ci_high", "n_pairs", "pairing",
                    "p_improve", "p_ci_low", "p_ci_high", "stable_k", "stable_n")
INTERACTION_COLUMNS = ("sweep", "task", "algo", "factor_a", "factor_b", "levels_a", "levels_b",
                       "context", "n_seeds", "interaction", "ci_low", "ci_high")


def sweep_groups(scored: Scored) -> list[tuple[tuple, pd.DataFrame]]:
    """(sweep, task, algo) groups of scored runs that contain at least one variant arm."""
    s = scored.scores[scored.scores["sweep"].notna()]
    groups = s.groupby(["sweep", "task", "algo"], sort=True)
    return [(key, g) for key, g in groups if g["variant"].notna().any()]


def arm_factors(runset: RunSet, g: pd.DataFrame) -> dict[str, dict]:
    """arm label -> {factor: level} for one sweep group (levels completed from the specs)."""
    first = g.drop_duplicates("algorithm").set_index("algorithm")["run_id"]
    listed = {arm: json.loads(runset.runs.set_index("run_id").at[rid, "factors"] or "{}")
              for arm, rid in first.items()}
    keys = sorted({k for f in listed.values() for k in f})
    return {arm: {k: listed[arm].get(k, spec_value(runset.specs[first[arm]], k)) for k in keys}
            for arm in first.index}


def _fmt_factors(f: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in f.items())


def _arm_row(key: tuple, arm: str, arm_runs: pd.DataFrame, factors: dict, cfg: ReportConfig) -> dict:
    ci = stats.bootstrap_ci(arm_runs["score"].to_numpy(dtype=float), reps=cfg.reps, method=cfg.ci,
                            confidence=cfg.confidence, seed=cfg.seed)
    return {"sweep": key[0], "task": key[1], "algo": key[2], "arm": arm, "factors": _fmt_factors(factors),
            "n_seeds": len(arm_runs), "mean": ci.point, "ci_low": ci.low, "ci_high": ci.high,
            "stable_k": int(arm_runs["stable"].sum()), "stable_n": len(arm_runs)}


def _step0_row(key: tuple, g: pd.DataFrame, scored: Scored, cfg: ReportConfig) -> list[dict]:
    vals = base_by_seed(scored.base[scored.base["run_id"].isin(g["run_id"])])
    if not vals.size:
        return []
    ci = stats.bootstrap_ci(vals, reps=cfg.reps, method=cfg.ci, confidence=cfg.confidence, seed=cfg.seed)
    return [{"sweep": key[0], "task": key[1], "algo": key[2], "arm": BASE_LABEL, "factors": "",
             "n_seeds": len(vals), "mean": ci.point, "ci_low": ci.low, "ci_high": ci.high}]


def ablation_table(scored: Scored, runset: RunSet, cfg: ReportConfig) -> pd.DataFrame:
    """One row per arm of every sweep group: mean with CI, difference from the base arm with
    a paired CI over shared seeds, P(arm > base) with CI, stable k/n.

    Each group starts with its step-0 row and its base arm (difference 0 by definition).
    Columns: `ABLATION_COLUMNS`.
    """
    rows = []
    for key, g in sweep_groups(scored):
        base_rows = g[g["variant"].isna()]
        base_arm = base_rows["algorithm"].iloc[0] if len(base_rows) else None
        levels = arm_factors(runset, g)
        rows += _step0_row(key, g, scored, cfg)
        arms = ([base_arm] if base_arm else []) + sorted(a for a in g["algorithm"].unique() if a != base_arm)
        for arm in arms:
            row = _arm_row(key, arm, g[g["algorithm"] == arm], levels.get(arm, {}), cfg)
            if base_arm is None:
                row["pairing"] = "no base arm"
            elif arm != base_arm:
                d = compare(g, arm, base_arm, [key[1]], cfg)
                p = stats.poi_interval(score_matrix(g, arm, [key[1]]), score_matrix(g, base_arm, [key[1]]),
                                       reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed)
                row.update(diff=d["diff"], diff_ci_low=d["ci_low"], diff_ci_high=d["ci_high"],
                           n_pairs=d["n_pairs"], pairing=d["pairing"], p_improve=p.point,
                           p_ci_low=p.low, p_ci_high=p.high)
            else:
                row.update(pairing="base arm")
            rows.append(row)
    return pd.DataFrame(rows, columns=list(ABLATION_COLUMNS))


def _hashable(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _two_by_two(levels: dict[str, dict], fa: str, fb: str, base_arm: str | None):
    """Yield (context, {(ia, ib): arm}, levels_a, levels_b) for complete 2x2 designs."""
    others = [k for k in next(iter(levels.values())) if k not in (fa, fb)]
    by_ctx: dict[str, dict[str, dict]] = {}
    for arm, lv in levels.items():
        by_ctx.setdefault(_hashable({k: lv[k] for k in others}), {})[arm] = lv
    for ctx, arms in by_ctx.items():
        la = sorted({_hashable(lv[fa]) for lv in arms.values()})
        lb = sorted({_hashable(lv[fb]) for lv in arms.values()})
        if len(la) != 2 or len(lb) != 2:
            continue
        if base_arm in arms:  # the base arm's levels are the reference (0) levels
            la.sort(key=lambda v: v != _hashable(arms[base_arm][fa]))
            lb.sort(key=lambda v: v != _hashable(arms[base_arm][fb]))
        cells: dict[tuple[int, int], list[str]] = {}
        for arm, lv in arms.items():
            cells.setdefault((la.index(_hashable(lv[fa])), lb.index(_hashable(lv[fb]))), []).append(arm)
        if len(cells) == 4 and all(len(v) == 1 for v in cells.values()):
            yield ctx, {k: v[0] for k, v in cells.items()}, la, lb


def interaction_table(scored: Scored, runset: RunSet, cfg: ReportConfig) -> pd.DataFrame:
    """2x2 interaction contrasts (y11 - y01) - (y10 - y00) with a paired CI over the seeds
    all four arms share, for every pair of two-level factors in every sweep group.

    Columns: `INTERACTION_COLUMNS` (levels as "low -> high", low = the base arm's level).
    """
    rows = []
    for key, g in sweep_groups(scored):
        levels = arm_factors(runset, g)
        base = g.loc[g["variant"].isna(), "algorithm"]
        base_arm = base.iloc[0] if len(base) else None
        factors = sorted(next(iter(levels.values())).keys()) if levels else []
        for fa, fb in itertools.combinations(factors, 2):
            for ctx, arms, la, lb in _two_by_two(levels, fa, fb, base_arm):
                seeds = sorted(set.intersection(*(set(g.loc[g["algorithm"] == a, "seed"]) for a in arms.values())),
                               key=str)
                mats = [score_matrix(g, arms[c], [key[1]], seeds) for c in ((0, 0), (1, 0), (0, 1), (1, 1))]
                ci, n = stats.interaction_contrast(*mats, reps=cfg.reps, confidence=cfg.confidence, seed=cfg.seed)
                rows.append({"sweep": key[0], "task": key[1], "algo": key[2], "factor_a": fa, "factor_b": fb,
                             "levels_a": " -> ".join(la), "levels_b": " -> ".join(lb),
                             "context": "" if ctx == "{}" else ctx, "n_seeds": n,
                             "interaction": ci.point, "ci_low": ci.low, "ci_high": ci.high})
    return pd.DataFrame(rows, columns=list(INTERACTION_COLUMNS))


def has_factor(scored: Scored, runset: RunSet, factor: str) -> np.ndarray:
    """Bool mask over `scored.scores` rows whose run lists `factor` in spec `factors`."""
    facts = runset.runs.set_index("run_id")["factors"]
    return scored.scores["run_id"].map(lambda r: factor in json.loads(facts.get(r, "{}") or "{}")).to_numpy(bool)
