"""The embedded default learns: one seed of GRPO and of PPO at the default `arith` budget
raise greedy val accuracy by at least 5 points over the shared warm start (the benchmark
`benchmarks/learning.py` checks ≥ 10 points on average over 3 seeds).

Slow (≈ 40 s per run on one thread, plus a one-off ≈ 45 s warm start that is cached).
"""

from __future__ import annotations

import pytest

from suite.cli import main
from suite.runfolder import read_jsonl


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_default_budget_improves_greedy_accuracy(algo, tmp_path, capsys):
    code = main(["run", "--task", "arith", "--algo", algo, "--seed", "0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    evals = [e for e in read_jsonl(f"{run_dir}/evals.jsonl") if e["split"] == "val"]
    start, end = evals[0]["eval/arith/greedy_acc"], evals[-1]["eval/arith/greedy_acc"]
    assert evals[0]["step"] == 0 and evals[-1]["final"]
    assert 0.3 <= start <= 0.7, "the warm start must leave headroom"
    assert end - start >= 0.05, (start, end)
