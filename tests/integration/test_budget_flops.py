"""Budgets and FLOPs accounting, hand-computed for one step.

tiny model: hidden 128, 3 layers, MLP 256, vocabulary 100 (tied embeddings). Non-embedding
parameters P = 3 × (4·128·128 attention + 3·128·256 MLP + 2·128 norms) + 128 final norm
+ 100·128 unembedding = 3 × 164,096 + 12,928 = 505,216. A separate critic's trunk has no
unembedding: P_c = 3 × 164,096 + 128 = 492,416.
"""

from __future__ import annotations

import json

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

P, P_CRITIC = 505_216, 492_416
SMALL = ["--task", "arith", "--set", "model.warm_start=none", "--set", "eval.max_prompts=4",
    "--set", "eval.test_prompts=4",
         "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4",
         "--set", "train.share_prefix=false"]  # every position computed (the shared-prefix count: test_trainer_levers)


def _run(tmp_path, capsys, *args):
    code = main(["run", *SMALL, *args, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    return read_jsonl(f"{run_dir}/metrics.jsonl"), json.load(open(f"{run_dir}/status.json"))


def test_grpo_step_flops_by_hand(tmp_path, capsys):
    rows, _ = _run(tmp_path, capsys, "--algo", "grpo", "--budget", "updates=1")
    r = rows[0]
    n = r["budget/train_tokens"]  # prompt + response tokens of the 16 samples (1 epoch)
    assert r["budget/gen_tokens"] < n
    # rollout 2P·n + π_ref pass 2P·n (β = 0.04) + training 6P·n; π_old is the training forward's
    # own log-probs (one epoch, one minibatch: no scoring pass of its own)
    assert r["budget/flops"] == 10 * P * n and "budget/flops_score_old" not in r
    assert r["budget/samples"] == 16 and r["budget/prompts"] == 4 and r["budget/updates"] == 1
    # two minibatches: the second one's π_old is not the weights it trains, so the pass runs
    rows, _ = _run(tmp_path / "mb2", capsys, "--algo", "grpo", "--budget", "updates=2", "--set", "train.minibatches=2")
    r = rows[0]
    n = r["budget/train_tokens"]
    assert r["budget/flops"] == 12 * P * n and r["budget/flops_score_old"] == 2 * P * n


def test_ppo_separate_critic_flops_and_epochs(tmp_path, capsys):
    rows, _ = _run(tmp_path, capsys, "--algo", "ppo", "--budget", "updates=4", "--set", "model.critic=separate",
                   "--set", "train.epochs=2", "--set", "train.minibatches=2")
    r = rows[0]
    n = r["budget/train_tokens"] / 2  # two epochs
    # rollout 2P·n + π_old 2P·n + critic scoring 2P_c·n + training 6P·n·2 + critic training 6P_c·n·2; no KL
    assert r["budget/flops"] == 2 * P * n + 2 * P * n + 2 * P_CRITIC * n + 12 * P * n + 12 * P_CRITIC * n
    assert r["budget/updates"] == 4 and len(rows) == 1  # 2 epochs × 2 minibatches in one step


def test_old_logp_aliased_to_behaviour_skips_the_scoring_pass(tmp_path, capsys):
    rows, _ = _run(tmp_path, capsys, "--algo", "grpo", "--budget", "updates=1", "--set", "rollout.old_logp=behaviour",
                   "--set", "algo.kl_coef=0")
    r = rows[0]
    assert r["budget/flops"] == 8 * P * r["budget/train_tokens"]  # rollout 2P·n + training 6P·n
    assert r["stats/ratio_max"] < 1 + 1e-4  # π_old = μ = π_θ before the single update


def test_run_stops_after_the_step_that_crosses_the_budget(tmp_path, capsys):
    rows, status = _run(tmp_path, capsys, "--algo", "grpo", "--budget", "samples=40")
    assert [x["budget/samples"] for x in rows] == [16, 32, 48]
    assert status["budget"]["samples"] == 48 and status["step"] == 3
