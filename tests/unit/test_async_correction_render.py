"""``benchmarks/async_correction/async_correction.py``: the pre-registered rule that picks the best two
corrections from the pilot (``best_two``) and the arm at the next lower staleness it breaks ties with
(``_at_staleness``), on a hand-made stage (final accuracies by seed written out below)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import load_script

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_BENCH))  # the script imports the shared modules (common.py, study_render.py) by name
ac = load_script("benchmarks/async_correction/async_correction.py", "async_correction_bench")


def _stage(series: dict[str, list[float]], staleness: dict[str, int], failing: tuple[str, ...] = ()):
    from study_render import Stage

    s = Stage("async_correction_pilot", {"comparisons": [{"a": a, "b": "grpo:s8"} for a in
                                                        ("grpo:tis-s8", "grpo:mis-s8", "copc:s8", "dppo:s8")]},
              Path("."))
    s.scored = object()  # ran
    s.series = {a: pd.Series(v, index=[f"seed:{k}" for k in range(len(v))]) for a, v in series.items()}
    s.specs = {a: {"rollout": {"staleness": k}} for a, k in staleness.items()}
    s.gate = pd.DataFrame([{"task": "chain", "arm": a, "check": f"{a}: acts",
                            "result": "fail" if a in failing else "pass", "n_pass": 0 if a in failing else 5,
                            "n_runs": 5} for a in series])
    return s


STALE = {"grpo": 0, "grpo:s8": 8, "grpo:tis-s2": 2, "grpo:tis-s8": 8, "grpo:mis-s2": 2, "grpo:mis-s8": 8,
         "copc": 0, "copc:s2": 2, "copc:s8": 8, "dppo": 0, "dppo:s8": 8}


def test_the_best_two_are_the_highest_mean_at_staleness_8_among_the_passing():
    series = {"grpo": [0.5, 0.5], "grpo:s8": [0.2, 0.3], "grpo:tis-s2": [0.4, 0.4], "grpo:tis-s8": [0.40, 0.44],
              "grpo:mis-s2": [0.5, 0.5], "grpo:mis-s8": [0.30, 0.34], "copc": [0.5, 0.5], "copc:s2": [0.45, 0.45],
              "copc:s8": [0.50, 0.52], "dppo": [0.5, 0.5], "dppo:s8": [0.60, 0.62]}
    # means at staleness 8: dppo 0.61 (its check fails: not eligible), copc 0.51, tis 0.42, mis 0.32
    pair, rows = ac.best_two(_stage(series, STALE, failing=("dppo:s8",)))
    assert pair == ["copc:s8", "grpo:tis-s8"]
    by = {r["arm"]: r for r in rows}
    assert by["copc:s8"]["mean"] == pytest.approx(0.51) and by["copc:s8"]["tie_arm"] == "copc:s2"
    assert by["dppo:s8"]["checks"].startswith("dppo:s8: acts (fail")
    assert by["dppo:s8"]["tie_arm"] == "—"  # the pilot's next lower staleness is 2 and dppo has no s2 arm here
    assert rows[-1]["arm"] == "dppo:s8"  # failing arms are listed last


def test_a_tie_at_staleness_8_goes_to_the_better_arm_at_the_next_lower_staleness():
    series = {"grpo": [0.5], "grpo:s8": [0.2], "grpo:tis-s2": [0.40], "grpo:tis-s8": [0.45],
              "grpo:mis-s2": [0.48], "grpo:mis-s8": [0.45], "copc": [0.5], "copc:s2": [0.30], "copc:s8": [0.45],
              "dppo": [0.5], "dppo:s8": [0.10]}
    pair, _ = ac.best_two(_stage(series, STALE))
    assert pair == ["grpo:mis-s8", "grpo:tis-s8"]  # 0.45 each for three; s2: mis 0.48 > tis 0.40 > copc 0.30
    # with the tie-break arms equal too, the label decides
    series["grpo:tis-s2"] = [0.48]
    assert ac.best_two(_stage(series, STALE))[0] == ["grpo:mis-s8", "grpo:tis-s8"]
    series["copc:s2"] = [0.48]
    assert ac.best_two(_stage(series, STALE))[0] == ["copc:s8", "grpo:mis-s8"]


def test_next_lower_staleness_swaps_the_suffix_or_falls_back_to_the_entry():
    series = {a: [0.5] for a in STALE}
    st = _stage(series, STALE)
    assert ac._at_staleness(st, "grpo:tis-s8") == "grpo:tis-s2"
    assert ac._at_staleness(st, "copc:s8") == "copc:s2"
    assert ac._at_staleness(st, "grpo:tis-s2") == "grpo"  # staleness 0: the entry's on-policy arm
    assert ac._at_staleness(st, "dppo:s8") is None  # dppo has no s2 arm here
    assert ac._at_staleness(st, "grpo") is None  # nothing lower than 0
    del series["grpo:tis-s2"]
    no_tis2 = {k: v for k, v in STALE.items() if k != "grpo:tis-s2"}
    assert ac._at_staleness(_stage(series, no_tis2), "grpo:tis-s8") is None
    # an arm without runs never wins: n = 0 is not eligible, however the others rank
    series = {a: [0.5] for a in STALE} | {"dppo:s8": []}
    pair, rows = ac.best_two(_stage(series, STALE))
    (d,) = [r for r in rows if r["arm"] == "dppo:s8"]
    assert d["n"] == 0 and math.isnan(d["mean"]) and "dppo:s8" not in pair and len(pair) == 2
