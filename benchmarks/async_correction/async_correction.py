"""Async-correction study (issue 41): render the two pre-registered stages in
``benchmarks/async_correction/`` (the pilot in ``pilot/``, the confirmatory runs here; each a
spec, a study.json and compact run copies) into ``results.md``.

    python benchmarks/async_correction/async_correction.py            # rewrites results.md
    python benchmarks/async_correction/async_correction.py --best-two # prints the pilot's pair (README rule)

What it writes, from the compact copies alone (either stage may be missing; it says so):

* the planned comparisons of the confirmatory stage exactly as ``rlsuite report`` computes them
  (one Holm family, sign-flip tests, intervals at the Holm level, MDD) with its manipulation checks;
* the secondary comparison: the best two corrections, fixed from the pilot by the README's rule
  (:func:`best_two`), tested two-sided on the confirmatory seeds at an unadjusted 5%, outside the family;
* the pilot's manipulation-check gate (a comparison whose arms fail a check there is "not testable
  at this preset" and is not claimed);
* degradation with staleness per correction (pilot): final greedy test accuracy at staleness 0 / 2
  / 8 and stale − on-policy paired by seed (95% sign-flip interval, unadjusted, descriptive); the
  on-policy reference of an arm is the run of its entry at staleness 0 with no variant (token TIS,
  MIS and OPSM on GRPO are identities on-policy, so theirs is ``grpo``);
* stability counts per arm (``rlsuite report``'s flags), both stages;
* how much each correction acts: the share of tokens it truncates or masks and the measured lag
  (means over runs of each run's mean after the first 20% of steps), both stages;
* CPU-hours, commits and machines of the runs.

The staleness of an arm is read from its runs' ``rollout.staleness`` (spec.json), not from its label.
The hand-written reading is kept below the END marker of results.md when it is rewritten.
"""

from __future__ import annotations

import argparse
import sys
import math
import re
from pathlib import Path
from typing import Optional


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import fmt_number as _fmt, md_table as _table  # noqa: E402
from study_render import (Stage, checks_table, load_stage, planned_table, runs_line, signal_table,  # noqa: E402
                          write_keeping)  # noqa: E402

STUDY = Path(__file__).resolve().parent
PILOT = STUDY / "pilot"
SIGNALS = (("offpolicy/staleness_mean", "lag (updates)"), ("mismatch/kl", "KL(μ‖π_old) k1"),
           ("mismatch/ratio_max", "max π_old/μ"), ("mismatch/is_truncated_frac", "TIS truncated"),
           ("mismatch/is_masked_frac", "MIS masked"), ("loss/opsm_masked_frac", "OPSM masked"),
           ("algo/copc/masked_frac", "COPC masked"), ("stats/clip_frac", "clip/mask frac (DPPO: masked, A≠0)"),
           ("algo/dppo/tis_clip_frac", "DPPO π/μ > C"), ("algo/m2po/masked_frac", "M2PO masked"),
           ("algo/m2po/behaviour_masked_frac", "M2PO π_old/μ > cap"), ("algo/a3po/alpha_mean", "A-3PO α"),
           ("algo/a3po/behaviour_masked_frac", "A-3PO π_prox/μ > cap"), ("stats/kl_ref", "KL to ref"),
           ("stats/entropy", "entropy"))
"""(metric, column): the mechanisms each arm's correction acts through; "—" where an arm does not log it."""
SECONDARY_ALPHA = 0.05




def _staleness(stage: Stage) -> dict:
    """arm label -> its runs' ``rollout.staleness``."""
    return {a: int(stage.setting(a, "rollout", "staleness", 0) or 0) for a in stage.specs}


def best_two(pilot: Stage) -> tuple[list[str], list[dict]]:
    """The README's rule, applied to the pilot: among the corrections of the planned comparisons
    (their ``a`` arms) whose pilot manipulation checks pass, the two with the highest mean final
    greedy test accuracy over the pilot seeds at the confirmatory staleness; ties by the higher
    mean of the same correction at the next lower staleness of the pilot, then by label. Returns
    (the pair, the ranking rows)."""
    from rlsuite.reports import checks as checks_mod

    arms = list(dict.fromkeys(c["a"] for c in pilot.reg["comparisons"]))
    rows = []
    for a in arms:
        failed = checks_mod.failed_for(pilot.gate, "chain", [a]) if pilot.ran else ["not run"]
        x = pilot.series.get(a)
        lower = _at_staleness(pilot, a)
        y = pilot.series.get(lower) if lower else None
        rows.append({"arm": a, "n": 0 if x is None else len(x), "mean": float("nan") if x is None else float(x.mean()),
                     "tie_break": float("nan") if y is None else float(y.mean()), "tie_arm": lower or "—",
                     "checks": "; ".join(failed) or "pass"})
    eligible = [r for r in rows if r["checks"] == "pass" and r["n"] > 0]
    key = lambda r: (-r["mean"], -(r["tie_break"] if math.isfinite(r["tie_break"]) else -1.0), r["arm"])  # noqa: E731
    ranked = sorted(eligible, key=key)
    return [r["arm"] for r in ranked[:2]], sorted(rows, key=lambda r: (r["checks"] != "pass", key(r)))


def _at_staleness(stage: Stage, arm: str) -> Optional[str]:
    """The same correction's arm at the next lower staleness of the stage: ``name:corr-s<k>`` /
    ``name:s<k>`` with the suffix swapped, or the entry's on-policy arm ``name`` at staleness 0;
    None when that arm has no runs."""
    name, _, variant = arm.partition(":")
    stale = _staleness(stage)
    k = stale.get(arm)
    lower = sorted({s for s in stale.values() if k is not None and s < k}, reverse=True)
    m = re.fullmatch(r"(?:(.+)-)?s\d+", variant)
    if not lower or m is None:
        return None
    corr = m.group(1) or ""  # "tis-s8" -> "tis", "s8" -> ""
    s = lower[0]
    cand = name if s == 0 else (f"{name}:{corr}-s{s}" if corr else f"{name}:s{s}")
    return cand if cand in stage.series else None


def _reference(stage: Stage, arm: str) -> Optional[str]:
    """The on-policy reference of an arm: its entry's run at staleness 0 with no variant."""
    name = arm.split(":")[0]
    return name if name != arm and _staleness(stage).get(name, 0) == 0 and name in stage.series else None


def _mechanisms(stage: Stage) -> str:
    stale = _staleness(stage)
    return signal_table(stage, SIGNALS, sorted(stage.series, key=lambda a: (-stale.get(a, 0), a)))


def _stability(stage: Stage) -> str:
    from rlsuite.reports import stability

    t = stability.stability_summary(stage.scored.scores)
    return _table([{"arm": r.algorithm, "stable": r.stable, "flags": r.flags} for r in t.itertuples()],
                  ["arm", "stable", "flags"])


def render(study: Path = STUDY, pilot_dir: Path = PILOT, reps: int = 2000) -> str:
    from rlsuite.reports import tables

    conf, pilot = load_stage(study, reps), load_stage(pilot_dir, reps)
    lines = ["# Async-correction study: which correction keeps GRPO-family training intact at staleness 8", "",
             "Generated by `python benchmarks/async_correction/async_correction.py` from the compact run copies "
             "in `pilot/runs/` and `runs/` (pre-registered in `README.md`; specs `pilot/spec.yaml`, `spec.yaml`).", ""]
    for label, st in (("pilot", pilot), ("confirmatory", conf)):
        if st is None:
            lines += [f"The {label} stage is not registered yet.", ""]
        elif not st.ran:
            lines += [f"The {label} stage is registered at {st.reg['commit'][:7]} and has no runs yet.", ""]
        else:
            lines += [runs_line(st), ""]

    # -- confirmatory ---------------------------------------------------------------------------
    lines += ["## Planned comparisons (confirmatory; one Holm family, final greedy test accuracy, paired by seed)", ""]
    if conf is not None and conf.ran:
        lines += [planned_table(conf, pilot), "",
                  "## Manipulation checks of the confirmatory runs (fixed at registration)", "",
                  checks_table(conf), ""]
    else:
        lines += ["Not run.", ""]

    # -- secondary ------------------------------------------------------------------------------
    lines += ["## Secondary comparison: the best two corrections (pair fixed from the pilot; outside the Holm "
              "family; two-sided, unadjusted 5%)", ""]
    if pilot is not None and pilot.ran:
        pair, ranking = best_two(pilot)
        lines += [_table([{"arm": r["arm"], "pilot seeds": r["n"], "pilot mean (%)": _fmt(100 * r["mean"], 3),
                           "tie-break arm": r["tie_arm"], "its mean (%)": _fmt(100 * r["tie_break"], 3),
                           "pilot checks": r["checks"]} for r in ranking],
                         ["arm", "pilot seeds", "pilot mean (%)", "tie-break arm", "its mean (%)", "pilot checks"]), ""]
        if len(pair) == 2 and conf is not None and conf.ran and all(a in conf.series for a in pair):
            p = tables.pair_data(conf.series[pair[0]], conf.series[pair[1]])
            iv = p.interval(1 - SECONDARY_ALPHA)
            lines += [f"Pair: `{pair[0]}` vs `{pair[1]}` on the confirmatory seeds ({p.pairing}): difference "
                      f"{100 * p.diff:+.1f} points, p {_fmt(p.p('two-sided'))}, 95% interval "
                      f"[{_fmt(100 * iv.low, 3)}, {_fmt(100 * iv.high, 3)}], "
                      f"mdd {_fmt(100 * p.mdd(SECONDARY_ALPHA), 3)} points.", ""]
        else:
            lines += [f"Pair: {', '.join(f'`{a}`' for a in pair) or 'none (fewer than two eligible corrections)'}; "
                      "tested once the confirmatory runs exist.", ""]
    else:
        lines += ["Not fixed: the pilot has not run.", ""]

    # -- pilot ----------------------------------------------------------------------------------
    if pilot is not None and pilot.ran:
        base = tables._by_seed(pilot.scored.base) if len(pilot.scored.base) else None
        lines += ["## Pilot: the manipulation-check gate", "", checks_table(pilot), "",
                  "## Pilot: degradation with staleness per correction (descriptive)", "",
                  f"Base (step 0): {100 * float(base.mean()):.1f}%." if base is not None else "", "",
                  "Degradation = stale score − the on-policy reference's score (the entry at staleness 0; `grpo` "
                  "for the GRPO-based corrections), paired by seed; 95% sign-flip interval, unadjusted.", ""]
        rows = []
        stale = _staleness(pilot)
        for arm in sorted(pilot.series, key=lambda a: (a.split(":")[0], stale.get(a, 0), a)):
            x = pilot.series[arm]
            ref = _reference(pilot, arm)
            deg = ""
            if ref:
                pr = tables.pair_data(x, pilot.series[ref])
                iv = pr.interval(0.95)
                deg = f"{100 * pr.diff:+.1f} [{_fmt(100 * iv.low, 3)}, {_fmt(100 * iv.high, 3)}]"
            rows.append({"arm": arm, "staleness": stale.get(arm, "—"), "n": len(x),
                         "mean (%)": f"{100 * x.mean():.1f}", "sd": f"{100 * x.std(ddof=1):.1f}" if len(x) > 1 else "—",
                         "reference": ref or "", "degradation (pp)": deg,
                         "per seed (%)": " ".join(f"{100 * v:.1f}" for v in x.to_numpy())})
        lines += [_table(rows, ["arm", "staleness", "n", "mean (%)", "sd", "reference", "degradation (pp)",
                                "per seed (%)"]), ""]

    # -- stability and mechanisms ---------------------------------------------------------------
    for label, st in (("pilot", pilot), ("confirmatory", conf)):
        if st is not None and st.ran:
            lines += [f"## Stability per arm ({label}; `rlsuite report`'s flags)", "", _stability(st), "",
                      f"## How much each correction acts ({label}; mean over runs of each run's mean after the first "
                      "20% of steps)", "", _mechanisms(st), ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=STUDY, help="the confirmatory study folder")
    ap.add_argument("--pilot", type=Path, default=PILOT, help="the pilot's study folder")
    ap.add_argument("--best-two", action="store_true", help="print the pilot's best two corrections and exit")
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args(argv)
    if args.best_two:
        pilot = load_stage(args.pilot, args.reps)
        if pilot is None or not pilot.ran:
            print("the pilot has not run")
            return 1
        pair, ranking = best_two(pilot)
        for r in ranking:
            print(f"{r['arm']}\tn={r['n']}\tmean={r['mean']:.4f}\ttie={r['tie_arm']}:{r['tie_break']:.4f}\t{r['checks']}")
        print("best two:", " vs ".join(pair) if len(pair) == 2 else "fewer than two eligible")
        return 0
    out = args.study / "results.md"
    write_keeping(out, render(args.study, args.pilot, args.reps))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
