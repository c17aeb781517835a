"""PNPO: the prefix-normalised ratio (the mean log-ratio over the policy tokens up to t) worked by
hand, the clipped loss and its token and sequence ratio switches, the full and detached gradients on
policy (Σ_{t≥k} 1/t), and the position-scaled clip ε_t = ε_0/√t."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.pnpo import PNPO, PNPOConfig, prefix_log_ratio
from rlsuite.suite.types import Forward
from tests.algorithms.hand import D, t
from tests.algorithms.hand_no_prompt import close, ctx, make_batch, with_adv


# ======================================================================================
# PNPO. Row 0 (A = +1): log r = (0.3, −0.1, 0.1) → prefix means 0.3, 0.1, 0.1.
# Row 1 (A = −1): policy tokens at 0 and 2 (1 is an observation): log r = (0.2, ·, 0.4) → 0.2, ·, 0.3.

PN_MASK = [[1, 1, 1], [1, 0, 1]]
PN_DIFF = [[0.3, -0.1, 0.1], [0.2, 9.0, 0.4]]


def pn_loss(**kw):
    b = with_adv(make_batch(PN_MASK, [0, 0], [1.0, 0.0]), [1.0, -1.0])
    return PNPO(PNPOConfig(**kw)).loss(Forward(logp=t(PN_DIFF)), b, ctx())


def test_pnpo_prefix_ratio_by_hand():
    close(prefix_log_ratio(t(PN_DIFF), torch.zeros(2, 3, dtype=D), t(PN_MASK)),
                               t([[0.3, 0.1, 0.1], [0.2, 0.0, 0.3]]))


def test_pnpo_loss_by_hand_and_ratio_switch():
    # ε = 5e-3. Row 0: ρ = e^0.3, e^0.1, e^0.1, all > 1.005 with A > 0 → clipped: −1.005.
    # Row 1 (A < 0): max(ρ, clip(ρ)) = ρ = e^0.2 = 1.221403, e^0.3 = 1.349859.
    loss, m = pn_loss()
    close(loss, t([[-1.005, -1.005, -1.005], [1.221403, 0.0, 1.349859]]))
    assert "algo/pnpo/clip_frac_pos_1_4" in m and float(m["algo/pnpo/clip_frac_pos_1_4"]) == pytest.approx(3 / 5)
    # token ratio: row 0 t=2 has ρ = e^−0.1 = 0.904837 → max(−0.904837, −0.995) = −0.904837
    close(pn_loss(ratio="token")[0][0], t([-1.005, -0.904837, -1.005]))
    # sequence ratio: row 1 mean log r = 0.3 → e^0.3 on both policy tokens
    close(pn_loss(ratio="sequence")[0][1], t([1.349859, 0.0, 1.349859]))


def test_pnpo_gradient_variants_on_policy():
    # π_θ = π_old, A = +1, 3 tokens: full gradient puts Σ_{t≥k} 1/t on token k: 11/6, 5/6, 1/3;
    # the detached (GSPO-token) variant gives the plain policy gradient 1, 1, 1.
    b = with_adv(make_batch([[1, 1, 1]], [0], [1.0], old=t([[-1.0, -2.0, -0.5]])), [1.0])
    for variant, expected in (("full", [-11 / 6, -5 / 6, -1 / 3]), ("detached", [-1.0, -1.0, -1.0])):
        logp = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
        loss, _ = PNPO(PNPOConfig(gradient=variant)).loss(Forward(logp=logp), b, ctx())
        loss.sum().backward()
        close(logp.grad, t([expected]))
    assert not PNPO(PNPOConfig()).on_policy_pg and PNPO(PNPOConfig(gradient="detached")).on_policy_pg


def test_pnpo_position_scaled_clip():
    # log r = ln 1.15 = 0.139762 at every token → ρ^PN = 1.15; ε_t = 0.2/√t = 0.2, 0.141421, 0.115470, 0.1
    lr = math.log(1.15)
    b = with_adv(make_batch([[1, 1, 1, 1]], [0], [1.0]), [1.0])
    loss, _ = PNPO(PNPOConfig(clip_schedule="inv_sqrt")).loss(Forward(logp=t([[lr] * 4])), b, ctx())
    close(loss[0], t([-1.15, -1.141421, -1.115470, -1.1]))
    loss, _ = PNPO(PNPOConfig(clip_schedule="inv_sqrt", clip_eps0=0.1)).loss(Forward(logp=t([[lr] * 4])), b, ctx())
    close(loss[0], t([-1.1, -1.070711, -1.057735, -1.05]))  # 0.1/√t
