"""The embedded tasks learn on any CPU: one seed of GRPO and of PPO at the default `arith`
budget, and one seed of DAPO (4 updates a batch) at the `chain` preset, from the committed
bases, raise greedy accuracy by a margin.

What may and may not depend on the CPU:
* the base is the committed bytes (suite/bases/), so its greedy accuracy is the manifest's
  measured value on every machine, up to greedy near-ties that flip between CPUs (±1 point);
* RL is not bit-reproducible across CPUs, so the gain is asserted with a margin of at most half
  the smallest per-seed gain measured in `benchmarks/results/learning.md` and `baselines.md`
  (`MARGIN` below; the measured minimum is named next to it).

Slow (≈ 40 s per `arith` run, ≈ 3 min for the `chain` run, on one thread).
"""

from __future__ import annotations

import json

import pytest

from rlsuite.suite import warmstart
from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

# smallest per-seed gain of greedy test accuracy measured at the default budget from the
# committed base (AMD EPYC): +0.095 (ppo seed 2; grpo's smallest +0.130; benchmarks/results/
# learning.md, and +9.5 points is also the smallest of all 12 baselines in baselines.md).
# The margin is at most half of it.
MIN_MEASURED_GAIN = 0.095
MARGIN = 0.045
assert MARGIN <= MIN_MEASURED_GAIN / 2


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_default_budget_improves_greedy_accuracy(algo, tmp_path, capsys):
    man = json.loads(warmstart.manifest_path("arith", "tiny").read_text())
    code = main(["run", "--task", "arith", "--algo", algo, "--seed", "0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    env = json.load(open(f"{run_dir}/env.json"))
    assert env["warm_start"]["source"] == "committed" and env["warm_start"]["sha256"] == man["sha256"]
    evals = read_jsonl(f"{run_dir}/evals.jsonl")
    val = [e for e in evals if e["split"] == "val"]
    test = [e for e in evals if e["split"] == "test"]
    assert test[0]["step"] == 0 and test[-1]["final"] and val[0]["step"] == 0
    start, end = test[0]["eval/arith/greedy_acc"], test[-1]["eval/arith/greedy_acc"]
    assert start == pytest.approx(man["measured"]["test/greedy_acc"], abs=0.01), "the committed base"
    assert val[0]["eval/arith/greedy_acc"] == pytest.approx(man["measured"]["val/greedy_acc"], abs=0.01)
    assert end - start >= MARGIN, (start, end)


# The embedded reasoning task: DAPO with 4 minibatch updates per rollout batch (the `dapo:mb4` arm
# of sweeps/effects.yaml) at the `chain` preset, from the committed base. Its per-seed gains of
# greedy val accuracy (200 prompts, base 0.460) measured on AMD EPYC (benchmarks/results/effects.md,
# compact runs under benchmarks/results/effects/runs/effects/chain__dapo__s*): +0.070, +0.055, +0.035,
# +0.060, +0.070 (seeds 0–4; seed 0 is this configuration, its run id differs by the variant label);
# the smallest is +0.035 and the margin is half of it.
CHAIN_MIN_MEASURED_GAIN = 0.035
CHAIN_MARGIN = 0.0175
assert CHAIN_MARGIN <= CHAIN_MIN_MEASURED_GAIN / 2


@pytest.mark.slow
def test_chain_preset_improves_greedy_accuracy(tmp_path, capsys):
    """≈ 3 minutes on one thread (50 rollout steps of 128 samples, 200 updates)."""
    man = json.loads(warmstart.manifest_path("chain", "tiny").read_text())
    code = main(["run", "--task", "chain", "--algo", "dapo", "--seed", "0", "--out", str(tmp_path),
                 "--set", "rollout.engine=native", "--set", "train.minibatches=4"])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    env = json.load(open(f"{run_dir}/env.json"))
    assert env["warm_start"]["source"] == "committed" and env["warm_start"]["sha256"] == man["sha256"]
    val = [e for e in read_jsonl(f"{run_dir}/evals.jsonl") if e["split"] == "val"]
    assert val[0]["step"] == 0 and val[-1]["final"] and val[0]["n_prompts"] == 200
    start, end = val[0]["eval/chain/greedy_acc"], val[-1]["eval/chain/greedy_acc"]
    assert start == pytest.approx(man["measured"]["val/greedy_acc"], abs=0.01), "the committed base"
    assert end - start >= CHAIN_MARGIN, (start, end)
