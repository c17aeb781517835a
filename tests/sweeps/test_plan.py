"""``rlsuite sweep plan``: seeds and CPU-hours per planned comparison from a pilot, the manipulation
checks that gate it, and the errors a user meets; the checks' aggregations by hand."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rlsuite.reports import checks, synthetic
from rlsuite.suite.cli import main
from rlsuite.sweeps.spec import Check

SPEC = """name: pilot
tasks: [arith]
algorithms: [grpo, comppo]
seeds: 3
budget: {{samples: 64}}
comparisons: [{{a: comppo, b: grpo, direction: greater, smallest_effect: {effect}}}]
checks: [{{arm: comppo, signal: stats/clip_frac, value: {clip}}}]
"""


def _pilot(tmp_path, seeds=range(6)):
    arms = [synthetic.Arm(algo="comppo", asymptote=0.62), synthetic.Arm(algo="grpo", asymptote=0.55)]
    synthetic.write_root(tmp_path / "pilot", arms, ["arith"], list(seeds))
    return tmp_path / "pilot"


def _spec(tmp_path, effect=0.02, clip=0.05):
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.format(effect=effect, clip=clip))
    return p


def _plan(capsys, *args):
    code = main(["sweep", "plan", *map(str, args), "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


def test_a_pilot_gives_seeds_to_run_and_cpu_hours(tmp_path, capsys):
    code, p = _plan(capsys, _spec(tmp_path), "--pilot", _pilot(tmp_path))
    assert code == 0 and p["m"] == 1 and p["alpha_first_step"] == pytest.approx(0.05)
    (row,) = p["rows"]
    assert row["status"] == "planned" and row["pilot_pairs"] == 6 and row["comparison"] == "comppo > grpo"
    assert row["seeds_low"] <= row["seeds_at_sd"] <= row["seeds_high"]
    assert row["seeds_to_run"] >= row["seeds_at_sd"] and row["seeds_to_run"] >= row["floor"] == 5  # one-sided
    assert row["sd_80_low"] < row["pilot_sd"] < row["sd_80_high"]
    assert row["cpu_hours"] > 0
    assert p["checks"][0]["result"] == checks.PASS and p["checks"][0]["n_pass"] == 6
    code = main(["sweep", "plan", str(_spec(tmp_path)), "--pilot", str(tmp_path / "pilot")])
    text = capsys.readouterr().out
    assert code == 0 and "| arith | comppo > grpo | 0.02 | 6 |" in text and "| planned |" in text


def test_a_failed_check_makes_the_comparison_not_testable(tmp_path, capsys):
    code, p = _plan(capsys, _spec(tmp_path, clip=0.5), "--pilot", _pilot(tmp_path))  # clip_frac is 0.1
    assert code == 0
    (row,) = p["rows"]
    assert row["status"].startswith("not testable at this preset: comppo: mean stats/clip_frac >= 0.5")
    assert "seeds_to_run" not in row


def test_a_small_pilot_is_not_planned(tmp_path, capsys):
    code, p = _plan(capsys, _spec(tmp_path), "--pilot", _pilot(tmp_path, seeds=range(3)))
    assert code == 0 and p["rows"][0]["status"] == "pilot too small: 3 paired seed(s), a plan needs ≥ 5"


def test_bad_input_is_exit_2(tmp_path, capsys):
    pilot = _pilot(tmp_path)
    code, err = _plan(capsys, _spec(tmp_path, effect=0), "--pilot", pilot)
    assert code == 2 and "smallest effect of interest > 0" in err
    bare = tmp_path / "bare.yaml"
    bare.write_text("name: b\ntasks: [arith]\nalgorithms: [grpo]\nseeds: 3\nbudget: {samples: 64}\n")
    code, err = _plan(capsys, bare, "--pilot", pilot)
    assert code == 2 and "plans no comparisons" in err
    code, err = _plan(capsys, _spec(tmp_path), "--pilot", tmp_path / "nope")
    assert code == 2 and "no such folder" in err


def _battery_pilot(tmp_path):
    """Battery runs of comppo and grpo on seeds 0-5 with datasets a and b (pooled = their mean), final
    test scores set by hand: a: grpo 0.50 + 0.01 s, comppo 0.55 + 0.02 s; b: grpo 0.2, comppo 0.2 + 0.03 (s odd)."""
    finals = {"grpo": lambda s: (0.50 + 0.01 * s, 0.2), "comppo": lambda s: (0.55 + 0.02 * s, 0.2 + 0.03 * (s % 2))}
    for algo, f in finals.items():
        for s in range(6):
            folder = synthetic.write_run(tmp_path / "pilot", "rg", synthetic.Arm(algo=algo, seed_sd=0.0, noise=0.0), s)
            a, b = f(s)
            spec = json.loads((folder / "spec.json").read_text())
            spec["task"]["datasets"] = ["a:size=1", "b:size=1"]  # a mixture, as reasoning_gym's spec lists it
            (folder / "spec.json").write_text(json.dumps(spec))
            rows = [{"step": 0, "split": sp, "budget/samples": 0, "eval/rg/greedy_acc": 0.3,
                     "eval/rg/greedy_acc_a": 0.4, "eval/rg/greedy_acc_b": 0.2} for sp in ("val", "test")]
            rows.append({"step": 20, "split": "test", "budget/samples": 2560, "final": True,
                         "eval/rg/greedy_acc": (a + b) / 2, "eval/rg/greedy_acc_a": a, "eval/rg/greedy_acc_b": b})
            (folder / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "pilot"


def test_a_battery_pilot_is_planned_as_the_report_scores_it(tmp_path, capsys):
    pilot = _battery_pilot(tmp_path)
    # by default each dataset is a task, as in `rlsuite report`: a family of 1 comparison × 2 datasets
    code, p = _plan(capsys, _spec(tmp_path), "--pilot", pilot)
    assert code == 0 and p["m"] == 2 and p["alpha_first_step"] == pytest.approx(0.025)
    rows = {r["task"]: r for r in p["rows"]}
    assert set(rows) == {"rg[a]", "rg[b]"}
    assert rows["rg[a]"]["pilot_diff"] == pytest.approx(0.075)  # mean of 0.05 + 0.01 s over s = 0..5
    assert rows["rg[b]"]["pilot_diff"] == pytest.approx(0.015)  # 0.03 on the three odd seeds
    assert "rg[a], rg[b]" in p["notes"][0]
    # a spec that fixes the pooled score: one task, a family of 1
    spec = tmp_path / "pooled.yaml"
    spec.write_text(SPEC.format(effect=0.02, clip=0.05) + "score: {per_dataset: false}\n")
    code, p = _plan(capsys, spec, "--pilot", pilot)
    assert code == 0 and p["m"] == 1 and p["score"] == {"per_dataset": False} and p["notes"] == []
    (row,) = p["rows"]
    assert row["task"] == "rg" and row["pilot_diff"] == pytest.approx((0.075 + 0.015) / 2)
    code = main(["sweep", "plan", str(spec), "--pilot", str(pilot)])
    assert code == 0 and "Scored by the spec's `score`: per_dataset = False." in capsys.readouterr().out
    # the family level comes from the spec's score too; a contradicting --confidence is refused
    spec.write_text(SPEC.format(effect=0.02, clip=0.05) + "score: {per_dataset: false, confidence: 0.9}\n")
    code, p = _plan(capsys, spec, "--pilot", pilot)
    assert code == 0 and p["alpha_family"] == pytest.approx(0.1)
    code, err = _plan(capsys, spec, "--pilot", pilot, "--confidence", "0.95")
    assert code == 2 and "fixes score.confidence = 0.9" in err


def test_check_aggregations_by_hand():
    m = pd.DataFrame({"run_id": "r", "step": [4, 1, 2, 3], "sig": [8.0, 2.0, float("nan"), 4.0]})
    assert checks.run_value(m, "sig", "mean", 0.0) == pytest.approx((2 + 4 + 8) / 3)
    assert checks.run_value(m, "sig", "final", 0.0) == 8.0
    assert checks.run_value(m, "sig", "change", 0.0) == 6.0
    assert checks.run_value(m, "sig", "rel_change", 0.0) == 3.0
    assert checks.run_value(m, "sig", "mean", 0.5) == 6.0  # the first half (steps 1, 2) left out: 4 and 8
    assert pd.isna(checks.run_value(m, "other", "mean", 0.0))
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "task": "t", "algorithm": ["x", "x", "x:v"]})
    metrics = pd.DataFrame({"run_id": ["a", "b", "c"], "step": 1, "sig": [0.02, 0.001, 0.03]})
    # arm `x` is runs a and b only: its variant `x:v` (run c, which passes) is an arm of its own
    t = checks.evaluate([Check("x", "sig", value=0.01, seeds=0.5)], runs, metrics)
    assert t.iloc[0]["n_runs"] == 2 and t.iloc[0]["n_pass"] == 1 and t.iloc[0]["result"] == checks.PASS
    t = checks.evaluate([Check("x", "sig", value=0.01, seeds=0.8)], runs, metrics)
    assert t.iloc[0]["result"] == checks.FAIL
    assert checks.failed_for(t, "t", ["x"]) == ["x: mean sig >= 0.01 in ≥ 80% of runs (fail: 1/2)"]
    t = checks.evaluate([Check("x:v", "sig", value=0.01, seeds=1.0)], runs, metrics)
    assert (t.iloc[0]["n_runs"], t.iloc[0]["n_pass"], t.iloc[0]["result"]) == (1, 1, checks.PASS)
    t = checks.evaluate([Check("all", "absent", value=0.0)], runs, metrics)
    assert set(t["result"]) == {checks.NO_DATA}
