"""RAFT++: the sign-acceptance rule shared with Entrocraft, the accepted samples' weights worked by hand
(the reward under ROLL's documented ``reinforce`` estimator; the positive GRPO z-scores, equal to
Entrocraft's RAFT++ regime on its own test input), and the PPO clipped loss with the rejected rows
kept in the seq-mean-token-mean normaliser (value and gradient)."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.entrocraft import Entrocraft, EntrocraftConfig
from rlsuite.algorithms.raft_pp import sign_acceptance
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_no_prompt import ctx as nctx, make_batch as nbatch
from tests.fakes import hand_batch, hook_ctx, make_entry

CTX = hook_ctx(gen_seed=0, max_new_tokens=2, group_size=2, prompts_per_step=3)


def test_sign_acceptance():
    adv = t([0.5, -0.5, 0.0])
    assert sign_acceptance(adv, 1.0, 0.0).tolist() == [True, False, True]  # RAFT++: drop negatives
    assert sign_acceptance(adv, 0.0, 1.0).tolist() == [False, True, True]  # NSR: drop positives
    # random acceptance: keep A > 0 when u < a+ (0.3 < 0.2? no), A < 0 when u < a− (0.3 < 0.5), A = 0 always
    assert sign_acceptance(adv, 0.2, 0.5, t([0.3, 0.3, 0.9])).tolist() == [False, True, True]


def test_reward_weights_the_accepted_samples():
    alg = make_entry("raft_pp")
    assert not alg.group_relative and "old_logp" in alg.needs
    assert (alg.cfg.kl_coef, alg.cfg.kl_estimator, alg.aggregation) == (0.001, "k3", "seq-mean-token-mean")
    # groups (1, 0), (1, 1), (0.98, −0.02) (an in-reward KL of 0.02): Â = R where R > 0, else 0
    b = hand_batch([[0, 1]] * 6, [0, 0, 1, 1, 2, 2], [1.0, 0.0, 1.0, 1.0, 0.98, -0.02])
    out = alg.advantages(b, CTX)
    torch.testing.assert_close(out.adv[:, 1], t([1.0, 0.0, 1.0, 1.0, 0.98, 0.0]))  # the all-correct group trains
    assert out.metrics["algo/raft_pp/accepted_frac"] == pytest.approx(4 / 6)


def test_grpo_weights_are_entrocrafts_raft_regime():
    # Entrocraft's own test input: rewards (1, 0, 0, 1), z = ±0.5/(std 0.57735 + 1e-6) ≈ ±0.866024;
    # above its entropy band it keeps the positives only — RAFT++ with advantage = grpo
    b = nbatch([[1]] * 4, [0] * 4, [1.0, 0.0, 0.0, 1.0])
    z = 0.5 / (1 / math.sqrt(3) + 1e-6)
    raft = make_entry("raft_pp", advantage="grpo")
    assert raft.group_relative
    adv = raft.advantages(b, nctx()).adv
    torch.testing.assert_close(adv[:, 0], t([z, 0, 0, z]))
    hi = Entrocraft(EntrocraftConfig()).advantages(b, nctx(entropy=0.9, progress=0.5)).adv
    torch.testing.assert_close(adv, hi)


def test_loss_is_ppo_clip_on_the_accepted_rows():
    alg = make_entry("raft_pp")
    b = hand_batch([[0, 1, 1], [0, 1, 0]], [0, 0], [1.0, 0.0], old_logp=t([[0, -1.0, -1.0], [0, -1.0, 0]]))
    b = b.replace(adv=alg.advantages(b, CTX).adv)
    x = t([[0, -0.5, -1.5], [0, -3.0, 0]]).requires_grad_(True)  # ρ = e^0.5 ≈ 1.6487, e^−0.5 ≈ 0.6065
    loss, _ = alg.loss(Forward(logp=x), b, CTX)
    # row 0 (Â = 1): max(−1.6487, −1.2) = −1.2 (clipped), max(−0.6065, −0.8) = −0.6065; row 1 rejected: 0
    torch.testing.assert_close(loss.detach(), t([[0, -1.2, -math.exp(-0.5)], [0, 0, 0]]))
    total = aggregate(loss, b.loss_mask, alg.aggregation, 2)
    # seq-mean-token-mean over 2 sequences (the rejected row counts): ((−1.2 − 0.6065)/2 + 0)/2
    assert float(total.detach()) == pytest.approx((-1.2 - math.exp(-0.5)) / 4)
    total.backward()
    # ∂/∂log π: the clipped token 0, the other −Â·ρ/(2·2)
    torch.testing.assert_close(x.grad, t([[0, 0, -math.exp(-0.5) / 4], [0, 0, 0]]))
