"""GRPO: the group z-score advantage (with and without the std) and the clipped surrogate with
``seq-mean-token-mean`` worked by hand on 2 prompts × 3 samples (per-token loss, clip fraction,
objective), ε_high, and the inputs it needs."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, D, make_batch, t


R3 = math.sqrt(3.0)


# ----------------------------------------------------------------------------------------
# GRPO: 2 prompts × 3 samples, T = 4 (1 prompt token + 3 response positions)

GRPO_MASK = [[0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 0, 0],
             [0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0]]
GRPO_GROUPS = [0, 0, 0, 1, 1, 1]
GRPO_REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
# prompt 0: R = (1, 0, 0): mean 1/3, unbiased std √(((2/3)² + 2(1/3)²)/2) = √(1/3) = 1/√3
#   → Â = (2/3)·√3 = 2/√3 = 1.1547, −(1/3)·√3 = −1/√3 = −0.57735 (×2)
# prompt 1: R = (1, 1, 0): mean 2/3, std 1/√3 → Â = 1/√3 (×2), −2/√3
GRPO_ADV_SEQ = [2 / R3, -1 / R3, -1 / R3, 1 / R3, 1 / R3, -2 / R3]


def test_grpo_advantages_by_hand():
    algo = GRPO(GRPOConfig())
    out = algo.advantages(make_batch(GRPO_MASK, GRPO_GROUPS, GRPO_REWARDS), CTX)
    expected = t(GRPO_ADV_SEQ)[:, None] * t(GRPO_MASK)   # broadcast on the loss mask, 0 elsewhere
    torch.testing.assert_close(out.adv, expected, rtol=1e-5, atol=1e-5)
    assert out.adv.shape == (6, 4)


def test_grpo_advantages_without_std_scaling():
    # R − mean: (2/3, −1/3, −1/3), (1/3, 1/3, −2/3)
    algo = GRPO(GRPOConfig(scale_by_std=False))
    out = algo.advantages(make_batch(GRPO_MASK, GRPO_GROUPS, GRPO_REWARDS), CTX)
    seq = t([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3])
    torch.testing.assert_close(out.adv, seq[:, None] * t(GRPO_MASK))


# Ratios r = π_θ/π_old per response token (1 where unused); ε = 0.2.
GRPO_RATIO = [[1, 1.0, 1.5, 0.9],
              [1, 0.5, 1.0, 1],
              [1, 2.0, 1, 1],
              [1, 1.0, 1.0, 1.0],
              [1, 1.1, 1.1, 1.1],
              [1, 1.0, 1.0, 1]]
# Per-token loss max(−Â r, −Â clip(r, 0.8, 1.2)), with a = 1/√3:
# row 0 (Â = 2a):  r = 1 → −2a;  r = 1.5 → −2a·1.2 = −2.4a (clipped);  r = 0.9 → −1.8a
# row 1 (Â = −a):  r = 0.5 → max(0.5a, 0.8a) = 0.8a (clipped);  r = 1 → a
# row 2 (Â = −a):  r = 2 → max(2a, 1.2a) = 2a (no dual clip in GRPO)
# row 3 (Â = a):   −a, −a, −a
# row 4 (Â = a):   r = 1.1 → −1.1a (×3)
# row 5 (Â = −2a): 2a, 2a
A = 1 / R3
GRPO_LOSS = [[0, -2 * A, -2.4 * A, -1.8 * A],
             [0, 0.8 * A, A, 0],
             [0, 2 * A, 0, 0],
             [0, -A, -A, -A],
             [0, -1.1 * A, -1.1 * A, -1.1 * A],
             [0, 2 * A, 2 * A, 0]]
# seq-mean-token-mean: row means −6.2a/3, 0.9a, 2a, −a, −1.1a, 2a;
#   sum = a·(−2.0667 + 0.9 + 2 − 1 − 1.1 + 2) = 0.73333a;  / 6 → 0.122222a = 0.0705650
GRPO_OBJ = (-6.2 / 3 + 0.9 + 2 - 1 - 1.1 + 2) / 6 * A


def _grpo_batch_with_logp():
    mask = t(GRPO_MASK)
    old = -1.0 - 0.1 * torch.arange(24, dtype=D).reshape(6, 4) * mask   # arbitrary π_old log-probs
    logp = old + torch.log(t(GRPO_RATIO))
    batch = make_batch(GRPO_MASK, GRPO_GROUPS, GRPO_REWARDS, old_logp=old)
    return batch, logp


def test_grpo_loss_by_hand():
    algo = GRPO(GRPOConfig())
    batch, logp = _grpo_batch_with_logp()
    batch = batch.replace(adv=algo.advantages(batch, CTX).adv)
    loss, metrics = algo.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t(GRPO_LOSS), rtol=1e-5, atol=1e-5)
    # clipped tokens: row 0 r = 1.5 (Â > 0) and row 1 r = 0.5 (Â < 0): 2 of 14 valid tokens
    assert metrics["stats/clip_frac"].item() == pytest.approx(2 / 14)
    agg = aggregate(loss, batch.loss_mask, algo.cfg.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx(GRPO_OBJ, rel=1e-5)
    assert GRPO_OBJ == pytest.approx(0.0705650, abs=1e-6)


def test_grpo_loss_respects_clip_eps_high():
    # ε_high = 0.6: row 0's r = 1.5 is no longer clipped → −2a·1.5 = −3a
    algo = GRPO(GRPOConfig(clip_eps_high=0.6))
    batch, logp = _grpo_batch_with_logp()
    batch = batch.replace(adv=algo.advantages(batch, CTX).adv)
    loss, _ = algo.loss(Forward(logp=logp), batch, CTX)
    assert loss[0, 2].item() == pytest.approx(-3 * A, rel=1e-5)


def test_grpo_needs():
    assert GRPO(GRPOConfig()).needs == {"old_logp", "ref_logp"}          # β = 0.04 > 0
    assert GRPO(GRPOConfig(kl_coef=0.0)).needs == {"old_logp"}
