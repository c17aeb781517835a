"""``benchmarks/effects/effects.py``: the pre-registered reductions, by hand — samples-to-target with
its censoring, the paired difference over shared seeds, and the verdict from the interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import load_script

effects = load_script("benchmarks/effects/effects.py", "effects_bench")


def test_samples_to_target_uses_the_trailing_mean_and_censors_at_the_budget():
    xs = np.array([128, 256, 384, 512, 640.0])
    ys = np.array([0.1, 0.5, 0.2, 0.6, 0.7])
    # trailing means (window 2): 0.1, 0.3, 0.35, 0.4, 0.65
    assert effects.samples_to_target(xs, ys, 0.35, smooth=2) == (384.0, True)
    assert effects.samples_to_target(xs, ys, 0.6, smooth=2) == (640.0, True)
    assert effects.samples_to_target(xs, ys, 0.9, smooth=2) == (640.0, False)   # never: the budget, flagged
    x, hit = effects.samples_to_target(np.array([]), np.array([]), 0.5)
    assert math.isnan(x) and not hit


def test_paired_difference_over_shared_seeds_only():
    x = {0: 3.0, 1: 5.0, 2: 4.0, 3: 9.0}
    y = {0: 1.0, 1: 2.0, 2: 2.0, 4: 0.0}        # seed 3 and seed 4 have no partner
    d = effects.paired(x, y)
    assert d["seeds"] == [0, 1, 2] and d["n"] == 3
    assert d["mean"] == pytest.approx((2 + 3 + 2) / 3)
    assert d["lo"] <= d["mean"] <= d["hi"] and d["method"]
    assert d["per_seed"] == {0: 2.0, 1: 3.0, 2: 2.0}
    assert math.isnan(effects.paired({0: 1.0}, {0: 0.0})["mean"])   # one pair: no interval


@pytest.mark.parametrize("lo, hi, sign, want", [
    (0.1, 0.5, +1, "reproduced"), (-0.5, -0.1, +1, "reversed"), (-0.1, 0.5, +1, "not reproduced"),
    (-0.5, -0.1, -1, "reproduced"), (0.1, 0.5, -1, "reversed"),
])
def test_verdict_reads_only_the_interval(lo, hi, sign, want):
    assert effects.verdict({"mean": (lo + hi) / 2, "lo": lo, "hi": hi}, sign) == want
    assert effects.verdict({"mean": float("nan"), "lo": lo, "hi": hi}, sign) == "not run"


def test_the_effects_sweep_holds_every_arm_the_analyses_read():
    from rlsuite.sweeps.spec import load

    arms = {a.name if not a.variant else f"{a.name}:{a.variant}" for a in load("effects").algorithms}
    read = {"grpo", "dr_grpo", "grpo:constant-norm", "dapo:mb4", "dapo:mb4-symmetric", "grpo:no-std",
            "grpo:stale4", "dppo", "dppo:stale4", "drpo", "drpo:stale4", "entrocraft:linear-band",
            *effects.BATCH_ARMS.values()}
    assert read == arms
    band = effects._entrocraft_band()
    assert band["lower_start"] < band["upper_start"] and band["lower_end"] < band["upper_end"]
