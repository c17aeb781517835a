"""TOPR: the asymmetric loss worked by hand — positives −Â·log π with no ratio, negatives
−sg(clip(ρ, 0, 1))·Â·log π — with ROLL's split by score > 0 against the paper's split by the sign of
Â (they differ on a partial-credit answer below its group mean), per-token ρ (ROLL) against the
sequence ratio (paper), the weights w±, the reward-minus-baseline advantage, and the detached taper
in the gradient. Inputs as ROLL's ``_compute_topr_loss`` takes them (per-token ρ = π/π_old)."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.fakes import hand_batch, hook_ctx, make_entry

CTX = hook_ctx(gen_seed=0, max_new_tokens=2, group_size=2, prompts_per_step=2)
# groups a = rows 0-1 (R 1, 0), b = rows 2-3 (R 1, 0.5: row 3 has partial credit, score > 0, below the mean)
MASK = [[0, 1, 1]] * 4
GID, R = [0, 0, 1, 1], [1.0, 0.0, 1.0, 0.5]
# GRPO z-scores: a: mean 0.5, std √0.5 → ±A1; b: mean 0.75, std √0.125 → ±A2
A1 = 0.5 / (math.sqrt(0.5) + 1e-6)
A2 = 0.25 / (math.sqrt(0.125) + 1e-6)
LOGP = [[0, -0.5, -1.0], [0, -1.0, -0.6], [0, -0.2, -0.4], [0, -0.8, -2.0]]
OLD = [[0, -1.5, -2.0], [0, -0.5, -1.0], [0, -0.2, -0.4], [0, -1.0, -1.0]]
# log ρ = log π − log π_old: row 0 (1, 1); row 1 (−0.5, 0.4); row 2 (0, 0); row 3 (0.2, −1.0)
E5, E1 = math.exp(-0.5), math.exp(-1.0)  # 0.60653, 0.36788


def run(**cfg):
    alg = make_entry("topr", **cfg)
    b = hand_batch(MASK, GID, R, old_logp=t(OLD))
    out = alg.advantages(b, CTX)
    b = b.replace(adv=out.adv, extras=dict(out.extras))
    x = t(LOGP).requires_grad_(True)
    loss, m = alg.loss(Forward(logp=x), b, CTX)
    loss.sum().backward()
    return out, loss.detach(), x.grad, m


def test_defaults_score_split_token_ratio():
    out, loss, grad, m = run()
    torch.testing.assert_close(out.adv[:, 1], t([A1, -A1, A2, -A2]))
    assert out.metrics["algo/topr/positive_frac"] == 0.75  # scores > 0: rows 0, 2, 3
    # row 0 (positive): −A1·log π = 0.5·A1, 1.0·A1 (log ρ = 1 plays no part)
    # row 1 (negative): −min(ρ, 1)·(−A1)·log π = e^−0.5·A1·(−1.0), 1·A1·(−0.6)   (ρ = e^0.4 > 1 → 1)
    # row 2 (positive): 0.2·A2, 0.4·A2
    # row 3 (score 0.5 > 0: positive, no taper although Â < 0): A2·(−0.8), A2·(−2.0)
    want = [[0, 0.5 * A1, 1.0 * A1], [0, -E5 * A1, -0.6 * A1], [0, 0.2 * A2, 0.4 * A2], [0, -0.8 * A2, -2.0 * A2]]
    torch.testing.assert_close(loss, t(want))
    # the taper is detached: ∂ℓ/∂log π = −w·Â
    torch.testing.assert_close(grad, t([[0, -A1, -A1], [0, E5 * A1, A1], [0, -A2, -A2], [0, A2, A2]]))
    assert float(m["algo/topr/negative_clip_frac"]) == 0.5  # row 1: ρ = e^0.4 > 1 on 1 of its 2 tokens


def test_advantage_split_tapers_the_partial_credit_row():
    _, loss, _, m = run(split="advantage")
    # row 3 (Â < 0) is now negative: ρ = (e^0.2 → 1, e^−1): A2·(−0.8), e^−1·A2·(−2.0)
    torch.testing.assert_close(loss[3], t([0, -0.8 * A2, -2.0 * E1 * A2]))
    torch.testing.assert_close(loss[:3], run()[1][:3])
    assert float(m["algo/topr/negative_clip_frac"]) == 0.5  # rows 1 and 3: e^0.4 and e^0.2 > 1, 2 of their 4 tokens


def test_sequence_ratio():
    _, loss, _, _ = run(ratio="sequence")
    # row 1: ρ = exp(−0.5 + 0.4) = e^−0.1 ≈ 0.904837 on both tokens
    s = math.exp(-0.1)
    torch.testing.assert_close(loss[1], t([0, -s * A1, -0.6 * s * A1]))


def test_weights_scale_each_side():
    _, base, _, _ = run()
    _, loss, _, _ = run(positive_weight=2.0, negative_weight=0.5)
    torch.testing.assert_close(loss[[0, 2, 3]], 2 * base[[0, 2, 3]])
    torch.testing.assert_close(loss[1], 0.5 * base[1])


def test_reward_minus_baseline():
    alg = make_entry("topr", advantage="reward", reward_baseline=0.5)
    assert not alg.group_relative and alg.cfg.kl_coef == 0 and alg.aggregation == "seq-mean-token-mean"
    out = alg.advantages(hand_batch(MASK, GID, R, old_logp=t(OLD)), CTX)
    # Â = R − 0.5 = 0.5, −0.5, 0.5, 0
    torch.testing.assert_close(out.adv[:, 1], t([0.5, -0.5, 0.5, 0.0]))


@pytest.mark.parametrize("ratio", ["token", "sequence"])
def test_on_policy_it_is_reinforce(ratio):
    alg = make_entry("topr", ratio=ratio)
    b = hand_batch(MASK, GID, R, old_logp=t(LOGP))
    out = alg.advantages(b, CTX)
    b = b.replace(adv=out.adv, extras=dict(out.extras))
    loss, _ = alg.loss(Forward(logp=t(LOGP)), b, CTX)
    torch.testing.assert_close(loss, -out.adv * t(LOGP))
