"""M2PO: the second-moment mask (the fewest largest (log π_old/μ)² masked until the kept tokens' mean is
below τ), the behaviour weight π_old/μ with its cap, the unclipped and clipped surrogates, both
normalisers, and GRPO on policy, worked by hand. The mask and the clipped, kept-normalised loss use
inputs checked against AReaL's ``_apply_m2po_masking`` and ``ppo_actor_loss_fn`` (inclusionAI/AReaL
commit 4aef98d): they gave the same masks, per-token losses (−0.639816, −0.863661, 0.954493,
0.707106) and gradients."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.m2po import behaviour_weight, m2_mask
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, make_batch, t

# Two rows of one group: row 0 has 3 response tokens, row 1 has 2 (prompt width 1).
MASK = [[0, 1, 1, 1], [0, 1, 1, 0]]
MU = [[0, -1.0, -0.5, -0.8], [0, -1.2, -0.3, 0]]  # log μ (stale behaviour)
OLD = [[0, -0.5, -0.6, -0.6], [0, -0.9, -0.3, 0]]  # log π_old: log π_old/μ = (0.5, −0.1, 0.2), (0.3, 0)
# M2 = (0.25, 0.01, 0.04), (0.09, 0); sorted from the largest: 0.25, 0.09, 0.04, 0.01, 0
# suffix means: k=0: 0.39/5 = 0.078;  k=1: 0.14/4 = 0.035;  k=2: 0.05/3 = 0.0167;  k=3: 0.01/2 = 0.005;  k=4: 0
# GRPO z-score of rewards (1, 0): mean 0.5, unbiased std √0.5 → Â = ±0.5/(√0.5 + 1e-6) = ±0.7071058
A = 0.5 / (math.sqrt(0.5) + 1e-6)


def batch(**kw):
    return make_batch(MASK, [0, 0], [1.0, 0.0], behav_logp=t(MU), old_logp=t(OLD), **kw)


@pytest.mark.parametrize("tau, keep", [
    (0.04, [[0, 0, 1, 1], [0, 1, 1, 0]]),  # k = 1 (0.035 < 0.04): the 0.25 token goes
    (0.02, [[0, 0, 1, 1], [0, 0, 1, 0]]),  # k = 2 (0.0167 < 0.02): 0.25 and 0.09 go
    (0.1, [[0, 1, 1, 1], [0, 1, 1, 0]]),   # k = 0 (0.078 < 0.1): nothing masked
    (1e-9, [[0, 0, 0, 0], [0, 0, 1, 0]]),  # k = 4: only the M2 = 0 token stays
])
def test_m2_mask_by_hand(tau, keep):
    lr = t(OLD) - t(MU)
    torch.testing.assert_close(m2_mask(lr, t(MASK), tau), t(keep))


def test_m2_mask_keeps_one_token_when_no_suffix_is_below():
    # every M2 = 0.01 ≥ τ = 0.005: no suffix mean is below τ, so all but one token are masked
    keep = m2_mask(torch.full((1, 4), 0.1, dtype=torch.float64), torch.ones(1, 4, dtype=torch.float64), 0.005)
    assert float(keep.sum()) == 1.0
    assert float(m2_mask(t([[0.3]]), t([[0.0]]), 0.04).sum()) == 0.0  # no response token: nothing to keep


def test_behaviour_weight_and_cap_by_hand():
    # w = π_old/μ = e^(0.5, −0.1, 0.2), e^(0.3, 0) = (1.648721, 0.904837, 1.221403), (1.349859, 1)
    w, rej = behaviour_weight(t(OLD), t(MU), t(MASK), 5.0)
    torch.testing.assert_close(w, t([[0, 1.648721, 0.904837, 1.221403], [0, 1.349859, 1.0, 0]]), rtol=0, atol=1e-6)
    assert float(rej.sum()) == 0.0
    # cap 1.3: e^0.5 and e^0.3 exceed it → w = 0 there
    w, rej = behaviour_weight(t(OLD), t(MU), t(MASK), 1.3)
    torch.testing.assert_close(w, t([[0, 0, 0.904837, 1.221403], [0, 0, 1.0, 0]]), rtol=0, atol=1e-6)
    torch.testing.assert_close(rej, t([[0, 1, 0, 0], [0, 1, 0, 0]]))
    w, rej = behaviour_weight(t(OLD), t(MU), t(MASK), None)  # no weight
    torch.testing.assert_close(w, t(MASK))


def _with_adv(a, b):
    out = a.advantages(b, CTX)
    mask = b.loss_mask if out.loss_mask is None else out.loss_mask
    return out, dataclasses.replace(b, adv=out.adv, extras={**b.extras, **out.extras}, loss_mask=mask)


def _loss_and_grad(a, b, logp):
    logp = logp.clone().requires_grad_(True)
    loss, m = a.loss(Forward(logp=logp), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, CTX.max_new_tokens).backward()
    return loss.detach(), m, logp.grad


def test_m2po_loss_and_metrics_by_hand():
    a = algo("m2po")
    out, b = _with_adv(a, batch())
    torch.testing.assert_close(out.adv, t([[0, A, A, A], [0, -A, -A, 0]]))
    m = out.metrics
    assert float(m["algo/m2po/m2"]) == pytest.approx(0.39 / 5)       # 0.078
    assert float(m["algo/m2po/m2_kept"]) == pytest.approx(0.14 / 4)  # 0.035
    assert float(m["algo/m2po/masked_frac"]) == pytest.approx(0.2)   # 1 of 5
    assert float(m["algo/m2po/behaviour_masked_frac"]) == 0.0
    # kept w: 0.904837, 1.221403, 1.349859, 1 → mean 4.476099/4 = 1.119025
    assert float(m["algo/m2po/weight_mean"]) == pytest.approx(4.476099 / 4, abs=1e-6)
    # at π_θ = π_old (r = 1): ℓ = −Â·M·w
    #   row 0 (Â = +0.7071058): masked, −0.7071058·0.904837 = −0.639816, −0.7071058·1.221403 = −0.863661
    #   row 1 (Â = −0.7071058): +0.7071058·1.349859 = 0.954493, +0.7071058·1 = 0.707106
    loss, _, grad = _loss_and_grad(a, b, t(OLD))
    want = t([[0, 0, -0.639816, -0.863661], [0, 0.954493, 0.707106, 0]])
    torch.testing.assert_close(loss, want, rtol=0, atol=2e-6)
    # token-mean over all 5 response tokens (the masked one counts): ∂/∂log π = ℓ/5 (∂r/∂log π = r = 1)
    torch.testing.assert_close(grad, want / 5, rtol=0, atol=1e-6)
    # an unclipped ratio: r = 1.5 on row 0's last token → ℓ = −0.7071058·1.5·1.221403 = −1.295491, ∂ = ℓ/5
    logp = t(OLD)
    logp[0, 3] += math.log(1.5)
    loss, _, grad = _loss_and_grad(a, b, logp)
    assert float(loss[0, 3]) == pytest.approx(-1.295491, abs=2e-6)
    assert float(grad[0, 3]) == pytest.approx(-1.295491 / 5, abs=1e-6)


def test_m2po_clip_and_kept_normaliser_by_hand():
    # AReaL's loss: the clip on π_θ/π_old (ε 0.2) and the kept tokens as the normaliser (4)
    a = algo("m2po", clip_eps=0.2, normaliser="kept")
    out, b = _with_adv(a, batch())
    torch.testing.assert_close(b.loss_mask, t([[0, 0, 1, 1], [0, 1, 1, 0]]))  # the M2 mask replaces the loss mask
    logp = t(OLD)
    logp[0, 3] += math.log(1.5)  # r = 1.5 > 1.2 with Â > 0 → clipped: ℓ = −0.7071058·1.2·1.221403 = −1.036393, ∂ = 0
    loss, _, grad = _loss_and_grad(a, b, logp)
    torch.testing.assert_close(loss, t([[0, 0, -0.639816, -1.036393], [0, 0.954493, 0.707106, 0]]), rtol=0, atol=2e-6)
    # ∂ = ℓ/4 on the unclipped kept tokens (AReaL: −0.159954, 0, 0.238623, 0.176776)
    torch.testing.assert_close(grad, t([[0, 0, -0.159954, 0], [0, 0.238623, 0.176776, 0]]), rtol=0, atol=1e-6)


def test_m2po_threshold_and_cap_switches():
    # τ = 0.02 also masks row 1's first token (M2 0.09): ℓ there is 0
    _, b = _with_adv(algo("m2po", m2_threshold=0.02), batch())
    torch.testing.assert_close(b.extras["m2po_weight"], t([[0, 0, 0.904837, 1.221403], [0, 0, 1.0, 0]]),
                               rtol=0, atol=1e-6)
    # cap 1.2 drops e^0.2 = 1.2214 (kept by M2) and e^0.3: weights (0.904837), (1)
    out, b = _with_adv(algo("m2po", behaviour_cap=1.2), batch())
    torch.testing.assert_close(b.extras["m2po_weight"], t([[0, 0, 0.904837, 0], [0, 0, 1.0, 0]]), rtol=0, atol=1e-6)
    assert float(out.metrics["algo/m2po/behaviour_masked_frac"]) == pytest.approx(3 / 5)  # e^0.5, e^0.2, e^0.3
    # no behaviour weight: ℓ = −Â·M
    a = algo("m2po", behaviour_cap=None)
    _, b = _with_adv(a, batch())
    loss, _, _ = _loss_and_grad(a, b, t(OLD))
    torch.testing.assert_close(loss, t([[0, 0, -A, -A], [0, A, A, 0]]))


def test_m2po_on_policy_is_grpo_token_mean():
    # μ = π_old: M2 = 0, nothing masked, w = 1 → ℓ = −Â·r, GRPO's unclipped surrogate
    a = algo("m2po")
    out, b = _with_adv(a, make_batch(MASK, [0, 0], [1.0, 0.0], behav_logp=t(OLD), old_logp=t(OLD)))
    assert float(out.metrics["algo/m2po/masked_frac"]) == 0.0
    loss, _, grad = _loss_and_grad(a, b, t(OLD))
    torch.testing.assert_close(loss, t([[0, -A, -A, -A], [0, A, A, 0]]))
    torch.testing.assert_close(grad, t([[0, -A, -A, -A], [0, A, A, 0]]) / 5)
    assert a.needs == {"old_logp"} and a.old_logp_before_update
