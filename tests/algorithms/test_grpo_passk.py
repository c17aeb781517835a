"""GRPO pass@k: only each group's best sample gets its margin over the second best (over the group
std), worked by hand and equal to verl 0.9.1's numbers (``hand_verl.py``); the clip acts on the
best sample; a group needs two samples."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.grpo_passk import passk_advantage
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_verl import CTX, close, with_adv
from tests.fakes import hand_batch, make_entry


# ========================================================================================
# GRPO pass@k — groups of 4, 4, 3 (one response column each)
PK_R = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.2, 0.9, 0.5]
PK_GID = [0] * 4 + [1] * 4 + [2] * 3
# group 0: R_(1) − R_(2) = 1 − 0 = 1 on row 1; std of (0, 1, 0, 0): mean 0.25, Σ(dev²) = 3·0.0625 + 0.5625 = 0.75,
#   /3 = 0.25 → 0.5 → 1/(0.5 + 1e-6) = 1.999996
# group 1: two 1.0 at the top → 1 − 1 = 0 for everyone
# group 2: 0.9 − 0.5 = 0.4 on row 9; std of (0.2, 0.9, 0.5): mean 0.533333, devs −0.333333, 0.366667, −0.033333,
#   Σ(dev²) = 0.246667, /2 = 0.123333 → 0.351188 → 0.4/0.351189 = 1.138986
PK_HAND = [0, 1 / (0.5 + 1e-6), 0, 0, 0, 0, 0, 0, 0, 0.4 / (math.sqrt(0.24666666666666667 / 2) + 1e-6), 0]
VERL_PASSK = [0.0, 1.9999959468841553, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.1389862298965454, 0.0]
VERL_PASSK_NOSTD = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3999999761581421, 0.0]


def test_grpo_passk_only_the_best_sample_gets_its_margin():
    b = hand_batch([[0, 1]] * 11, PK_GID, PK_R)
    alg = make_entry("grpo_passk")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0
    adv = alg.advantages(b, CTX).adv
    torch.testing.assert_close(adv[:, 1], t(PK_HAND))
    close(adv[:, 1], VERL_PASSK)
    # scale_by_std off: the raw margins 1 and 0.4
    raw = make_entry("grpo_passk", scale_by_std=False).advantages(b, CTX).adv[:, 1]
    torch.testing.assert_close(raw, t([0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0.9 - 0.5, 0]))
    close(raw, VERL_PASSK_NOSTD)


def test_grpo_passk_clip_acts_on_the_best_sample():
    b = hand_batch([[0, 1]] * 11, PK_GID, PK_R, old_logp=t([[0, -1.0]] * 11))
    logp = Forward(logp=t([[0, -0.5]] * 11))  # r = e^0.5 = 1.648721 on every token
    for eps_high in (0.2, 0.5):
        alg = make_entry("grpo_passk", clip_eps_high=eps_high)
        _, bb = with_adv(alg, b)
        loss, _ = alg.loss(logp, bb, CTX)
        # Â > 0 only on rows 1 and 9: ℓ = −Â·min(r, 1 + ε_high); every other row 0
        torch.testing.assert_close(loss[:, 1], -t(PK_HAND) * (1 + eps_high))


def test_grpo_passk_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="at least 2 samples"):
        passk_advantage(t([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
