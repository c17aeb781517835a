"""``rlsuite sweep plan SPEC --pilot ROOT``: seeds and CPU-hours for a spec's planned comparisons.

For each planned comparison (the spec's ``comparisons:``) on each task, from a pilot's runs (≥ 5
paired seeds of both arms, on seeds disjoint from the confirmatory ones): the spread of the paired
differences, the seeds at which the smallest effect of interest is detectable with 80% power by the
report's own test (the sign-flip randomization test, :mod:`rlsuite.reports.smallsample`) at the
family's adjusted level (alpha / m: the first Holm step over the m planned comparisons × tasks), the
range that the spread's uncertainty implies (its 80% interval), the number to run (at the spread's
60% upper confidence bound: planning at a pilot's point estimate under-powers, measured in
``tests/reports/test_smallsample.py``), and the CPU-hours from the pilot's run times (wall seconds ×
torch threads per run, both arms). The spec's manipulation checks (``checks:``) gate: a comparison
whose arms fail a check in the pilot is reported **not testable at this preset** and gets no plan.
The runs are scored as ``rlsuite report`` scores the planned comparisons: by the spec's ``score``
settings, a battery run (e.g. a multi-dataset ``reasoning_gym``) as one task per dataset unless it
sets ``per_dataset: false`` (then its pooled metric, one task: a family of m comparisons, not m ×
datasets).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from rlsuite.suite.errors import BadInput

MIN_PILOT = 5
"""Fewest paired pilot seeds a plan is made from."""


def plan(spec_ref: str, pilot: Path, confidence: float | None = None, power: float = 0.8) -> dict[str, Any]:
    """The plan (see the module docstring) as ``{"rows": [...], "alpha_family": ..., "m": ...}``.
    The runs are scored as the report scores the planned comparisons: by the spec's ``score``
    settings (a battery's datasets as tasks unless it sets ``per_dataset: false``); ``confidence``
    None: the spec's ``score.confidence``, else 0.95."""
    from rlsuite.reports import battery
    from rlsuite.reports import checks as checks_mod
    from rlsuite.reports import smallsample
    from rlsuite.reports.config import ReportConfig
    from rlsuite.reports.errors import ReportError
    from rlsuite.reports.load import load_runs
    from rlsuite.reports.scores import BASE_LABEL, score_runs
    from rlsuite.reports.tables import _by_seed, pair_data
    from rlsuite.sweeps.spec import load

    sweep = load(spec_ref)
    if not sweep.comparisons:
        raise BadInput(f"{sweep.source}: the spec plans no comparisons; add comparisons: [{{a, b, direction, "
                       f"smallest_effect}}] (fixed before any pilot) to plan its seeds")
    zero = [c.label for c in sweep.comparisons if c.smallest_effect <= 0]
    if zero:
        raise BadInput(f"{sweep.source}: a plan needs a smallest effect of interest > 0 for every comparison; "
                       f"missing for: {', '.join(zero)}")
    if not Path(pilot).is_dir():
        raise BadInput(f"--pilot {pilot}: no such folder (the root of the pilot's run folders)")
    if confidence is None:
        confidence = float(sweep.score.get("confidence", 0.95))
    elif "confidence" in sweep.score and confidence != sweep.score["confidence"]:
        raise BadInput(f"--confidence {confidence}: {sweep.source} fixes score.confidence = "
                       f"{sweep.score['confidence']} for its planned comparisons; drop --confidence")
    try:
        cfg = ReportConfig(**sweep.score)
        runset, expanded = battery.expand(load_runs(Path(pilot)), cfg)
        scored = score_runs(runset, cfg)
    except ReportError as e:
        raise BadInput(f"--pilot {pilot}: {e}") from None
    s = scored.scores
    tasks = sorted(s["task"].unique())
    m = len(sweep.comparisons) * len(tasks)
    alpha = (1 - confidence) / max(1, m)
    gate = checks_mod.evaluate(sweep.checks, runset.runs, runset.metrics) if sweep.checks else pd.DataFrame()
    wall = _run_cost(runset.runs, Path(pilot))
    rows = []
    for task in tasks:
        st = s[s["task"] == task]
        series = {a: _by_seed(g) for a, g in st.groupby("algorithm", sort=True)}
        base = scored.base[scored.base["task"] == task]
        if len(base):
            series[BASE_LABEL] = _by_seed(base)
        for c in sweep.comparisons:
            b = BASE_LABEL if c.b == "base" else c.b
            row = {"task": task, "comparison": c.label, "smallest_effect": c.smallest_effect,
                   "direction": c.direction}
            if c.a not in series or b not in series:
                missing = [x for x in (c.a, b) if x not in series]
                rows.append({**row, "status": f"no pilot runs of {', '.join(missing)}"})
                continue
            failed = checks_mod.failed_for(gate, task, [c.a] + ([c.b] if c.b != "base" else []))
            pair = pair_data(series[c.a], series[b])
            n = pair.shared if pair.d is not None else 0
            row.update(pilot_pairs=n, pilot_diff=pair.diff)
            if failed:
                rows.append({**row, "status": "not testable at this preset: " + "; ".join(failed)})
                continue
            if n < MIN_PILOT:
                rows.append({**row, "status": f"pilot too small: {n} paired seed(s), a plan needs ≥ {MIN_PILOT}"})
                continue
            sd = float(pair.d.std(ddof=1))
            p = smallsample.planned_power(c.smallest_effect, sd, n, alpha=alpha, power=power,
                                          alternative=c.direction)
            per_run = [wall.get((task, arm)) for arm in (c.a, c.b) if arm != "base"]
            cpu_h = (sum(per_run) * p["n_plan"] / 3600) if all(x is not None for x in per_run) and \
                math.isfinite(p["n_plan"]) else float("nan")
            rows.append({**row, "status": "planned", "pilot_sd": sd, "sd_80_low": p["sd_low"],
                         "sd_80_high": p["sd_high"],
                         "seeds_at_sd": p["n"], "seeds_low": p["n_low"], "seeds_high": p["n_high"],
                         "seeds_to_run": p["n_plan"], "floor": p["floor"], "cpu_hours": cpu_h})
    return {"spec": sweep.source, "pilot": str(pilot), "m": m, "alpha_family": 1 - confidence,
            "score": dict(sweep.score), "notes": list(expanded),
            "alpha_first_step": alpha, "power": power, "rows": rows,
            "checks": gate.to_dict("records") if len(gate) else []}


def _run_cost(runs: pd.DataFrame, pilot: Path) -> dict[tuple[str, str], float]:
    """Mean CPU-seconds a run of each (task, arm) took in the pilot: status.json's budget wall
    seconds × the run's torch threads."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in runs.itertuples():
        try:
            st = json.loads((Path(r.path) / "status.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        wall = (st.get("budget") or {}).get("wall_s")
        threads = r.num_threads if isinstance(r.num_threads, (int, float)) and r.num_threads == r.num_threads else 1
        if isinstance(wall, (int, float)):
            out.setdefault((r.task, r.algorithm), []).append(float(wall) * max(1.0, float(threads)))
    return {k: sum(v) / len(v) for k, v in out.items()}


def describe(p: dict[str, Any]) -> str:
    """The plan as Markdown: one row per comparison × task, then the checks."""
    head = (f"Plan for {p['spec']} from the pilot {p['pilot']}: {p['m']} planned comparison(s) × task(s), one Holm "
            f"family at alpha {p['alpha_family']:.2g} (first step {p['alpha_first_step']:.3g}); {p['power']:.0%} "
            "power for the smallest effect by the sign-flip test.")
    if p.get("score"):
        head += " Scored by the spec's `score`: " + ", ".join(f"{k} = {v}" for k, v in p["score"].items()) + "."
    if p.get("notes"):  # a battery scored per dataset: its datasets share their runs
        head += (" " + " ".join(p["notes"]) + " The rows of one battery's datasets are the same runs: their "
                 "CPU-hours do not add up.")
    lines = [head, "", "| task | comparison | smallest effect | pilot pairs | pilot diff | pilot sd [80%] | seeds "
             "(at sd; range) | seeds to run | floor | CPU-hours | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, fmt: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)  # noqa: E731
    for r in p["rows"]:
        sd = (f"{r['pilot_sd']:.3g} [{r['sd_80_low']:.3g}, {r['sd_80_high']:.3g}]" if "pilot_sd" in r else "—")
        seeds = (f"{f(r['seeds_at_sd'], '.0f')} ({f(r['seeds_low'], '.0f')}–{f(r['seeds_high'], '.0f')})"
                 if "seeds_at_sd" in r else "—")
        lines.append(f"| {r['task']} | {r['comparison']} | {r['smallest_effect']:g} | {r.get('pilot_pairs', '—')} | "
                     f"{f(r.get('pilot_diff'), '+.3g')} | {sd} | {seeds} | {f(r.get('seeds_to_run'), '.0f')} | "
                     f"{r.get('floor', '—')} | {f(r.get('cpu_hours'), '.2f')} | {r['status']} |")
    if p["checks"]:
        lines += ["", "| task | arm | check | runs passing | values | result |", "|---|---|---|---|---|---|"]
        lines += [f"| {c['task']} | {c['arm']} | {c['check']} | {c['n_pass']}/{c['n_runs']} | {c['values']} | "
                  f"{c['result']} |" for c in p["checks"]]
    return "\n".join(lines)
