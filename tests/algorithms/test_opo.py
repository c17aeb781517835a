"""OPO: the length-weighted baseline b = Σ|y_j|R_j / Σ|y_j| worked by hand and equal to verl 0.9.1's
numbers (``hand_verl.py``), exact zeros for an equal group, a finite empty group, and the PPO loss
with verl's dual clip worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_verl import CTX, LOGP, MASK, close, shared_batch, with_adv
from tests.fakes import hand_batch, make_entry


# verl 0.9.1 on the same inputs (float32; the first response column, the advantage being per sequence)
VERL_OPO = [0.1666666865348816, -0.8333333134651184, 0.1666666865348816, 0.3333333134651184,
            -0.1666666716337204, 0.699999988079071]
VERL_OPO_VANILLA_LOSS = 0.0833374559879303  # compute_policy_loss_vanilla, clip 0.2, clip_ratio_c 3, token-mean


# ========================================================================================
# OPO — b = Σ|y_j| R_j / Σ|y_j| per group; Â_i = R_i − b
# a: b = (2·1 + 1·0 + 3·1)/(2 + 1 + 3) = 5/6 → Â = 1/6, −5/6, 1/6 (the mean 2/3 would give 1/3, −2/3, 1/3)
# b: b = (1·0.5 + 2·0)/(1 + 2) = 1/6 → Â = 1/3, −1/6
# c: singleton → b = 0 → Â = 0.7
OPO_HAND = [1 / 6, -5 / 6, 1 / 6, 1 / 3, -1 / 6, 0.7]


def test_opo_length_weighted_baseline():
    out = make_entry("opo").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(OPO_HAND)[:, None] * t(MASK))


def test_opo_matches_verl():
    out = make_entry("opo").advantages(shared_batch(), CTX)
    close(out.adv[:, 1], VERL_OPO)


def test_opo_equal_group_is_exactly_zero_and_empty_group_is_finite():
    # rewards 0.1 in group a: Σ l·0.1 / Σ l need not round back to 0.1; the advantage is exactly 0
    out = make_entry("opo").advantages(shared_batch([0.1, 0.1, 0.1, 0.5, 0.0, 0.7]), CTX)
    assert (out.adv[:3] == 0).all()
    # a group whose rows have no policy tokens: baseline 0 (verl: 0/0), advantage 0 on the empty mask
    b = hand_batch([[0, 0, 0], [0, 0, 0], [0, 1, 1]], [0, 0, 1], [1.0, 0.0, 1.0])
    adv = make_entry("opo").advantages(b, CTX).adv
    assert torch.isfinite(adv).all() and (adv[:2] == 0).all() and float(adv[2, 1]) == 1.0


def test_opo_ppo_loss_with_verls_dual_clip():
    alg = make_entry("opo")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0 and alg.cfg.dual_clip == 3.0
    _, b = with_adv(alg, shared_batch())
    loss, _ = alg.loss(Forward(logp=t(LOGP) * t(MASK)), b, CTX)
    # per token max(−Â r, −Â clip(r, 0.8, 1.2)), then for Â < 0 min(·, −3Â):
    # row 0 (Â 1/6): r = e^0.3 = 1.349859 → −1.2/6 = −0.2; r = e^−0.4 = 0.670320 → −0.670320/6 = −0.111720
    # row 1 (Â −5/6): r = e^1.5 = 4.481689 → 5/6·4.481689 = 3.734741, dual clip → 5/6·3 = 2.5
    # row 2 (Â 1/6): r = 1, e^0.1, e^−0.1 → −0.166667, −0.184195, −0.150806
    # row 3 (Â 1/3): r = e^−2 = 0.135335 → −0.045112
    # row 4 (Â −1/6): r = e^0.05 → 1.051271/6 = 0.175212; r = e^1.3 = 3.669297 → 0.611550, dual clip → 0.5
    # row 5 (Â 0.7): r = 1 → −0.7, −0.7
    want = [[0, -0.2, -math.exp(-0.4) / 6, 0, 0], [0, 2.5, 0, 0, 0],
            [0, -1 / 6, -math.exp(0.1) / 6, -math.exp(-0.1) / 6, 0], [0, -math.exp(-2.0) / 3, 0, 0, 0],
            [0, math.exp(0.05) / 6, 0.5, 0, 0], [0, -0.7, -0.7, 0, 0]]
    torch.testing.assert_close(loss, t(want))
    # token-mean: Σ = 0.916712 over 11 tokens = 0.083337
    total = aggregate(loss, b.loss_mask, alg.aggregation, 4)
    assert float(total) == pytest.approx(0.9167120 / 11, abs=1e-6)
    assert float(total) == pytest.approx(VERL_OPO_VANILLA_LOSS, abs=1e-6)
    # without the dual clip, row 1 and row 4's second token keep 3.734741 and 0.611550
    loss_nd, _ = make_entry("opo", dual_clip=None).loss(Forward(logp=t(LOGP) * t(MASK)), b, CTX)
    assert float(loss_nd[1, 1]) == pytest.approx(5 / 6 * math.exp(1.5))
    assert float(loss_nd[4, 2]) == pytest.approx(math.exp(1.3) / 6)
