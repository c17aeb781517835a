"""``benchmarks/mismatch/mismatch.py``: one row per correction arm from hand-made run folders (states,
final accuracies, the correction's own shares averaged over the steps, the ratio range), and the
step-0 eval printed per seed as the engine's (evals run through the mismatch knob)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import load_script

mismatch = load_script("benchmarks/mismatch/mismatch.py", "mismatch_bench")


def _run(root: Path, variant: str, seed: int, masked: list[float], state: str = "completed") -> None:
    d = root / f"chain__grpo__s{seed}__{variant}"
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"variant": variant, "seed": seed}))
    (d / "status.json").write_text(json.dumps({"state": state}))
    (d / "env.json").write_text(json.dumps({"cpu_model": "Test CPU"}))
    evals = [{"step": 0, "split": "val", "eval/chain/greedy_acc": 0.4 + seed / 100, "n_prompts": 200},
             {"step": 2, "split": "val", "final": True, "eval/chain/greedy_acc": 0.5},
             {"step": 2, "split": "test", "final": True, "eval/chain/greedy_acc": 0.25 + seed / 4}]
    (d / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    rows = [{"step": i + 1, "reward/mean": 0.5, "stats/grad_norm": 1.0 + i, "stats/entropy": 0.1,
             "mismatch/kl": 0.01, "mismatch/ratio_min": 0.5 - i / 10, "mismatch/ratio_max": 2.0 + i,
             "mismatch/is_weight_mean": 0.9, "mismatch/is_masked_frac": m} for i, m in enumerate(masked)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_per_arm_with_the_correction_shares_and_the_engine_step_0_per_seed(tmp_path):
    _run(tmp_path, "seq_mis", 0, [0.1, 0.3])
    _run(tmp_path, "seq_mis", 1, [0.0, 0.2])
    _run(tmp_path, "none", 0, [0.0, 0.0], state="failed")
    text = mismatch.render(tmp_path)
    assert "CPU: Test CPU (runs)" in text
    assert "val 0.400 (s0) / 0.410 (s1)" in text and "through the mismatch knob" in text
    (none,) = [ln for ln in text.splitlines() if ln.startswith("| `none`")]
    (seq,) = [ln for ln in text.splitlines() if ln.startswith("| `seq_mis`")]
    assert text.index("| `none`") < text.index("| `seq_mis`")  # the ORDER of the modes
    assert "| 0/1 |" in none
    cells = [c.strip() for c in seq.strip("|").split("|")]
    assert cells[1] == "2/2" and cells[2] == "0.500, 0.500" and cells[3] == "0.375"  # test mean (0.25 + 0.5) / 2
    assert cells[5] == "2.00" and cells[9] == "0.150" and cells[11] == "0.400–3.00"  # max grad, masked mean, range


def test_a_missing_folder_is_one_clear_error(tmp_path, capsys):
    assert mismatch.main([str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
