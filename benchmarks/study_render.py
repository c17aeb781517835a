"""What the study scripts share when they render a registered study's ``results.md``.

A registered study folder (``rlsuite sweep register``) holds ``study.json`` and, once runs finish,
their compact copies under ``runs/<name>/``. :func:`load_stage` scores them exactly as ``rlsuite
report`` does (the registered Holm family and manipulation checks); the helpers below print the
parts every study's results file has: the runs line (how many, which commits, which CPU, CPU-hours),
the planned comparisons with their checks, the checks table and per-arm signal means.
:func:`write_keeping` rewrites a results file and keeps the hand-written reading below its marker.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from common import fmt_number as _fmt, md_table as _table

END = "<!-- end of the generated part; what follows is kept -->"


@dataclasses.dataclass
class Stage:
    """One registered stage: its study.json, runs, scores and check gate (None fields: not run)."""

    name: str
    reg: dict
    root: Path
    runset: object = None
    scored: object = None
    cfg: object = None
    gate: object = None
    series: dict = dataclasses.field(default_factory=dict)
    """arm label -> final greedy test accuracy by seed (``seed:<k>`` index)."""
    specs: dict = dataclasses.field(default_factory=dict)
    """arm label -> one of its runs' parsed spec.json."""

    @property
    def ran(self) -> bool:
        return self.scored is not None

    def setting(self, arm: str, section: str, key: str, default=None):
        """A run setting of ``arm`` (``specs[arm][section][key]``), ``default`` when absent."""
        return (self.specs.get(arm, {}).get(section) or {}).get(key, default)


def load_stage(study: Path, reps: int = 2000) -> Optional[Stage]:
    """The stage registered in ``study`` (None when it is not registered yet)."""
    from rlsuite.reports import battery, tables
    from rlsuite.reports import checks as checks_mod
    from rlsuite.reports.config import ReportConfig
    from rlsuite.reports.load import load_runs
    from rlsuite.reports.scores import score_runs
    from rlsuite.sweeps.spec import Check

    if not (study / "study.json").is_file():
        return None
    reg = json.loads((study / "study.json").read_text())
    st = Stage(reg["name"], reg, study / "runs" / reg["name"])
    if not st.root.is_dir() or not any(st.root.glob("*/status.json")):
        return st
    comps = tuple((c["a"], c["b"], c["direction"], float(c["smallest_effect"])) for c in reg["comparisons"])
    cks = tuple(dataclasses.astuple(Check(**c)) for c in reg["checks"])
    # the score the study was registered with, else the report's defaults (per dataset for mixtures
    # only: hops_toy's per-hop variants stay pooled), so a render scores as `rlsuite report` does
    st.cfg = ReportConfig(comparisons=comps, checks=cks, reps=reps, **(reg.get("report") or {}))
    st.runset = battery.expand(load_runs(st.root), st.cfg)[0]
    st.scored = score_runs(st.runset, st.cfg)
    st.gate = checks_mod.evaluate([Check(*c) for c in cks], st.runset.runs, st.runset.metrics)
    st.series = {a: tables._by_seed(g) for a, g in st.scored.scores.groupby("algorithm", sort=True)}
    for r in st.runset.runs.sort_values("run_id").itertuples():  # the loader's arm label and parsed spec
        st.specs.setdefault(r.algorithm, st.runset.specs[r.run_id])
    return st


def runs_line(stage: Stage) -> str:
    """How many of the registered runs exist, their states, commits, CPU models and training CPU-hours."""
    runs = stage.runset.runs
    states = runs["state"].value_counts().to_dict()
    wall, commits, cpus = 0.0, set(), set()
    for d in sorted(stage.root.iterdir()):
        if (d / "status.json").is_file():
            stt = json.loads((d / "status.json").read_text())
            wall += float(stt.get("budget", {}).get("wall_s", 0.0))
            env = json.loads((d / "env.json").read_text()) if (d / "env.json").is_file() else {}
            commits.add((env.get("study") or {}).get("commit") or env.get("git_commit"))
            cpus.add(env.get("cpu_model") or stt.get("cpu_model"))
    expected = len(stage.reg.get("runs", [])) or len(runs)
    state = ", ".join(f"{k} {v}" for k, v in states.items())
    return (f"{stage.name}: {len(runs)} of {expected} registered runs ({state}); "
            f"commit(s) {', '.join(sorted(c[:7] for c in commits if c)) or 'not stated'} (registered "
            f"{stage.reg['commit'][:7]}); CPU {', '.join(sorted(c for c in cpus if c)) or 'not stated'}; training wall "
            f"time {wall / 3600:.2f} CPU-hours (1 thread a run; evals and start-up not included).")


def planned_table(stage: Stage, pilot: Optional[Stage] = None) -> str:
    """The registered Holm family exactly as ``rlsuite report`` computes it, with each comparison's
    failed checks beside its verdict; a comparison whose arm failed a check of ``pilot`` reads "not
    testable at this preset (pilot gate)"."""
    from rlsuite.reports import checks as checks_mod
    from rlsuite.reports import tables

    rows = []
    for r in tables.planned_table(stage.scored, stage.cfg).itertuples():
        failed = checks_mod.failed_for(stage.gate, r.task, [r.a, r.b])
        gate = checks_mod.failed_for(pilot.gate, r.task, [r.a, r.b]) if pilot is not None and pilot.ran else []
        rows.append({"comparison": r.comparison, "n": r.n_pairs, "diff (pp)": f"{100 * r.diff:+.1f}",
                     "p": _fmt(r.p_value), "p_holm": _fmt(r.p_holm),
                     "Holm interval (pp)": f"[{_fmt(_pp(r.holm_ci_low), 3)}, {_fmt(_pp(r.holm_ci_high), 3)}]",
                     "verdict": ("not testable at this preset (pilot gate)" if gate else r.verdict),
                     "non-trivial": "yes" if r.non_trivial else "no", "mdd (pp)": _fmt(100 * r.mdd, 3),
                     "checks": "; ".join(failed) or "pass"})
    return _table(rows, ["comparison", "n", "diff (pp)", "p", "p_holm", "Holm interval (pp)", "verdict",
                         "non-trivial", "mdd (pp)", "checks"])


def _pp(x: float) -> float:
    """A share in points, rounded to 1e-6 points: the interval's inversion leaves float noise such as
    −3e-10 where the bound is 0 (printed as such, it reads as a real number)."""
    return round(100 * x, 6) + 0.0 if np.isfinite(x) else x


def checks_table(stage: Stage) -> str:
    """The manipulation checks of ``stage``'s runs: runs passing, each run's value, the result."""
    return _table([{"check": r.check, "runs passing": f"{r.n_pass}/{r.n_runs}", "values": r.values,
                    "result": r.result} for r in stage.gate.itertuples()],
                  ["check", "runs passing", "values", "result"])


def signal_table(stage: Stage, signals: Iterable[tuple[str, str]], arms: Optional[Iterable[str]] = None) -> str:
    """Per arm (``arms`` order, default sorted), each ``(metric, column)`` signal's mean over the
    arm's runs of each run's mean after the first 20% of its steps (``reports.checks.arm_mean``);
    "—" where the arm never logged it."""
    from rlsuite.reports import checks as checks_mod

    signals = list(signals)
    rows = []
    for arm in (list(arms) if arms is not None else sorted(stage.series)):
        row = {"arm": arm}
        for key, col in signals:
            v = checks_mod.arm_mean(stage.runset.runs, stage.runset.metrics, arm, key)
            row[col] = _fmt(v) if np.isfinite(v) else "—"
        rows.append(row)
    return _table(rows, ["arm"] + [c for _, c in signals])


def write_keeping(out: Path, text: str) -> None:
    """Write ``text`` to ``out``, keeping what follows :data:`END` in the file as it was."""
    kept = ""
    if out.is_file() and END in out.read_text():
        kept = out.read_text().split(END, 1)[1]
    out.write_text(text + "\n" + END + kept)
