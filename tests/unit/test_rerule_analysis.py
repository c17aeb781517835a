"""``benchmarks/rerule/rerule.py``: the final test eval of each completed run, per arm and seed, and the
paired difference rerule − grpo over shared seeds (hand-made run folders)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

rerule = load_script("benchmarks/rerule/rerule.py", "rerule_bench")


def _run(root: Path, algo: str, seed: int, refusal: float, state: str = "completed") -> None:
    d = root / f"unlearn_toy__{algo}__s{seed}__00000000"
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"algo": {"name": algo}, "seed": seed, "task": {"name": "unlearn_toy"}}))
    (d / "status.json").write_text(json.dumps({"state": state}))
    (d / "env.json").write_text(json.dumps({"cpu_model": "Test CPU"}))
    vals = {f"eval/unlearn_toy/{m}": 0.5 for m in rerule.METRICS}
    rows = [{"step": 0, "split": "test", "final": False, **vals, "eval/unlearn_toy/greedy_forget_refusal": 0.0},
            {"step": 50, "split": "val", "final": True, **vals, "eval/unlearn_toy/greedy_forget_refusal": 0.99},
            {"step": 50, "split": "test", "final": True, **vals, "eval/unlearn_toy/greedy_forget_refusal": refusal}]
    (d / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_final_test_rows_per_arm_and_the_paired_difference(tmp_path):
    for s, (g, r) in enumerate([(0.4, 0.6), (0.5, 0.6), (0.3, 0.7)]):
        _run(tmp_path, "grpo", s, g)
        _run(tmp_path, "rerule", s, r)
    _run(tmp_path, "rerule", 3, 1.0, state="failed")  # not completed: left out
    finals, base, cpus = rerule.collect(tmp_path)
    assert sorted(finals["rerule"]) == [0, 1, 2] and cpus == {"Test CPU"}
    assert finals["grpo"][1]["greedy_forget_refusal"] == 0.5  # the final test row, not val's 0.99
    assert base[0]["greedy_forget_refusal"] == 0.0
    d, lo, hi, n, _ = rerule.paired({s: v["greedy_forget_refusal"] for s, v in finals["rerule"].items()},
                                    {s: v["greedy_forget_refusal"] for s, v in finals["grpo"].items()})
    assert n == 3 and d == pytest.approx((0.2 + 0.1 + 0.4) / 3) and lo <= d <= hi
    text = rerule.render(tmp_path)
    assert "CPU: Test CPU" in text and "| `greedy_forget_refusal` | 0.000 |" in text and "+0.233" in text
