"""RGRA: GRPO's z-score advantage with the plain −Â·log π loss — no ratio, no clip — aggregated
seq-mean-token-mean (value and gradient by hand), independent of π_old, and equal to GRPO's
gradient on-policy."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.fakes import hand_batch, hook_ctx, make_entry

CTX = hook_ctx(gen_seed=0, max_new_tokens=2, group_size=2, prompts_per_step=2)
# groups a = rows 0-1 (R 1, 0), b = rows 2-3 (R 1, 1); |y| = 2, 1, 1, 2
MASK = [[0, 1, 1], [0, 1, 0], [0, 1, 0], [0, 1, 1]]
GID, R = [0, 0, 1, 1], [1.0, 0.0, 1.0, 1.0]
LOGP = [[0, -0.5, -1.0], [0, -2.0, 0], [0, -0.3, 0], [0, -0.1, -0.2]]
# a: mean 0.5, unbiased std √((0.25 + 0.25)/1) = √0.5 → Â = ±0.5/(√0.5 + 1e-6) ≈ ±0.70711; b: equal → 0
A = 0.5 / (math.sqrt(0.5) + 1e-6)


def batch(old_logp):
    return hand_batch(MASK, GID, R, old_logp=t(old_logp))


def test_advantage_is_grpo_z_score():
    alg = make_entry("rgra")
    out = alg.advantages(batch(LOGP), CTX)
    torch.testing.assert_close(out.adv, t([[0, A, A], [0, -A, 0], [0, 0, 0], [0, 0, 0]]))
    grpo = make_entry("grpo").advantages(batch(LOGP), CTX)
    torch.testing.assert_close(out.adv, grpo.adv)
    assert alg.group_relative and "old_logp" not in alg.needs
    assert (alg.cfg.kl_coef, alg.cfg.kl_estimator, alg.aggregation) == (0.04, "k3", "seq-mean-token-mean")


@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_loss_has_no_ratio_and_no_clip(shift):
    alg = make_entry("rgra")
    b = batch((t(LOGP) - shift * t(MASK)).tolist())  # π_old far from π_θ (shift 3: r = e^3) changes nothing
    b = b.replace(adv=alg.advantages(b, CTX).adv)
    x = t(LOGP).requires_grad_(True)
    loss, metrics = alg.loss(Forward(logp=x), b, CTX)
    assert metrics == {}
    # −Â·log π: row 0 (0.5A, 1.0A), row 1 −2A, rows 2-3 0
    torch.testing.assert_close(loss.detach(), t([[0, 0.5 * A, 1.0 * A], [0, -2 * A, 0], [0, 0, 0], [0, 0, 0]]))
    total = aggregate(loss, b.loss_mask, alg.aggregation, 2)
    # seq-mean-token-mean over 4 sequences: (0.75A − 2A + 0 + 0)/4 = −0.3125A
    assert float(total.detach()) == pytest.approx(-0.3125 * A)
    total.backward()
    # ∂/∂log π: row 0 −A/(2·4) per token, row 1 +A/4
    torch.testing.assert_close(x.grad, t([[0, -A / 8, -A / 8], [0, A / 4, 0], [0, 0, 0], [0, 0, 0]]))


def test_on_policy_gradient_equals_grpo():
    rgra, grpo = make_entry("rgra"), make_entry("grpo")
    b = batch(LOGP)
    b = b.replace(adv=rgra.advantages(b, CTX).adv)
    grads = []
    for alg in (rgra, grpo):
        x = t(LOGP).requires_grad_(True)
        aggregate(alg.loss(Forward(logp=x), b, CTX)[0], b.loss_mask, alg.aggregation, 2).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])
