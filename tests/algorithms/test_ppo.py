"""PPO: GAE with whitening (and γ = λ = 0.5 without), the policy loss with dual clip and the clipped
value loss worked by hand on 2 sequences; the inputs it needs and its config checks."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.grpo import GRPOConfig
from rlsuite.algorithms.ppo import PPO, PPOConfig
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, D, make_batch, t


# ----------------------------------------------------------------------------------------
# PPO: 2 sequences, T = 3 (1 prompt token + 2 response positions)

PPO_MASK = [[0, 1, 1], [0, 1, 0]]
PPO_VALUES = [[9.0, 0.5, 0.7], [9.0, 0.4, 9.0]]      # 9s are off the mask and must be ignored
PPO_TOKEN_REWARDS = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]  # score on the last policy token


def _ppo_batch(**kw):
    return make_batch(PPO_MASK, [0, 1], [1.0, 0.0], values=t(PPO_VALUES),
                      token_rewards=t(PPO_TOKEN_REWARDS), **kw)


def test_ppo_gae_whitened_advantages_by_hand():
    # γ = λ = 1 (defaults).
    # row 0: t=2: δ = 1 − 0.7 = 0.3, Â = 0.3;  t=1: δ = 0.7 − 0.5 = 0.2, Â = 0.5
    # row 1: t=1: δ = 0 − 0.4 = −0.4, Â = −0.4
    # returns = Â + V: (1.0, 1.0), (0.0)
    # whiten over (0.5, 0.3, −0.4): mean 2/15; deviations (11, 5, −16)/30;
    #   unbiased var = (121 + 25 + 256)/900 / 2 = 201/900 → std = √201/30
    #   → Â_w = (11, 5, −16)/√201 = (0.775880, 0.352673, −1.128554)
    out = PPO(PPOConfig()).advantages(_ppo_batch(), CTX)
    s = math.sqrt(201)
    torch.testing.assert_close(out.adv, t([[0, 11 / s, 5 / s], [0, -16 / s, 0]]), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.returns, t([[0, 1.0, 1.0], [0, 0.0, 0]]))
    # returns mean over valid = 2/3;  explained var = 1 − Var(R − V)/Var(R)
    #   = 1 − (201/900)/(1/3) = 1 − 0.67 = 0.33
    assert float(out.metrics["value/returns_mean"]) == pytest.approx(2 / 3)
    assert float(out.metrics["value/explained_var"]) == pytest.approx(0.33)


def test_ppo_gae_with_discount_and_no_whitening():
    # γ = λ = 0.5 (γλ = 0.25):
    # row 0: t=2: Â = 0.3;  t=1: δ = 0.5·0.7 − 0.5 = −0.15, Â = −0.15 + 0.25·0.3 = −0.075
    # row 1: Â = −0.4.  returns: (0.425, 1.0), (0.0)
    out = PPO(PPOConfig(gamma=0.5, lam=0.5, whiten_adv=False)).advantages(_ppo_batch(), CTX)
    torch.testing.assert_close(out.adv, t([[0, -0.075, 0.3], [0, -0.4, 0]]))
    torch.testing.assert_close(out.returns, t([[0, 0.425, 1.0], [0, 0.0, 0]]))


def test_ppo_policy_loss_with_dual_clip_by_hand():
    # Â = (−1, 1), (−1); r = (4, 1.5), (0.5); ε = 0.2, c = 3
    # (Â=−1, r=4): max(4, 1.2) = 4 → min(4, 3) = 3;  (Â=1, r=1.5): −1.2;  (Â=−1, r=0.5): max(0.5, 0.8) = 0.8
    old = t([[0.0, -1.0, -2.0], [0.0, -0.5, 0.0]])
    logp = old + torch.log(t([[1.0, 4.0, 1.5], [1.0, 0.5, 1.0]]))
    batch = _ppo_batch(old_logp=old, adv=t([[0, -1.0, 1.0], [0, -1.0, 0]]))
    loss, m = PPO(PPOConfig()).loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, 3.0, -1.2], [0, 0.8, 0]]))
    assert m["stats/dual_clip_frac"].item() == pytest.approx(1 / 3)
    loss, _ = PPO(PPOConfig(dual_clip=None)).loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, 4.0, -1.2], [0, 0.8, 0]]))


# value-loss example, clip 0.5:
#   (V=1.0, V_old=0.0, R=0.2): (0.8)² = 0.64 vs (0.5 − 0.2)² = 0.09 → ½·0.64 = 0.32
#   (V=0.9, V_old=0.0, R=1.0): (0.1)² = 0.01 vs (0.5 − 1.0)² = 0.25 → ½·0.25 = 0.125 (clipped)
#   (V=2.0, V_old=1.8, R=1.0): inside the range → ½·1 = 0.5
V_NEW = [[0.0, 1.0, 0.9], [0.0, 2.0, 7.0]]
V_OLD = [[0.0, 0.0, 0.0], [0.0, 1.8, 0.0]]
RETURNS = [[0.0, 0.2, 1.0], [0.0, 1.0, 0.0]]


def test_ppo_value_loss_with_clipping_by_hand():
    batch = make_batch(PPO_MASK, [0, 1], [1.0, 0.0], values=t(V_OLD), returns=t(RETURNS))
    fwd = Forward(logp=torch.zeros(2, 3, dtype=D), values=t(V_NEW))
    loss, m = PPO(PPOConfig(vf_coef=0.5)).value_loss(fwd, batch, CTX)
    # × vf_coef 0.5 → 0.16, 0.0625, 0.25
    torch.testing.assert_close(loss, t([[0, 0.16, 0.0625], [0, 0.25, 0]]))
    assert m["value/clip_frac"].item() == pytest.approx(1 / 3)
    # token-mean: (0.16 + 0.0625 + 0.25)/3 = 0.1575
    assert aggregate(loss, batch.loss_mask, "token-mean", 3).item() == pytest.approx(0.1575)


def test_ppo_value_loss_without_clipping():
    # ½·(0.64, 0.01, 1.0) × vf_coef 1
    batch = make_batch(PPO_MASK, [0, 1], [1.0, 0.0], values=t(V_OLD), returns=t(RETURNS))
    fwd = Forward(logp=torch.zeros(2, 3, dtype=D), values=t(V_NEW))
    loss, _ = PPO(PPOConfig(value_clip=None)).value_loss(fwd, batch, CTX)
    torch.testing.assert_close(loss, t([[0, 0.32, 0.005], [0, 0.5, 0]]))


def test_ppo_needs_and_config_checks():
    assert {"old_logp", "values"} <= PPO(PPOConfig()).needs
    assert "ref_logp" not in PPO(PPOConfig()).needs                 # KL off by default
    assert "ref_logp" in PPO(PPOConfig(kl_coef=0.01)).needs
    with pytest.raises(ValueError):
        PPOConfig(dual_clip=1.0)
    with pytest.raises(ValueError):
        GRPOConfig(kl_coef=-0.1)
