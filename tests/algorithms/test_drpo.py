"""DRPO: the weight w = 1 − sign(A)(p − q)/δ in probability and ratio space worked by hand, and the
loss and gradient through it (corrective negative weights, the hard DPPO mask, the TIS cap, the
default δ)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.algorithms.drpo import DRPO, DRPOConfig, drpo_weight
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_no_prompt import ctx, make_batch, with_adv


# ======================================================================================
# DRPO, δ = 0.15: w = 1 − sign(A)(p − q)/δ
#   A>0, p .5, q .4 → 1 − 0.1/0.15 = 1/3;   A>0, p .6 → 1 − 0.2/0.15 = −1/3 (corrective)
#   A<0, p .3 → 1 − 0.1/0.15 = 1/3;         A<0, p .5 → 1 + 0.1/0.15 = 5/3;   A>0, p .52 → 1 − 0.8 = 0.2

DR_P, DR_A = [0.5, 0.6, 0.3, 0.5, 0.52], [1.0, 1.0, -1.0, -1.0, 1.0]


def dr_w(**kw):
    return drpo_weight(t(DR_P).log(), t([0.4] * 5).log(), t(DR_A), kw.get("lo", 0.15), kw.get("hi", 0.15),
                       kw.get("space", "prob"))


def test_drpo_weight_by_hand():
    torch.testing.assert_close(dr_w(), t([1 / 3, -1 / 3, 1 / 3, 5 / 3, 0.2]))
    # ratio space (SPO): Δ = ρ − 1 = 0.25, 0.5, −0.25, 0.25, 0.3 → 1 − 0.25/0.15 = −2/3, ...
    torch.testing.assert_close(dr_w(space="ratio"), t([-2 / 3, -7 / 3, -2 / 3, 8 / 3, -1.0]))
    # asymmetric: δ_low = 0.05 for A < 0 → 1 − 0.1/0.05 = −1, 1 + 2 = 3
    torch.testing.assert_close(dr_w(lo=0.05)[2:4], t([-1.0, 3.0]))


def test_drpo_loss_gradient_and_switches():
    # token 0: ℓ = −A·min(ρ, C)·w·log p = −1.25·(1/3)·ln 0.5 = 0.288811; ∂ℓ/∂log p = −1.25/3 = −0.416667
    b = with_adv(make_batch([[1]] * 5, [0] * 5, [0.0] * 5, behav=t([[0.4]] * 5).log()), DR_A)
    def run(**kw):  # at δ = 0.15 (DPPO's δ_TV), where the weight binds on these tokens
        logp = t([[p] for p in DR_P]).log().requires_grad_(True)
        loss, m = DRPO(DRPOConfig(**{"delta_low": 0.15, "delta_high": 0.15, **kw})).loss(Forward(logp=logp), b, ctx())
        loss.sum().backward()
        return loss[:, 0].detach(), logp.grad[:, 0], m
    # the default δ = 12.5 (the authors' port's ε): w = 1 − 0.1/12.5 = 0.992 → ∂ℓ/∂log p = −1.25·0.992 = −1.24
    assert (DRPOConfig().delta_low, DRPOConfig().delta_high) == (12.5, 12.5)
    assert float(run(delta_low=12.5, delta_high=12.5)[1][0]) == pytest.approx(-1.24, abs=1e-6)
    loss, grad, m = run()
    assert float(loss[0]) == pytest.approx(0.288811, abs=1e-6) and float(grad[0]) == pytest.approx(-0.416667, abs=1e-6)
    assert float(grad[1]) == pytest.approx(1.5 / 3, abs=1e-6)  # corrective: −A·1.5·(−1/3) = +0.5
    assert float(m["algo/drpo/w_neg_frac"]) == pytest.approx(1 / 5)
    assert float(run(corrective=False)[1][1]) == 0.0  # w clamped at 0
    _, g_hard, _ = run(weight="hard")  # DPPO mask: token 1 (Δ = 0.2 > δ, A > 0) masked, others w = 1
    torch.testing.assert_close(g_hard, t([-1.25, 0.0, 0.75, 1.25, -1.3]))
    assert float(run(tis_cap=1.2)[1][0]) == pytest.approx(-1.2 / 3, abs=1e-6)
