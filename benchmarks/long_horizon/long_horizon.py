"""Long-horizon credit (issue 42): render the pre-registered study in ``benchmarks/long_horizon/``
(spec, study.json, compact run copies) and its pilots into ``results.md``.

    python benchmarks/long_horizon/long_horizon.py   # reads the study folder and pilot copies, rewrites results.md

What it writes, from the compact copies alone (no run folder is needed):

* the planned comparisons exactly as ``rlsuite report`` computes them (the registered Holm family,
  randomization tests, intervals at the Holm level) with the manipulation checks beside them;
* per arm: final greedy test accuracy per seed and its gain over the base;
* per arm: final greedy test accuracy per asked hop count ``h`` (read from each run's
  ``problems.jsonl`` and the task's questions, so runs from before the ``acc_h<h>`` eval metrics
  existed read the same way): which hop counts the policies learned to stop at;
* how much GiGPO's mechanism acts per arm (turns an episode, turns in a shared anchor state, the
  step advantage's magnitude, KL to the reference, entropy);
* the pilots' runs (``pilot2_runs/``, ``pilot3_runs/``): the same per-seed and per-h tables;
* CPU-hours, commits and machines of the runs.

The hand-written reading is kept below the END marker of results.md when it is rewritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import md_table as _table  # noqa: E402
from study_render import checks_table, load_stage, planned_table, runs_line, signal_table, write_keeping  # noqa: E402

STUDY = Path(__file__).resolve().parent
PILOTS = (STUDY / "pilot2_runs", STUDY / "pilot3_runs")
SIGNALS = (("algo/gigpo/turns_mean", "turns/episode"), ("algo/gigpo/shared_turn_share", "shared-state turns"),
           ("algo/gigpo/step_adv_abs_mean", "|step adv|"), ("stats/kl_ref", "KL to ref"),
           ("stats/entropy", "entropy"), ("reward/mean", "train reward"))
"""(metric, column): what each arm's runs did, as means after the first 20% of steps."""


def hop_of(spec: dict) -> dict[str, int]:
    """Problem key -> asked hop count of the test questions of the task a run's ``spec.json`` names."""
    from rlsuite.suite.evaluate import problem_key
    from rlsuite.tasks.hops_toy import HopsToy, HopsToyConfig

    names = {f.name for f in dataclasses.fields(HopsToyConfig)}
    task = HopsToy(HopsToyConfig(**{k: v for k, v in spec["task"].items() if k in names}))
    return {problem_key(task.prompt(e)): e.hops for e in task.splits()["test"]}


def per_run(runset) -> pd.DataFrame:
    """One row per completed run of ``runset`` (a :class:`rlsuite.reports.load.RunSet`): arm label,
    seed, the base's and the final policy's greedy test accuracy, and the final accuracy per asked hop
    count (``h<k>`` columns; ``base h<k>`` the base's)."""
    from rlsuite.suite.runfolder import read_jsonl

    rows, maps = [], {}
    for r in runset.runs.itertuples():
        d = Path(r.path)
        if r.state != "completed" or not (d / "problems.jsonl").is_file():
            continue
        spec = runset.specs[r.run_id]
        key = json.dumps(spec["task"], sort_keys=True)
        if key not in maps:
            maps[key] = hop_of(spec)
        hop = maps[key]
        before: dict[int, list[int]] = {}
        after: dict[int, list[int]] = {}
        for x in read_jsonl(d / "problems.jsonl"):
            if x.get("split") != "test" or x["problem"] not in hop:
                continue
            (after if x.get("final", True) else before).setdefault(hop[x["problem"]], []).append(int(x["greedy"]))
        row = {"arm": r.algorithm, "seed": int(r.seed), "run": d.name, "before": _acc(before), "after": _acc(after)}
        row.update({f"h{h}": sum(v) / len(v) for h, v in sorted(after.items())})
        row.update({f"base h{h}": sum(v) / len(v) for h, v in sorted(before.items())})
        rows.append(row)
    return pd.DataFrame(rows)


def pilots_frame(roots: tuple[Path, ...]) -> pd.DataFrame:
    """:func:`per_run` over every pilot folder that holds runs."""
    from rlsuite.reports.load import load_runs

    frames = [per_run(load_runs(r)) for r in roots if r.is_dir() and any(r.glob("*/spec.json"))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _acc(by_h: dict[int, list[int]]) -> float:
    n = sum(len(v) for v in by_h.values())
    return sum(sum(v) for v in by_h.values()) / n if n else float("nan")


def _pct(v: float) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def arm_tables(frame: pd.DataFrame) -> list[str]:
    """Per arm: seeds, mean final test accuracy and gain, per seed; then per arm the mean final
    accuracy per asked hop count (with the base's in the first row)."""
    if frame.empty:
        return ["No finished run.", ""]
    hs = sorted(int(c[1:]) for c in frame.columns if c.startswith("h") and c[1:].isdigit())
    rows = []
    for arm, g in frame.groupby("arm", sort=True):
        g = g.sort_values("seed")
        gain = g["after"] - g["before"]
        rows.append({"arm": arm, "n": len(g), "before (%)": _pct(g["before"].mean()),
                     "after (%)": _pct(g["after"].mean()),
                     "sd (pp)": _pct(g["after"].std(ddof=1)) if len(g) > 1 else "—",
                     "gain (pp)": f"{100 * gain.mean():+.1f}",
                     "per seed (%)": " ".join(f"s{s}: {_pct(v)}" for s, v in zip(g["seed"], g["after"]))})
    out = [_table(rows, ["arm", "n", "before (%)", "after (%)", "sd (pp)", "gain (pp)", "per seed (%)"]), ""]
    cols = [f"h = {h}" for h in hs]
    hrows = [{"arm": "base (step 0, all runs)", **{f"h = {h}": _pct(frame[f"base h{h}"].mean()) for h in hs},
              "runs": len(frame)}]
    for arm, g in frame.groupby("arm", sort=True):
        hrows.append({"arm": arm, **{f"h = {h}": _pct(g[f"h{h}"].mean()) for h in hs}, "runs": len(g)})
    out += ["Final greedy test accuracy (%) per asked hop count, mean over the arm's runs:", "",
            _table(hrows, ["arm"] + cols + ["runs"]), ""]
    return out


def render(study: Path = STUDY, pilots: tuple[Path, ...] = PILOTS, reps: int = 2000) -> str:
    stage = load_stage(study, reps)
    lines = ["# Long-horizon credit: GiGPO vs trajectory-level GRPO on `hops_toy`", "",
             "Generated by `python benchmarks/long_horizon/long_horizon.py` from the compact run copies in `runs/` "
             "(pre-registered in `study.json`; spec `spec.yaml`) and the pilots' copies.", ""]
    lines += ["## Study", ""]
    if stage is None:
        lines += ["Not registered yet.", ""]
    elif not stage.ran:
        lines += [f"Registered at {stage.reg['commit'][:7]}; no runs yet.", ""]
    else:
        done, expected = len(stage.runset.runs), len(stage.reg.get("runs", []))
        interim = ([f"**Interim: {done} of {expected} registered runs.** The table below is the registered test "
                    "on the seeds finished so far, not the study's verdict (the runs go seed by seed, both arms "
                    "of a seed before the next); the study is complete at all of its seeds.", ""]
                   if done < expected else [])
        lines += [runs_line(stage), ""] + interim + [
                  "### Planned comparisons (one Holm family, final greedy test accuracy, paired by seed)", "",
                  planned_table(stage), "",
                  "### Manipulation checks (fixed at registration)", "", checks_table(stage), "",
                  "### Per arm", ""]
        lines += arm_tables(per_run(stage.runset))
        lines += ["### What each arm's runs did (mean over runs of each run's mean after the first 20% of steps)", "",
                  signal_table(stage, SIGNALS), ""]
    lines += ["## Pilots (descriptive; seeds 0–4, not study seeds)", "",
              f"Runs: {', '.join(f'`{r.name}/`' for r in pilots if r.is_dir())}.", ""]
    lines += arm_tables(pilots_frame(pilots))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=STUDY)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--print", action="store_true", help="print instead of rewriting results.md")
    args = ap.parse_args(argv)
    text = render(args.study, tuple(args.study / p.name for p in PILOTS), args.reps)
    if args.print:
        print(text)
        return 0
    write_keeping(args.study / "results.md", text)
    print(args.study / "results.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
