"""CISPO: ℓ = −sg(clip(r, 1 − ε_low, 1 + ε_high))·Â·log π worked by hand with and without the lower
bound (value, gradient — kept where PPO's clip cuts it — and clip fractions), and the group z-score
advantage."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from tests.algorithms.hand import CTX, algo, grad_of_agg, make_batch, t


# ========================================================================================
# cispo — ℓ = −sg(clip(r, 1 − ε_low, 1 + ε_high))·Â·log π; every token keeps a gradient

@pytest.mark.parametrize("eps_low, w_low, clip_frac", [(None, 0.5, 1 / 3), (0.2, 0.8, 2 / 3)])
def test_cispo_stop_gradient_truncated_weight(eps_low, w_low, clip_frac):
    a = algo("cispo", eps_is_low=eps_low)           # ε_high = 0.2 (cap 1.2)
    # token 1: Â = 1,  r = 1.5 → w = 1.2;           log π = −0.5 → ℓ = −1.2·1·(−0.5) = 0.6
    # token 2: Â = −1, r = 0.5 → w = 0.5 (no lower bound) or 0.8 (ε_low 0.2); log π = −1 → ℓ = −w
    # token 3: Â = 1,  r = 1 → w = 1;               log π = −2 → ℓ = 2
    logp = t([[0, -0.5, -1.0, -2.0]])
    old = logp - torch.log(t([[1, 1.5, 0.5, 1.0]]))
    batch = make_batch([[0, 1, 1, 1]], [0], [0.0], old_logp=old, adv=t([[0, 1.0, -1.0, 1.0]]))
    loss, m, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, 0.6, -w_low, 2.0]]))
    # token-mean: (0.6 − w + 2)/3
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx((2.6 - w_low) / 3)
    # ∂ℓ/∂log π = −w·Â (the weight is a constant), /3 for the token mean:
    #   (−1.2, +w, −1)/3 — nonzero even where PPO's clip would have cut the gradient (r = 1.5, Â > 0)
    torch.testing.assert_close(grad, t([[0, -1.2, w_low, -1.0]]) / 3)
    assert m["stats/clip_frac"].item() == pytest.approx(clip_frac)
    assert m["stats/clip_frac_high"].item() == pytest.approx(1 / 3)
    assert m["stats/ratio_mean"].item() == pytest.approx(1.0)       # (1.5 + 0.5 + 1)/3


def test_cispo_advantage_is_group_z_score():
    # R = (1, 0, 0): mean 1/3, unbiased std 1/√3 → (2/√3, −1/√3, −1/√3); mean-only: (2/3, −1/3, −1/3)
    batch = make_batch([[0, 1]] * 3, [0, 0, 0], [1.0, 0.0, 0.0])
    r3 = math.sqrt(3)
    torch.testing.assert_close(algo("cispo").advantages(batch, CTX).adv[:, 1], t([2 / r3, -1 / r3, -1 / r3]),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(algo("cispo", scale_by_std=False).advantages(batch, CTX).adv[:, 1],
                               t([2 / 3, -1 / 3, -1 / 3]))
