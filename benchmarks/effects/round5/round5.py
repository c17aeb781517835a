"""Effects, fifth round (issue 35 §3): the pre-registered analysis of ``round5/README.md``.

    python benchmarks/effects/round5/round5.py probe RUNS     # stage A: which effects engage (RUNS/effects_r5_probe)
    python benchmarks/effects/round5/round5.py plan RUNS      # stage B: seeds per engaged effect from the pilot
    python benchmarks/effects/round5/round5.py family RUNS    # stage C: the six primaries, one Holm family
    python benchmarks/effects/round5/round5.py secondary RUNS # the pre-registered secondaries, unadjusted

* ``probe`` evaluates the registered checks of ``probe/study.json`` on the probe's runs and maps
  them to the effects they gate (:data:`ENGAGES`): an effect engages when every check it needs
  passes on every probe seed.
* ``plan`` reads a pilot (sweep ``effects_r5_pilot``), reduces every run to its effect's primary
  statistic (the round-1 analyses of ``../effects.py``; effect 3 with the halfway target), pairs the
  arms by seed and gives, per effect, the paired sd and the seeds to run: ``planned_power`` of
  ``rlsuite.reports.smallsample`` at the Holm family's first-step level 0.05 / m, one-sided, for the
  effect's smallest effect of interest (:data:`SESOI`), never below :data:`MIN_SEEDS`.
* ``family`` does the same for the confirmatory sweep (``effects_r5``) and tests each primary by the
  report's paired sign-flip test (one-sided, the claim's direction), Holm over the family; effect 5
  enters from ``../../effect5_attribution`` (final greedy test accuracy, dppo:stale4 − grpo:stale4).

* ``secondary`` reads the pre-registered secondaries, outside the family, each with the report's
  default paired interval and unadjusted: effect 1 ``grpo`` − ``grpo:constant-norm`` (its arm is
  B2's) and effect 1's statistic on the battery's §2 arms (``grpo`` − ``dr_grpo``, ``len/wrong_mean``
  over the last quarter, from ``--battery``), and effect 2's final greedy test accuracy.

Nothing is filled in: an effect without paired seeds is "not run" and leaves the family.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent))  # benchmarks/effects: the round-1 analyses (after PYTHONPATH)
import effects as r1  # noqa: E402

H0 = 0.04382134601473808
"""Token-mean entropy (nats) of the committed chain base at temperature 1 (``../base_entropy.json``)."""
ALPHA = 0.05
MIN_SEEDS = 8
"""Confirmatory seeds per effect at least: with six in the family a one-sided sign-flip test at 0.05/6
needs n >= 7 to be able to reject (README "Stage C")."""
SESOI = {"length": 5.0, "clip_higher": 0.1 * H0, "std_norm": 2560.0, "batch_size": 0.02, "staleness": 0.03,
         "entrocraft": 0.1 * H0}
"""The smallest effect of interest of each primary, in its statistic's unit (README table)."""
ORDER = ("length", "clip_higher", "std_norm", "batch_size", "staleness", "entrocraft")
CLIP_ARMS = {"P2": ("dapo:mb4e4", "dapo:mb4e4-symmetric"), "P1": ("dapo:mb4", "dapo:mb4-symmetric")}
"""Effect 2's arms (clip-higher, symmetric) at each preset it may be tested at (README "The testbeds")."""
SYMMETRIC = tuple(sym for _, sym in CLIP_ARMS.values())
ENGAGES = {
    "length": ((("grpo",), "reward/mean"), (("grpo",), "group/mixed_frac")),
    "clip_higher": ((SYMMETRIC, "stats/clip_frac_high"), (SYMMETRIC, "stats/entropy")),
    "std_norm": ((("grpo",), "reward/mean"), (("grpo",), "group/mixed_frac")),
    "batch_size": ((("grpo",), "reward/mean"),),
    "entrocraft": ((("grpo",), "stats/entropy"),),
}
"""The probe checks (arms, signal) each effect needs (README "Stage A"); effect 5 is not probed."""
TARGET_ROOM = 0.03
"""Effect 3's stage-B check: its halfway target must lie this far above the starting reward."""


# -- stage A ----------------------------------------------------------------------------------

def engaged(table) -> dict[str, dict]:
    """effect -> {"engages": bool, "failed": [check text]} from a checks table (``reports.checks.evaluate``
    rows: arm, check (its label, which names the signal), result). An effect none of whose checks is in
    the table was not probed there and is left out (P2 probes effect 2 alone)."""
    out = {}
    hit = lambda r, arms, s: r.arm in arms and f" {s} " in r.check  # noqa: E731
    for eff, needs in ENGAGES.items():
        rows = [r for r in table.itertuples() if any(hit(r, a, s) for a, s in needs)]
        if not rows:
            continue
        missing = [f"{'/'.join(a)} {s}: no such check" for a, s in needs if not any(hit(r, a, s) for r in rows)]
        failed = [r.check + f" ({r.result})" for r in rows if r.result != "pass"]
        out[eff] = {"engages": not missing and not failed, "failed": missing + failed}
    return out


def probe(root: Path, study: Path = HERE / "probe") -> str:
    from rlsuite.reports import checks as checks_mod
    from rlsuite.reports.load import load_runs
    from rlsuite.sweeps.spec import Check

    reg = json.loads((study / "study.json").read_text())
    rs = load_runs(root / reg["name"])
    table = checks_mod.evaluate([Check(**c) for c in reg["checks"]], rs.runs, rs.metrics)
    lines = ["| check | runs passing | values | result |", "|---|---|---|---|"]
    lines += [f"| {r.check} | {r.n_pass}/{r.n_runs} | {r.values} | {r.result} |" for r in table.itertuples()]
    lines += ["", "| effect | engages at this preset | failing checks |", "|---|---|---|"]
    for eff, v in engaged(table).items():
        lines.append(f"| {eff} | {'yes' if v['engages'] else 'no'} | {'; '.join(v['failed']) or '—'} |")
    return "\n".join(lines) + "\n"


# -- the primaries ----------------------------------------------------------------------------

def primaries(rs) -> dict[str, dict[int, float]]:
    """effect -> {seed: paired difference of its primary statistic, in the claim's direction} for the
    effects whose arms are in ``rs`` (effect 3 on the halfway target; effect 6's band from the round-1
    spec, which is the one round 5 uses)."""
    res = {"length": r1.length(rs)["primary"], "clip_higher": clip_higher(rs),
           "std_norm": r1.std_norm(rs)["posthoc"], "batch_size": r1.batch_size(rs)["primary"],
           "entrocraft": r1.entrocraft(rs, r1._entrocraft_band())["primary"]}
    return {k: dict(v.get("per_seed", {})) for k, v in res.items()}


def clip_higher(rs) -> dict:
    """Effect 2's primary at the preset whose arms ``rs`` holds (P2's if both): the round-1 statistic,
    last-quarter entropy, clip-higher − symmetric, paired by seed."""
    for hi, sym in CLIP_ARMS.values():
        if {hi, sym} <= set(rs.runs["algorithm"]):
            ent = lambda r: r1.tail_mean(rs.metrics, r.run_id, "stats/entropy")  # noqa: E731
            return r1.paired(r1.per_seed(rs.runs, hi, ent), r1.per_seed(rs.runs, sym, ent))
    return {}


def target_check(rs) -> dict:
    """Effect 3's stage-B check: the halfway target (start + half the way to the best arm's smoothed
    final training reward) must lie :data:`TARGET_ROOM` above the mean smoothed start."""
    res = r1.std_norm(rs)
    start, target = float(res["start"]), float(res["posthoc_target"])
    return {"start": start, "target": target, "passes": bool(target - start >= TARGET_ROOM)}


def effect5(study: Path = HERE.parents[1] / "effect5_attribution") -> dict[int, float]:
    """Effect 5's primary from its attribution study's compact runs: per seed, final greedy test
    accuracy of dppo:stale4 − grpo:stale4."""
    from rlsuite.reports.load import load_runs

    rs = load_runs(study / "runs" / "effect5_attribution")
    sc = lambda r: r1.final_score(rs.evals, r.run_id)  # noqa: E731
    a, b = r1.per_seed(rs.runs, "dppo:stale4", sc), r1.per_seed(rs.runs, "grpo:stale4", sc)
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def family(diffs: dict[str, dict[int, float]], alpha: float = ALPHA) -> list[dict]:
    """One row per effect (in :data:`ORDER`): n, mean, one-sided sign-flip p, Holm-adjusted p over the
    effects with >= 1 paired seed, verdict (``confirmed`` when p_holm <= alpha, ``not confirmed``
    otherwise, ``not run`` without seeds) and the MDD at the family's first-step level."""
    from rlsuite.reports.smallsample import mdd, perm_p
    from rlsuite.reports.stats.tests import holm

    rows = []
    for eff in ORDER:
        v = np.array([x for _, x in sorted(diffs.get(eff, {}).items()) if np.isfinite(x)], dtype=float)
        p = perm_p(v, alternative="greater") if v.size else float("nan")
        rows.append({"effect": eff, "n": int(v.size), "mean": float(v.mean()) if v.size else float("nan"),
                     "sd": float(v.std(ddof=1)) if v.size > 1 else float("nan"), "p": p, "sesoi": SESOI[eff]})
    adj = holm([r["p"] for r in rows])
    m = int(np.isfinite(adj).sum())
    for r, q in zip(rows, adj):
        r["p_holm"] = float(q)
        r["verdict"] = "not run" if not math.isfinite(q) else "confirmed" if q <= alpha else "not confirmed"
        r["mdd"] = mdd(r["sd"], r["n"], alpha=alpha / max(m, 1), alternative="greater") if r["n"] > 1 else float("nan")
    return rows


BATTERY = HERE.parents[1] / "battery_comparison" / "runs" / "battery_comparison-tuned"
"""§2's confirmatory runs (``grpo`` and ``dr_grpo`` on the battery): effect 1's battery secondary."""


READING = {"reproduced": "interval above 0", "reversed": "interval below 0",
           "not reproduced": "interval contains 0", "not run": "not run"}
"""A secondary's interval read in the claim's direction (descriptive: no secondary is a verdict)."""


def secondaries(rs, battery=None) -> list[dict]:
    """The pre-registered secondaries (README "Primaries and the multiplicity plan"), one row each:
    n paired seeds, mean difference in the claim's direction and the report's default interval,
    unadjusted (outside the family). ``rs``: the confirmatory chain runs; ``battery``: §2's runs or
    None. A secondary whose arms are absent is "not run"."""
    rows = []

    def add(effect: str, what: str, d: dict) -> None:
        rows.append({"effect": effect, "secondary": what, "n": d["n"], "mean": d["mean"], "lo": d["lo"],
                     "hi": d["hi"], "method": d["method"] or "—",
                     "reading": READING[r1.verdict(d, +1)]})

    add("length", "len/wrong_mean last quarter, grpo − grpo:constant-norm (chain)", r1.length(rs)["secondary"])
    if battery is not None:
        add("length", "len/wrong_mean last quarter, grpo − dr_grpo (battery, §2)", r1.length(battery)["primary"])
    else:
        add("length", "len/wrong_mean last quarter, grpo − dr_grpo (battery, §2)", r1.paired({}, {}))
    fin = lambda r: r1.final_score(rs.evals, r.run_id)  # noqa: E731
    d = r1.paired({}, {})
    for hi, sym in CLIP_ARMS.values():
        if {hi, sym} <= set(rs.runs["algorithm"]):
            d = r1.paired(r1.per_seed(rs.runs, hi, fin), r1.per_seed(rs.runs, sym, fin))
            break
    add("clip_higher", "final greedy test accuracy, clip-higher − symmetric", d)
    return rows


def plan(diffs: dict[str, dict[int, float]], m: int, alpha: float = ALPHA) -> list[dict]:
    """Per effect with >= 2 paired pilot seeds: the paired sd and the seeds to run for its SESOI at 80%
    power, one-sided at alpha / m (``planned_power``), and ``n_run`` = max(:data:`MIN_SEEDS`, n_plan)."""
    from rlsuite.reports.smallsample import planned_power

    rows = []
    for eff in ORDER:
        v = np.array([x for x in diffs.get(eff, {}).values() if np.isfinite(x)], dtype=float)
        if v.size < 2:
            continue
        pp = planned_power(SESOI[eff], float(v.std(ddof=1)), int(v.size), alpha=alpha / m, alternative="greater")
        n_plan = pp["n_plan"]
        rows.append({"effect": eff, "pilot_n": int(v.size), "pilot_mean": float(v.mean()), "sd": pp["sd"],
                     "sesoi": SESOI[eff], "n": pp["n"], "n_plan": n_plan,
                     "n_run": n_plan if not math.isfinite(n_plan) else max(MIN_SEEDS, int(n_plan))})
    return rows


def _fmt(x: float) -> str:
    if isinstance(x, (int, float)) and math.isinf(x):
        return "∞"  # an MDD below the test's seed floor: no difference is detectable
    return "—" if not isinstance(x, (int, float)) or not math.isfinite(x) else f"{x:.4g}"


def _rows(rows: list[dict], keys: list[str]) -> str:
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_fmt(r[k]) if isinstance(r[k], float) else str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("probe", "stage A: the checks and which effects engage"),
                        ("plan", "stage B: seeds per effect from the pilot"),
                        ("family", "stage C: the primaries as one Holm family"),
                        ("secondary", "the pre-registered secondaries, unadjusted")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("root", type=Path, help="the --out the stage's sweep ran into")
        if name == "probe":
            p.add_argument("--study", type=Path, default=HERE / "probe",
                           help="the registered probe (its study.json): probe (P1, default) or probe_p2")
        else:
            p.add_argument("--sweep", default="effects_r5_pilot" if name == "plan" else "effects_r5")
        if name == "plan":
            p.add_argument("--m", type=int, default=None,
                           help="effects in the family (default: those with >= 2 paired seeds here, effect 5 "
                                "included); give the confirmatory family's size when an effect's pilot is elsewhere")
        if name == "secondary":
            p.add_argument("--battery", type=Path, default=None,
                           help="§2's runs (a report root: the sweep's folder), for effect 1's battery secondary "
                                "(default: benchmarks/battery_comparison/runs/battery_comparison-tuned when it "
                                "has runs, else that row is 'not run')")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"error: {args.root}: no such folder (give the --out the stage's runs went into)", file=sys.stderr)
        return 2
    if args.cmd == "probe":
        print(probe(args.root, args.study), end="")
        return 0
    if not (args.root / args.sweep).is_dir():
        have = sorted(d.name for d in args.root.iterdir() if d.is_dir())
        print(f"error: {args.root} has no sweep {args.sweep!r} (give --sweep one of: {', '.join(have) or 'none'})",
              file=sys.stderr)
        return 2
    if args.cmd == "secondary" and args.battery is not None and not any(args.battery.glob("*/status.json")):
        print(f"error: --battery {args.battery}: no runs there (§2's runs: "
              f"benchmarks/battery_comparison/runs/battery_comparison-tuned)", file=sys.stderr)
        return 2
    rs = r1.load(args.root, args.sweep)
    if args.cmd == "secondary":
        from rlsuite.reports.load import load_runs

        battery = args.battery or (BATTERY if any(BATTERY.glob("*/status.json")) else None)
        rows = secondaries(rs, load_runs(battery) if battery is not None else None)
        print(_rows(rows, ["effect", "secondary", "n", "mean", "lo", "hi", "method", "reading"]), end="")
        return 0
    diffs = primaries(rs)
    diffs["staleness"] = effect5()
    if args.cmd == "plan":
        if {"grpo", "grpo:no-std"} <= set(rs.runs["algorithm"]):
            t = target_check(rs)
            print(f"effect 3's target check: start {t['start']:.4f}, halfway target {t['target']:.4f}: "
                  f"{'pass' if t['passes'] else 'fail (not testable at this preset)'} (room >= {TARGET_ROOM})")
        m = args.m or sum(1 for v in diffs.values() if len(v) >= 2)
        print(f"family of m = {m}: level {ALPHA / m:.4g} at the first Holm step, one-sided\n")
        print(_rows(plan(diffs, m), ["effect", "pilot_n", "pilot_mean", "sd", "sesoi", "n", "n_plan", "n_run"]), end="")
        return 0
    print(_rows(family(diffs), ["effect", "n", "mean", "sd", "p", "p_holm", "verdict", "mdd", "sesoi"]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
