"""``benchmarks/long_horizon/long_horizon.py``: per-arm final accuracy and accuracy per asked hop
count, read from hand-made run folders' ``problems.jsonl`` and the task's own test questions (a
policy that stops at one hop count scores 1 on that h and 0 on the others)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlsuite.reports.load import load_runs

from tests.conftest import load_script

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_BENCH))  # the script imports the shared modules (common.py, study_render.py) by name
lh = load_script("benchmarks/long_horizon/long_horizon.py", "long_horizon_bench")

TASK = {"name": "hops_toy", "n_entities": 300, "min_hops": 4, "max_hops": 8, "val_fraction": 0.1,
        "warm_target": 0.95, "warm_max_steps": 600, "warm_read_share": 0.6}


def _run(root: Path, algo: str, variant: str, seed: int, before: set[int], after: set[int],
         state: str = "completed") -> None:
    """A run whose base is right exactly on the questions with h in ``before``, its final policy on ``after``."""
    d = root / f"hops_toy__{algo}__s{seed}__{variant or 'x'}"
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"algo": {"name": algo}, "variant": variant, "seed": seed, "task": TASK}))
    (d / "status.json").write_text(json.dumps({"state": state}))
    hop = lh.hop_of({"task": TASK})
    rows = [{"step": 0, "split": "test", "final": False, "problem": k, "greedy": int(h in before)}
            for k, h in hop.items()]
    rows += [{"step": 64, "split": "test", "final": True, "problem": k, "greedy": int(h in after)}
             for k, h in hop.items()]
    rows += [{"step": 64, "split": "val", "final": True, "problem": "ffff", "greedy": 1}]  # other splits: ignored
    (d / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_per_run_reads_accuracy_per_asked_hop_count(tmp_path):
    _run(tmp_path, "gigpo", "", 0, {7, 8}, {6, 7, 8})
    _run(tmp_path, "gigpo", "traj", 0, {7, 8}, {5, 6, 7, 8})
    _run(tmp_path, "grpo", "", 1, {7, 8}, {8}, state="failed")   # not finished: left out
    f = lh.per_run(load_runs(tmp_path)).set_index("arm")
    assert sorted(f.index) == ["gigpo", "gigpo:traj"]
    hop = lh.hop_of({"task": TASK})
    share = {h: sum(v == h for v in hop.values()) / len(hop) for h in range(4, 9)}   # 29 of 145 each
    assert f.loc["gigpo", "before"] == pytest.approx(share[7] + share[8])
    assert f.loc["gigpo", "after"] == pytest.approx(share[6] + share[7] + share[8])
    assert [f.loc["gigpo", f"h{h}"] for h in range(4, 9)] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert [f.loc["gigpo:traj", f"base h{h}"] for h in range(4, 9)] == [0.0, 0.0, 0.0, 1.0, 1.0]
    text = "\n".join(lh.arm_tables(f.reset_index()))
    assert "| gigpo:traj | 0.0 | 100.0 | 100.0 | 100.0 | 100.0 | 1 |" in text
    assert "| base (step 0, all runs) | 0.0 | 0.0 | 0.0 | 100.0 | 100.0 | 2 |" in text


def test_render_without_a_registered_study_shows_the_pilots(tmp_path):
    _run(tmp_path / "pilot2_runs", "grpo", "", 0, {7, 8}, {6, 7, 8})
    text = lh.render(tmp_path, (tmp_path / "pilot2_runs", tmp_path / "pilot3_runs"), reps=50)
    assert "Not registered yet." in text and "`pilot2_runs/`" in text and "pilot3_runs" not in text
    assert "| grpo | 1 | 40.0 | 60.0 | — | +20.0 | s0: 60.0 |" in text


def test_render_of_the_registered_study_reads_its_committed_copies():
    """The committed study folder (study.json, runs/ as they are copied in): the planned comparison,
    the checks and the per-arm tables; "Interim" exactly while runs are missing."""
    study = _BENCH / "long_horizon"
    reg = json.loads((study / "study.json").read_text())
    done = [d for d in (study / "runs" / reg["name"]).glob("*/status.json")]
    text = lh.render(study, (study / "pilot2_runs", study / "pilot3_runs"), reps=50)
    assert f"long_horizon: {len(done)} of {len(reg['runs'])} registered runs" in text
    assert ("**Interim:" in text) == (len(done) < len(reg["runs"]))
    assert "| gigpo ≠ gigpo:traj |" in text and "gigpo: mean algo/gigpo/step_adv_abs_mean >= 0.01" in text
    assert text.count("| base (step 0, all runs) |") == 2   # the study's per-h table and the pilots'
