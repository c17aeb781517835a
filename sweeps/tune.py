"""The tuning protocol: ``rlsuite sweep tune SPEC``.

For every algorithm arm of the spec, an equal-budget grid — learning rate × the one knob the
entry names (``Algorithm.tune_knob``) — is run on *tuning seeds* (disjoint from the final
seeds) at the sweep's matched budget, and scored on the **val** split (the final val eval;
test is never looked at). Selection rule: the highest mean over tuning seeds and tasks of
the final val ``greedy_acc``; ties go to the grid point listed first. The result:

* ``<out>/<name>-tune/<run_id>/`` — the tuning runs (a sweep of their own);
* ``<out>/<name>-tune/selection.json`` — grid, scores per point, rule, chosen values;
* ``<out>/<name>-tuned.yaml`` — a spec for the final runs on fresh seeds with the chosen
  values; its runs carry a ``tuning`` record in ``spec.json`` (grid size, runs, budget), so the
  report states the tuning budget.

Spec key ``tuning`` (all optional): ``lr`` (list; default lr₀ × {1/3, 1, 3} around the
preset), ``seeds`` (default [1000, 1001]), ``knobs`` (``{algo: {field: [values]}}`` to
override an entry's own), ``metric`` (default ``greedy_acc``).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from rlsuite.suite.runfolder import atomic_write_json, atomic_write_text, read_jsonl
from rlsuite.sweeps.spec import Arm, SweepSpec, expand, load


def _grid(sweep: SweepSpec) -> list[tuple[Arm, Arm, dict]]:
    """(original arm, grid arm, point) for every grid point."""
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS

    t = sweep.tuning or {}
    out = []
    for arm in sweep.algorithms:
        base_lr = expand(dataclasses.replace(sweep, algorithms=(arm,), seeds=sweep.seeds[:1], factors={}))[0].optim.lr
        lrs = t.get("lr") or [base_lr / 3, base_lr, base_lr * 3]
        knob = ALGORITHMS.get(arm.name).tune_knob
        override = (t.get("knobs") or {}).get(arm.name)
        if override:
            knob = next(iter(override.items()))
        knob_values = list(knob[1]) if knob else [None]
        knob_keys = tuple(knob[0].split("+")) if knob else ()  # "a+b": both fields at once (Algorithm.tune_knob)
        for lr in lrs:
            for kv in knob_values:
                point = {"optim.lr": float(lr)} | {f"algo.{k}": kv for k in knob_keys}
                named = {"optim.lr": float(lr)} | ({f"algo.{knob[0]}": kv} if knob else {})
                label = ",".join(f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                                 for k, v in named.items())
                variant = f"{arm.variant}|{label}" if arm.variant else label
                out.append((arm, Arm(arm.name, variant, {**arm.set, **point}), point))
    return out


def tune(spec_ref: str, out: Path, cluster: str, workers: int) -> Path:
    from rlsuite.sweeps.launch import run_sweep_spec

    sweep = load(spec_ref)
    t = sweep.tuning or {}
    tune_seeds = tuple(t.get("seeds") or (1000, 1001))
    if set(tune_seeds) & set(sweep.seeds):
        from rlsuite.suite.errors import BadInput

        raise BadInput(f"tuning seeds {list(tune_seeds)} overlap the final seeds {list(sweep.seeds)}: "
                       "tune on seeds the final runs do not use")
    grid = _grid(sweep)
    tsweep = dataclasses.replace(sweep, name=f"{sweep.name}-tune", algorithms=tuple(g[1] for g in grid),
                                 seeds=tune_seeds, tuning={})
    root, _ = run_sweep_spec(tsweep, out, cluster, workers)
    metric = t.get("metric", "greedy_acc")
    runs = expand(tsweep)
    scores: dict[tuple[str, str], list[float]] = {}  # (entry, grid variant): two entries share variant labels
    for r in runs:
        ev = [e for e in read_jsonl(root / r.run_id / "evals.jsonl") if e.get("final") and e["split"] == "val"]
        key = f"eval/{r.task.name}/{metric}"
        if ev and key in ev[-1]:
            scores.setdefault((r.algo.name, r.variant), []).append(float(ev[-1][key]))
    chosen, table = [], []
    for arm in sweep.algorithms:
        points = [(g[1].variant, g[2]) for g in grid if g[0] is arm]
        best = None
        for variant, point in points:
            vals = scores.get((arm.name, variant), [])
            mean = statistics.mean(vals) if vals else float("nan")
            table.append({"algo": arm.name, "arm": arm.variant, "point": point, "n": len(vals), "mean_val": mean})
            if vals and (best is None or mean > best[0]):
                best = (mean, point)
        chosen.append((arm, best[1] if best else {}))
    budget = {"grid_points": len(grid), "tuning_seeds": list(tune_seeds), "runs": len(runs),
              "budget_per_run": sweep.budget, "tuning_sweep": tsweep.name}
    selection = {"rule": f"max mean final val {metric} over tuning seeds and tasks; ties: first grid point",
                 "grid": table, "chosen": [{"algo": a.name, "arm": a.variant, "values": v} for a, v in chosen],
                 "tuning_budget": budget}
    atomic_write_json(root / "selection.json", selection)
    final = {"name": f"{sweep.name}-tuned", "tasks": [{"name": n, "set": s} for n, s in sweep.tasks],
             "algorithms": [{"name": a.name, "variant": a.variant, "set": {**a.set, **v}} for a, v in chosen],
             "seeds": list(sweep.seeds), "budget": sweep.budget, "model": sweep.model, "base": sweep.base,
             "factors": sweep.factors, "set": sweep.set, "resources": dataclasses.asdict(sweep.resources),
             "tuning": {"record": {"selection": str(root / "selection.json"), **budget,
                                   "chosen": selection["chosen"]}}}
    # a study's planned comparisons, checks and score, and the spec's other switches, carry over
    # (the tuned arms keep their labels, so the comparisons still name them)
    final |= {k: v for k, v in {"lr_scaling": sweep.lr_scaling, "allow_identical_arms": sweep.allow_identical_arms,
                                "comparisons": [dataclasses.asdict(c) for c in sweep.comparisons],
                                "checks": [dataclasses.asdict(c) for c in sweep.checks],
                                "score": sweep.score}.items() if v}
    path = out / f"{sweep.name}-tuned.yaml"
    header = (f"# Final runs of '{sweep.name}' with values chosen by `rlsuite sweep tune` on the val split\n"
              f"# (tuning seeds {list(tune_seeds)}; {len(runs)} tuning runs). Run: rlsuite sweep run {path}\n")
    atomic_write_text(path, header + yaml.safe_dump(_plain(final), sort_keys=False))
    return path


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x))
