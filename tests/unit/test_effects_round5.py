"""The fifth effects round's pre-registered analysis (``benchmarks/effects/round5/round5.py``): which
effects the probe's checks let through, the Holm family over the primaries and the seed plan, by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.conftest import load_script



@pytest.fixture(scope="module")
def r5():
    return load_script("benchmarks/effects/round5/round5.py", "effects_round5_script")


def test_probe_checks_gate_the_effects_they_cover(r5):
    def row(arm, signal, result):
        return {"task": "chain", "arm": arm, "check": f"{arm}: mean {signal} after 20% >= 0.1", "n_runs": 2,
                "n_pass": 2 if result == "pass" else 0, "share_needed": 1.0, "values": "", "result": result}
    table = pd.DataFrame([row("grpo", "reward/mean", "pass"), row("grpo", "group/mixed_frac", "pass"),
                          row("grpo", "stats/entropy", "fail"),
                          row("dapo:mb4-symmetric", "stats/clip_frac_high", "fail"),
                          row("dapo:mb4-symmetric", "stats/entropy", "pass")])
    got = r5.engaged(table)
    assert {k: v["engages"] for k, v in got.items()} == {
        "length": True, "std_norm": True, "batch_size": True, "entrocraft": False, "clip_higher": False}
    assert got["entrocraft"]["failed"] == ["grpo: mean stats/entropy after 20% >= 0.1 (fail)"]
    assert len(got["clip_higher"]["failed"]) == 1 and "clip_frac_high" in got["clip_higher"]["failed"][0]
    # a check the spec lacks is a failure, named, never a pass; an effect with none of its checks was not probed
    got = r5.engaged(table[table["check"].str.contains("reward/mean")])
    assert not got["length"]["engages"] and "grpo group/mixed_frac: no such check" in got["length"]["failed"]
    assert set(got) == {"length", "std_norm", "batch_size"}
    # P2 probes effect 2 alone, with its own arm label
    p2 = pd.DataFrame([row("dapo:mb4e4-symmetric", "stats/clip_frac_high", "pass"),
                       row("dapo:mb4e4-symmetric", "stats/entropy", "pass")])
    assert r5.engaged(p2) == {"clip_higher": {"engages": True, "failed": []}}


def test_family_is_holm_over_the_effects_with_seeds(r5):
    # 8 positive differences: the one-sided sign-flip p is 1/256 (only the observed signs reach the mean);
    # seven +1 and one -1: sums >= 6 need at most one negative sign, 1 + 8 arrangements: p = 9/256
    diffs = {"length": {s: float(s + 1) for s in range(8)},
             "clip_higher": {s: (1.0 if s < 7 else -1.0) for s in range(8)}}
    rows = {r["effect"]: r for r in r5.family(diffs)}
    assert rows["length"]["p"] == pytest.approx(1 / 256) and rows["clip_higher"]["p"] == pytest.approx(9 / 256)
    assert rows["length"]["p_holm"] == pytest.approx(2 / 256)      # the smaller p times m = 2
    assert rows["clip_higher"]["p_holm"] == pytest.approx(9 / 256)  # times 1, above the running max
    assert rows["length"]["verdict"] == rows["clip_higher"]["verdict"] == "confirmed"
    assert rows["staleness"]["verdict"] == "not run" and math.isnan(rows["staleness"]["p_holm"])
    assert rows["clip_higher"]["mean"] == pytest.approx(0.75)
    # with a third effect whose p is 1/2 the family is m = 3: 9/256 x 2 = 0.0703 is no longer confirmed
    diffs["entrocraft"] = {0: 1.0, 1: -1.0}
    rows = {r["effect"]: r for r in r5.family(diffs)}
    assert rows["clip_higher"]["p_holm"] == pytest.approx(18 / 256)
    assert rows["clip_higher"]["verdict"] == "not confirmed"
    assert rows["length"]["p_holm"] == pytest.approx(3 / 256)


def test_plan_never_below_the_floor_of_eight(r5):
    # paired sd exactly 1 (deviations -1, 1, -1, 1, 0) against a 5-token SESOI: the test's own floor
    # (one-sided at 0.05 / 2: 2^6 = 64 > 40) is 6 seeds, the pre-registered minimum 8
    (row,) = r5.plan({"length": dict(enumerate([4.0, 6.0, 4.0, 6.0, 5.0])), "clip_higher": {0: 1.0}}, m=2)
    assert row["effect"] == "length" and row["sd"] == pytest.approx(1.0) and row["pilot_mean"] == pytest.approx(5.0)
    assert row["n_plan"] == 6 and row["n_run"] == 8
    # a noisy pilot plans more than the floor
    (row,) = r5.plan({"length": dict(enumerate([0.0, 10.0, 0.0, 10.0, 5.0]))}, m=6)
    assert row["sd"] == pytest.approx(5.0) and row["n_run"] == row["n_plan"] > 8


def _runs(rows, tail):
    """A report's tables for hand-made runs: ``rows`` (run_id, arm, seed), ``tail`` {run_id: (len/wrong_mean
    of every step, final test greedy accuracy)}; four steps a run, so the last quarter is one step."""
    from types import SimpleNamespace

    runs = pd.DataFrame([{"run_id": r, "algorithm": a, "seed": s, "state": "completed"} for r, a, s in rows])
    metrics = pd.DataFrame([{"run_id": r, "step": t, "len/wrong_mean": tail[r][0] + (30.0 if t < 3 else 0.0)}
                            for r, _, _ in rows for t in range(4)])
    evals = pd.DataFrame([{"run_id": r, "metric": "greedy_acc", "split": "test", "final": True, "value": tail[r][1]}
                          for r, _, _ in rows])
    return SimpleNamespace(runs=runs, metrics=metrics, evals=evals)


def test_secondaries_pair_by_seed_outside_the_family(r5):
    chain = _runs([("g0", "grpo", 0), ("g1", "grpo", 1), ("g2", "grpo", 2),
                   ("c0", "grpo:constant-norm", 0), ("c1", "grpo:constant-norm", 1), ("c2", "grpo:constant-norm", 2),
                   ("c9", "grpo:constant-norm", 9),  # no GRPO partner: left out of the pairs
                   ("h0", "dapo:mb4e4", 0), ("h1", "dapo:mb4e4", 1),
                   ("s0", "dapo:mb4e4-symmetric", 0), ("s1", "dapo:mb4e4-symmetric", 1)],
                  {"g0": (50.0, 0.3), "g1": (60.0, 0.3), "g2": (70.0, 0.3), "c0": (40.0, 0.3), "c1": (50.0, 0.3),
                   "c2": (66.0, 0.3), "c9": (0.0, 0.3), "h0": (0.0, 0.5), "h1": (0.0, 0.6), "s0": (0.0, 0.4),
                   "s1": (0.0, 0.6)})
    battery = _runs([("b0", "grpo", 0), ("b1", "grpo", 1), ("d0", "dr_grpo", 0), ("d1", "dr_grpo", 1)],
                    {"b0": (20.0, 0.2), "b1": (22.0, 0.2), "d0": (21.0, 0.2), "d1": (25.0, 0.2)})
    rows = r5.secondaries(chain, battery)
    assert [r["effect"] for r in rows] == ["length", "length", "clip_higher"]
    cn, bat, clip = rows
    # the last quarter's len/wrong_mean (the first three steps, 30 tokens longer, are outside it): 10, 10, 4
    assert cn["n"] == 3 and cn["mean"] == pytest.approx(8.0) and cn["lo"] <= 8.0 <= cn["hi"]
    assert "constant-norm" in cn["secondary"]
    # battery: 20 - 21 and 22 - 25, GRPO minus Dr. GRPO
    assert bat["n"] == 2 and bat["mean"] == pytest.approx(-2.0) and "battery" in bat["secondary"]
    # effect 2 at P2's arms: final accuracy 0.5 - 0.4 and 0.6 - 0.6
    assert clip["n"] == 2 and clip["mean"] == pytest.approx(0.05)
    for r in rows:
        assert r["reading"] in {"interval above 0", "interval below 0", "interval contains 0"}
    # absent arms and no battery runs: "not run", never a number
    rows = r5.secondaries(_runs([("g0", "grpo", 0)], {"g0": (50.0, 0.3)}), None)
    assert [r["reading"] for r in rows] == ["not run"] * 3
    assert all(math.isnan(r["mean"]) for r in rows)


def test_a_missing_sweep_or_battery_is_one_error_naming_the_options(r5, tmp_path, capsys):
    (tmp_path / "effects_r5_pilot").mkdir()
    assert r5.main(["family", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no sweep 'effects_r5'" in err and "effects_r5_pilot" in err and "Traceback" not in err
    (tmp_path / "effects_r5").mkdir()
    assert r5.main(["secondary", str(tmp_path), "--battery", str(tmp_path / "nope")]) == 2
    assert "--battery" in capsys.readouterr().err
