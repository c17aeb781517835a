"""COPC: the weighted GAE Â_t = w_t·δ_t + γλ·w_t·Â_{t+1} with ρ = π_old/μ worked by hand for every
switch (coupled mask, two- and one-sided weight clip, mask band, weight cap, plain GAE), the
masked actor and critic losses and the ESS metrics, the staleness histogram, and equality with PPO
on policy."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from rlsuite.suite.types import Forward
from tests.algorithms.hand import D, t
from tests.algorithms.hand_full_batch import CTX, algo, make_batch, with_adv


LN = math.log


# ========================================================================================
# COPC — ρ = π_old/μ; M = 1[c_min ≤ ρ ≤ c_max]; Â_t = w_t·δ_t + γλ·w_t·Â_{t+1}

# One response of 3 tokens, γ = 1, λ = 0.5, V = (0.5, 0.4, 0.3), r = (0, 0, 1), ρ = (1.5, 0.25, 3)
# δ: δ2 = 1 − 0.3 = 0.7, δ1 = 0.3 − 0.4 = −0.1, δ0 = 0.4 − 0.5 = −0.1
CO_MASK = [[0, 1, 1, 1]]
CO_CFG = {"lam": 0.5, "whiten_adv": False, "value_clip": None}


def co_batch(policy_version=0):
    return make_batch(CO_MASK, [0], [1.0], values=t([[0, 0.5, 0.4, 0.3]]), token_rewards=t([[0, 0, 0, 1.0]]),
                      old_logp=t([[0, LN(1.5), LN(0.25), LN(3.0)]]), behav_logp=torch.zeros(1, 4, dtype=D),
                      policy_version=torch.tensor([policy_version]))


@pytest.mark.parametrize("cfg, adv", [
    # decoupled, two-sided w = clip(ρ, 0.5, 2) = (1.5, 0.5, 2): Â2 = 2·0.7 = 1.4;
    # Â1 = 0.5·(−0.1 + 0.5·1.4) = 0.3;  Â0 = 1.5·(−0.1 + 0.5·0.3) = 0.075
    ({"coupled": False}, [0.075, 0.3, 1.4]),
    # one-sided (V-trace) w = min(ρ, 2) = (1.5, 0.25, 2): Â1 = 0.25·0.6 = 0.15; Â0 = 1.5·(−0.1 + 0.075) = −0.0375
    ({"coupled": False, "weight_clip_mode": "one_sided"}, [-0.0375, 0.15, 1.4]),
    # coupled (default): M = (1, 0, 0) with [0.5, 2] → w = (1.5, 0, 0): Â0 = 1.5·(−0.1) = −0.15
    ({}, [-0.15, 0.0, 0.0]),
    # mask off: nothing is cut, as decoupled
    ({"mask": False}, [0.075, 0.3, 1.4]),
    # mask band [0.2, 4]: all kept → as decoupled;  symmetric band null → [1/2, 2] as default
    ({"mask_low": 0.2, "mask_high": 4.0}, [0.075, 0.3, 1.4]),
    ({"mask_low": None}, [-0.15, 0.0, 0.0]),
    # c̄ = 4: w = clip(ρ, 0.25, 4) = (1.5, 0.25, 3): Â2 = 2.1, Â1 = 0.25·(−0.1 + 1.05) = 0.2375,
    # Â0 = 1.5·(−0.1 + 0.11875) = 0.028125
    ({"coupled": False, "weight_clip": 4.0}, [0.028125, 0.2375, 2.1]),
    # weighted GAE off: plain GAE Â2 = 0.7, Â1 = −0.1 + 0.35 = 0.25, Â0 = −0.1 + 0.125 = 0.025
    ({"weighted_gae": False}, [0.025, 0.25, 0.7])])
def test_copc_weighted_gae_by_hand(cfg, adv):
    out = algo("copc", **CO_CFG, **cfg).advantages(co_batch(), CTX)
    torch.testing.assert_close(out.adv, t([[0] + adv]))
    torch.testing.assert_close(out.returns, t([[0] + [a + v for a, v in zip(adv, (0.5, 0.4, 0.3))]]))


def test_copc_mask_loss_value_loss_and_metrics():
    a = algo("copc", **CO_CFG, coupled=False)
    out, b = with_adv(a, co_batch())
    m = out.metrics
    # w = (1.5, 0.5, 2): ESS = (Σw)²/Σw² = 16/6.5 = 2.461538, /3 tokens = 0.820513; clipped 2/3; masked 2/3
    assert float(m["algo/copc/ess"]) == pytest.approx(16 / 6.5)
    assert float(m["algo/copc/ess_frac"]) == pytest.approx(16 / 19.5)
    assert float(m["algo/copc/clipped_frac"]) == pytest.approx(2 / 3)
    assert float(m["algo/copc/masked_frac"]) == pytest.approx(2 / 3)
    # actor: ratio 1 → ℓ = −Â only on the kept token 0 (−0.075); masked tokens give 0
    loss, _ = a.loss(Forward(logp=b.old_logp), b, CTX)
    torch.testing.assert_close(loss, t([[0, -0.075, 0, 0]]))
    off = algo("copc", **CO_CFG, coupled=False, mask=False)
    _, bo = with_adv(off, co_batch())
    loss, _ = off.loss(Forward(logp=b.old_logp), bo, CTX)
    torch.testing.assert_close(loss, t([[0, -0.075, -0.3, -1.4]]))  # mask off: stale tokens stay in the actor loss
    # critic: decoupled → every token; coupled → only the kept token. V = returns − 0.1 → ½·0.01 = 0.005
    v = (b.returns - 0.1) * b.loss_mask
    vl, _ = a.value_loss(Forward(logp=b.old_logp, values=v), b, CTX)
    torch.testing.assert_close(vl, t([[0, 0.005, 0.005, 0.005]]))
    c = algo("copc", **CO_CFG)
    _, bc = with_adv(c, co_batch())
    vl, _ = c.value_loss(Forward(logp=b.old_logp, values=(bc.returns - 0.1) * b.loss_mask), bc, CTX)
    torch.testing.assert_close(vl, t([[0, 0.005, 0, 0]]))


def test_copc_staleness_histogram_counts_updates():
    a = algo("copc")
    for _ in range(6):
        a.after_update(SimpleNamespace())
    b = dataclasses.replace(co_batch(), policy_version=torch.tensor([5]))  # 6 − 5 = 1 update stale
    m = a.advantages(b, CTX).metrics
    assert m["algo/copc/staleness_frac_1"] == 1 and m["algo/copc/staleness_frac_0"] == 0
    m = a.advantages(dataclasses.replace(b, policy_version=torch.tensor([1])), CTX).metrics  # 5 stale
    assert m["algo/copc/staleness_frac_4to7"] == 1
    fresh = algo("copc")
    fresh.load_state_dict(a.state_dict())
    assert fresh.updates == 6


def test_copc_on_policy_is_ppo():
    b = dataclasses.replace(co_batch(), behav_logp=co_batch().old_logp)  # μ = π_old: ρ = 1
    torch.testing.assert_close(algo("copc", lam=0.95).advantages(b, CTX).adv,
                               algo("ppo", lam=0.95).advantages(b, CTX).adv)
