"""REINFORCE++: token rewards r_t = 1[t = T]·R − β·KL_t, discounted returns and global whitening
worked by hand (γ = 0.5 and 1), and the PPO clipped loss without dual clip."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, make_batch, t


# ========================================================================================
# reinforce_pp — token rewards r_t = 1[t = T]·R − β·KL_t; G_t = Σ γ^{k−t} r_k; global whitening

def test_reinforce_pp_discounted_returns_with_kl_rewards_then_global_whitening():
    a = algo("reinforce_pp", gamma=0.5)
    assert a.needs == {"old_logp", "ref_logp"}
    # β = 0.1, k1 KL_t per token: row 0: (1, 0, 2), row 1: (0, 1); R = (1, 0)
    # token rewards: row 0: (−0.1, 0, −0.2 + 1 = 0.8);  row 1: (0, −0.1 + 0 = −0.1)
    mask = [[0, 1, 1, 1], [0, 1, 1, 0]]
    tr = t([[0, -0.1, 0.0, 0.8], [0, 0.0, -0.1, 0]])
    # γ = 0.5: row 0: G_3 = 0.8, G_2 = 0 + 0.5·0.8 = 0.4, G_1 = −0.1 + 0.5·0.4 = 0.1
    #          row 1: G_2 = −0.1, G_1 = 0 + 0.5·(−0.1) = −0.05
    # whiten the 5 policy tokens (0.1, 0.4, 0.8, −0.05, −0.1): mean 1.15/5 = 0.23
    #   deviations (−0.13, 0.17, 0.57, −0.28, −0.33); Σ dev² = 0.0169 + 0.0289 + 0.3249 + 0.0784
    #   + 0.1089 = 0.558; unbiased var = 0.558/4 = 0.1395, std = 0.3734970
    #   → (−0.348062, 0.455158, 1.526117, −0.749671, −0.883541)
    s = math.sqrt(0.1395)
    expected = t([[0, -0.13 / s, 0.17 / s, 0.57 / s], [0, -0.28 / s, -0.33 / s, 0]])
    out = a.advantages(make_batch(mask, [0, 1], [1.0, 0.0], token_rewards=tr), CTX)
    torch.testing.assert_close(out.adv, expected, rtol=1e-6, atol=1e-6)
    assert out.adv[0, 3].item() == pytest.approx(1.526117, abs=1e-6)
    # γ = 1 (default): row 0: (0.7, 0.8, 0.8), row 1: (−0.1, −0.1)
    #   mean 2.1/5 = 0.42; dev (0.28, 0.38, 0.38, −0.52, −0.52); Σ dev² = 0.0784 + 2·0.1444 + 2·0.2704
    #   = 0.908; var 0.227 → std 0.4764452
    s1 = math.sqrt(0.227)
    out1 = algo("reinforce_pp").advantages(make_batch(mask, [0, 1], [1.0, 0.0], token_rewards=tr), CTX)
    torch.testing.assert_close(out1.adv, t([[0, 0.28 / s1, 0.38 / s1, 0.38 / s1], [0, -0.52 / s1, -0.52 / s1, 0]]),
                               rtol=1e-6, atol=1e-6)


def test_reinforce_pp_loss_is_ppo_clip_without_dual_clip():
    # ε = 0.2: (Â = 1, r = 1.5) → −1.2;  (Â = −1, r = 2) → max(2, 1.2) = 2 (no dual clip);
    # (Â = −1, r = 0.5) → max(0.5, 0.8) = 0.8
    a = algo("reinforce_pp")
    old = t([[0, -1.0, -1.0, -1.0]])
    logp = old + torch.log(t([[1, 1.5, 2.0, 0.5]]))
    batch = make_batch([[0, 1, 1, 1]], [0], [0.0], old_logp=old, adv=t([[0, 1.0, -1.0, -1.0]]))
    loss, _ = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.2, 2.0, 0.8]]))
