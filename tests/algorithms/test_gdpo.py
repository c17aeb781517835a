"""GDPO with one reward component: the GRPO z-score whitened over the batch's policy tokens, worked by
hand with and without std scaling and equal to verl 0.9.1's numbers on the same input
(``hand_verl.py``); equal groups shift by one constant, an all-equal batch gives 0."""

from __future__ import annotations

import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_verl import CTX, GID, MASK, close, shared_batch
from tests.fakes import hand_batch, make_entry


VERL_GDPO = [0.5075113773345947, -1.9554582834243774, 0.5075113773345947, 0.692023515701294,
             -1.3189804553985596, 0.6819196343421936]
VERL_GDPO_NOSTD = [0.329850435256958, -2.062471628189087, 0.329850435256958, 0.13049031794071198,
                   -1.0656707286834717, 1.2070351839065552]


# ========================================================================================
# GDPO with one reward component — GRPO z-score, then whitened over the batch's policy tokens
# z: a: mean 2/3, std √(1/3) = 0.577350 → (1/3)/0.577351 = 0.577349, −1.154699, 0.577349
#    b: mean 0.25, std √0.125 = 0.353553 → ±0.707105;  c: singleton (mean 0, std 1) → 0.7/(1 + 1e-6) = 0.699999
# token-weighted (|y| = 2, 1, 3, 1, 2, 2; 11 tokens) mean m = (2·0.577349 − 1.154699 + 3·0.577349 + 0.707105
#    − 2·0.707105 + 2·0.699999)/11 = 2.424942/11 = 0.220449; unbiased var = Σ l (z − m)²/10 = 0.494540
#    → sqrt(var + 1e-8) = 0.703236;  Â = (z − m)/0.703236 = 0.507511, −1.955458, 0.507511, 0.692023, −1.318981, 0.681920
GDPO_HAND = [0.5075113426710127, -1.9554582102738014, 0.5075113426710127, 0.6920234987369954,
             -1.3189805153581795, 0.6819195144490509]
# scale_by_std off: z = 1/3, −2/3, 1/3, 0.25, −0.25, 0.7; m = 2.15/11 = 0.195455; var = 0.174727
#    → Â = (z − m)/0.418004 = 0.329850, −2.062472, 0.329850, 0.130490, −1.065671, 1.207035
GDPO_NOSTD_HAND = [0.32985046090591064, -2.0624715632468478, 0.32985046090591064, 0.13049029222651415,
                   -1.0656707198498652, 1.2070352030952554]


def test_gdpo_is_grpo_then_batch_whitening():
    out = make_entry("gdpo").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(GDPO_HAND)[:, None] * t(MASK))
    close(out.adv[:, 1], VERL_GDPO)
    nostd = make_entry("gdpo", scale_by_std=False).advantages(shared_batch(), CTX)
    torch.testing.assert_close(nostd.adv, t(GDPO_NOSTD_HAND)[:, None] * t(MASK))
    close(nostd.adv[:, 1], VERL_GDPO_NOSTD)


def test_gdpo_equal_groups_are_shifted_by_one_constant_and_an_equal_batch_is_zero():
    # group a all 0.3: z = 0 there, then −m/std of the batch on all its tokens (not 0, unlike GRPO)
    adv = make_entry("gdpo").advantages(shared_batch([0.3, 0.3, 0.3, 0.5, 0.0, 0.7]), CTX).adv
    on = t(MASK)[:3] > 0
    assert (adv[:3][on] == adv[0, 1]).all() and float(adv[0, 1]) != 0.0
    # every group equal (and no singleton): every z is 0 → exactly 0
    flat = hand_batch(MASK[:5], GID[:5], [0.3] * 3 + [0.9] * 2)
    assert (make_entry("gdpo").advantages(flat, CTX).adv == 0).all()
