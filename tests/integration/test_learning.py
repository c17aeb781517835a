"""The embedded tasks learn on any CPU: one seed of GRPO and of PPO at the default `arith`
budget, from the committed base, raise greedy accuracy by a margin; one seed of DAPO (4 updates a
batch) at the `chain` preset runs from its committed base and does not degrade (no chain arm at
today's preset gains reliably: the numbers are next to the test).

What may and may not depend on the CPU:
* the base is the committed bytes (tasks/bases/), so its greedy accuracy is the manifest's
  measured value on every machine, up to greedy near-ties that flip between CPUs (±1 point);
* RL is not bit-reproducible across CPUs: a seed's gain on another CPU is a fresh draw from the
  per-seed distribution, so every bound is chosen from per-seed gains measured in
  `benchmarks/learning/learning.md` (and `benchmarks/baselines/baselines.md`) so that it fails with
  probability <= 1% under a normal fit of them (the figures are named next to each bound).

Slow (≈ 40 s per `arith` run, ≈ 3 min for the `chain` run, on one thread).
"""

from __future__ import annotations

import json

import pytest

from rlsuite.suite import warmstart
from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

# smallest per-seed gain of greedy test accuracy measured at the default budget from the
# committed base (AMD EPYC): +0.095 (ppo seed 2; grpo's smallest +0.130; benchmarks/learning/
# learning.md, and +9.5 points is also the smallest of all 12 baselines in baselines.md).
# The margin is at most half of it.
MIN_MEASURED_GAIN = 0.095
MARGIN = 0.045
assert MARGIN <= MIN_MEASURED_GAIN / 2


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_default_budget_improves_greedy_accuracy(algo, tmp_path, capsys):
    man = json.loads(warmstart.manifest_path("arith", "tiny").read_text())
    # the manifest measured the base on the first 200 test prompts, and the gains above were measured so
    code = main(["run", "--task", "arith", "--algo", algo, "--seed", "0", "--out", str(tmp_path),
                 "--set", "eval.test_prompts=200"])
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
# of sweeps/effects.yaml) at the `chain` preset, from the committed base. Its per-seed gains of greedy
# val accuracy (200 prompts, base 0.460), 10 seeds on each of two CPUs (AMD EPYC with AVX2 only, AMD
# EPYC with AVX-512; benchmarks/learning/learning.md, `benchmarks/learning/learning_chain.py`): pooled mean
# +0.045, sd 0.0315, min -0.015 (the same seed gained +0.070 on the other CPU). No one-seed gain margin
# holds with P(fail) <= 1% (mean - 2.326 sd = -0.028), and the same runs' greedy *test* accuracy does
# not move (+0.002 on average): at today's preset the chain policy barely moves. So this is a
# regression test of the preset, not a learning claim (the arith tests above are those): the run
# starts from the committed base, updates the policy and does not degrade by more than CHAIN_FLOOR,
# P(fail) ~ 0.35% under the pooled fit (0.7% under the worse CPU's own fit: mean +0.039, sd 0.032).
CHAIN_MEAN_GAIN, CHAIN_SD_GAIN = 0.045, 0.0315
CHAIN_FLOOR = -0.04
assert (CHAIN_MEAN_GAIN - CHAIN_FLOOR) / CHAIN_SD_GAIN >= 2.326  # P(gain < floor) <= 1% under the fit


@pytest.mark.slow
def test_chain_preset_runs_from_the_committed_base_and_does_not_degrade(tmp_path, capsys):
    """≈ 3 minutes on one thread (≈ 25 rollout steps of 128 samples after DAPO's filtering, 4 updates each)."""
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
    rows = [r for r in read_jsonl(f"{run_dir}/metrics.jsonl") if "stats/approx_kl" in r]
    # the policy is updated: |k1 KL(π_old, π)| over a step's 4 minibatches is 0 without an update; its mean
    # over a run was 3.0e-4 to 4.5e-4 on the 10 seeds of learning.md that record it
    moved = sum(abs(r["stats/approx_kl"]) for r in rows) / max(len(rows), 1)
    assert len(rows) >= 20 and moved > 5e-5, (len(rows), moved)
    assert end - start >= CHAIN_FLOOR, (start, end)
