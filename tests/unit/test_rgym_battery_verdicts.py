"""The reasoning-gym battery's pilot verdicts (``benchmarks/rgym_battery/rgym_battery.py``): when a gain
counts as learning, when it is one constant reply, and the per-dataset signal-to-noise figure."""

from __future__ import annotations

import math

import pytest

from tests.conftest import load_script



@pytest.fixture(scope="module")
def battery():
    return load_script("benchmarks/rgym_battery/rgym_battery.py", "rgym_battery_script")


def off(base_rest: int, rest: int, top: int, n_top: int, n_rest: int = 140) -> dict:
    """A dataset's scores off the final policy's best gold: the base's and the final policy's problems
    right there (of ``n_rest``), and its score on that gold's own ``n_top`` problems."""
    return {"pgold": "3", "p_base_rest": (base_rest, n_rest), "p_rest": (rest, n_rest), "p_top": (top, n_top)}


def run(seed: int, before: float, after: float, o: dict) -> dict:
    return {"seed": seed, "per": {"add_2d": (before, after)}, "off": {"add_2d": o}, "steps": 48,
            "reward_first": 0.1, "reward_last": 0.4, "mixed": 0.3, "no_update": 10, "errors": 0,
            "wall_s": 600.0, "cpu_s": 590.0}


@pytest.mark.parametrize("offs, mean, se, verdict", [
    # both seeds rise off their best gold (10 → 53 and 68 of 140)
    ([off(10, 53, 3, 4), off(10, 68, 4, 4)], 36.0, 5.0, "yes"),
    # both answer their best gold right on 33/33 and lost every problem elsewhere: one reply
    ([off(12, 0, 33, 33), off(12, 0, 33, 33)], 12.0, 4.2, "constant"),
    # one seed learned; the other fell off its best gold without converging on one reply
    ([off(10, 53, 3, 4), off(10, 9, 1, 5)], 16.7, 4.1, "not on every seed"),
    # a gain within 2 SE, whatever the seeds did
    ([off(10, 14, 1, 4), off(10, 16, 1, 4)], 4.3, 4.0, "not shown"),
])
def test_the_pilot_verdict(battery, offs, mean, se, verdict):
    runs = [run(100 + i, 0.067, 0.067 + mean / 100, o) for i, o in enumerate(offs)]
    assert battery._learns(runs, "add_2d", mean, se) == verdict


def test_the_pilot_table_reports_the_gain_its_se_and_their_ratio(battery, monkeypatch):
    monkeypatch.setitem(battery.CANDIDATES, "add_2d", ("arithmetic", "basic_arithmetic:min_terms=2"))
    runs = [run(100, 0.067, 0.373, off(10, 53, 3, 4)), run(101, 0.067, 0.480, off(10, 68, 4, 4))]
    text = battery.render_pilot(runs, ["add_2d"], 150, ["pilot"], 0.7, 1536)
    row = next(x for x in text.splitlines() if x.startswith("| add_2d |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = [c.strip() for c in next(x for x in text.splitlines() if x.startswith("| label |")).strip("|").split("|")]
    got = dict(zip(header, cells))
    mean = (30.6 + 41.3) / 2
    pbar = (0.067 + 0.067 + mean / 100) / 2
    se = 100 * math.sqrt(2 * pbar * (1 - pbar) / 150)
    assert float(got["mean gain"]) == pytest.approx(mean, abs=0.06)
    assert float(got["± SE"]) == pytest.approx(se, abs=0.06)
    assert float(got["S/N"]) == pytest.approx(mean / se, abs=0.06)
    assert float(got["sd"]) == pytest.approx(math.sqrt(((41.3 - 30.6) / 2) ** 2 * 2), abs=0.06)
    assert got["learns"] == "yes"
    assert "1180 CPU s" not in text and "590 CPU s" in text
    assert "Pooled over" not in text  # one dataset: no composite line


def test_the_pilot_table_pools_a_mixture_as_the_composite_scores_it(battery, monkeypatch):
    monkeypatch.setitem(battery.CANDIDATES, "add_2d", ("arithmetic", "basic_arithmetic:min_terms=2"))
    monkeypatch.setitem(battery.CANDIDATES, "sort", ("ordering", "word_sorting:min_words=2"))
    runs = [run(100, 0.1, 0.3, off(10, 53, 3, 4)), run(101, 0.1, 0.4, off(10, 68, 4, 4))]
    for r, (b, a) in zip(runs, [(0.0, 0.2), (0.0, 0.0)]):
        r["per"]["sort"], r["off"]["sort"] = (b, a), off(0, 20, 1, 1)
    text = battery.render_pilot(runs, ["add_2d", "sort"], 150, ["pilot"], 0.7, 3072)
    # seed 100: (+20 + 20) / 2 = +20; seed 101: (+30 + 0) / 2 = +15; mean +17.5, sd 3.5
    assert ("before 0.050; gain by seed +20.0, +15.0; mean +17.5, sd over seeds 3.5 points." in text)
