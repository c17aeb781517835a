"""The predictive divergence mask (``dppo_pdm``): the predicted first-order change of the top-K KL and
TV worked by hand and checked by a finite difference, a top-K example where it masks a token DPPO
keeps, equality with DPPO's direction rule in the binary case, the crossing rule, the realised
change on a second visit, and the rest bucket."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.dppo_pdm import DPPOPDM, DPPOPDMConfig, predicted_change
from rlsuite.suite.types import Forward
from tests.algorithms.hand import D, t
from tests.algorithms.hand_no_prompt import ctx, make_batch, with_adv


# ======================================================================================
# Predictive divergence mask

def test_predicted_change_by_hand_and_by_finite_difference():
    # π = (0.5, 0.3, 0.2), μ = (0.4, 0.35, 0.25), sampled category 0.
    # KL: g = π − μ = (0.1, −0.05, −0.05); Σπg = 0.05 − 0.015 − 0.01 = 0.025 → ΔKL = 0.1 − 0.025 = 0.075
    # TV: s = (1, −1, −1), S = 0.5 − 0.3 − 0.2 = 0; ½[0.5·1 − (0.25 − 0.09 − 0.04)] = ½(0.5 − 0.12) = 0.19
    pi, mu, one = t([[[0.5, 0.3, 0.2]]]), t([[[0.4, 0.35, 0.25]]]), t([[[1.0, 0.0, 0.0]]])
    assert float(predicted_change(pi, mu, one, "topk_kl")) == pytest.approx(0.075)
    assert float(predicted_change(pi, mu, one, "topk_tv")) == pytest.approx(0.19)
    z, h = pi[0, 0].log(), 1e-6  # one logit step Δz = h·(e_a − π)
    z2 = z + h * (one[0, 0] - pi[0, 0])
    p2 = torch.softmax(z2, -1)
    kl = lambda p: float((mu[0, 0] * (mu[0, 0] / p).log()).sum())
    tv = lambda p: float(0.5 * (mu[0, 0] - p).abs().sum())
    assert (kl(p2) - kl(pi[0, 0])) / h == pytest.approx(0.075, rel=1e-4)
    assert (tv(p2) - tv(pi[0, 0])) / h == pytest.approx(0.19, rel=1e-4)


def pdm_batch(tokens, topk_ids, behav_topk, logp, behav, adv):
    b = make_batch([[1]] * len(adv), list(range(len(adv))), [0.0] * len(adv), behav=t(behav),
                   topk_ids=torch.tensor(topk_ids), topk_logp=t(behav_topk).log())
    b = dataclasses.replace(b, tokens=torch.tensor(tokens))
    return with_adv(b, adv), t(logp)


def test_predictive_mask_disagrees_with_dppo_on_a_topk_example():
    # Top-K (K = 2) KL: μ = (b 0.7, a 0.3), rest ≈ 0; π = (b 0.5, a 0.29), rest 0.21; sampled a, A = +1.
    # D = 0.7 ln(0.7/0.5) + 0.3 ln(0.3/0.29) ≈ 0.2457 > δ_KL 0.05. DPPO: p < q, so A > 0 did not push
    # it out → kept. Predictive: g = (−0.2, −0.01, 0.21), Σπg = −0.1 − 0.0029 + 0.0441 = −0.0588,
    # ΔKL = −0.01 + 0.0588 = 0.0488 > 0 → masked. Kept loss: −(0.29/0.3)·ln 0.29 = 1.196612.
    b, logp = pdm_batch([[7]], [[[5, 7]]], [[[0.7, 0.3]]], [[math.log(0.29)]], [[math.log(0.3)]], [1.0])
    fwd = Forward(logp=logp, topk_logp=t([[[0.5, 0.29]]]).log())
    pred, m = DPPOPDM(DPPOPDMConfig(divergence="topk_kl")).loss(fwd, b, ctx())
    dppo, _ = DPPOPDM(DPPOPDMConfig(divergence="topk_kl", criterion="dppo")).loss(fwd, b, ctx())
    assert float(pred) == 0.0 and float(dppo) == pytest.approx(1.196612, abs=1e-5)
    assert float(m["algo/dppo_pdm/disagree_frac"]) == 1.0 and float(m["algo/dppo_pdm/masked_pos_frac"]) == 1.0
    assert "algo/dppo_pdm/topk_kl_mean" in m


def test_predictive_mask_equals_dppo_direction_in_the_binary_case():
    g = torch.Generator().manual_seed(0)
    logp, behav = -torch.rand(64, 1, generator=g, dtype=D) * 2, -torch.rand(64, 1, generator=g, dtype=D) * 2
    adv = torch.randn(64, generator=g, dtype=D)
    b = with_adv(make_batch([[1]] * 64, list(range(64)), [0.0] * 64, behav=behav), adv)
    for div in ("tv", "kl"):
        a = DPPOPDM(DPPOPDMConfig(divergence=div)).loss(Forward(logp=logp), b, ctx())
        d = DPPOPDM(DPPOPDMConfig(divergence=div, criterion="dppo")).loss(Forward(logp=logp), b, ctx())
        assert torch.equal(a[0], d[0]) and float(a[1]["stats/clip_frac"]) > 0  # ΔD_bin ∝ A(1−p)(p−q)


def test_crossing_rule_and_direction_switch():
    # Binary TV, p = 0.4, q = 0.3, A = +1: D = 0.1 < 0.15. ΔTV/η: π = (0.4, 0.6), μ = (0.3, 0.7),
    # s = (1, −1), S = −0.2: ½[0.4·1.2 − (0.16·1.2 − 0.36·0.8)] = ½(0.48 + 0.096) = 0.288.
    # η = 0.2: 0.1 + 0.0576 > 0.15 → masked; η = 0.1: 0.1288 → kept, loss −(4/3)·ln 0.4 = 1.221721.
    b, logp = pdm_batch([[1]], [[[1, 2]]], [[[0.3, 0.2]]], [[math.log(0.4)]], [[math.log(0.3)]], [1.0])
    cfg = DPPOPDMConfig(divergence="tv")
    assert float(DPPOPDM(cfg).loss(Forward(logp=logp), b, ctx())[0]) == pytest.approx(1.221721, abs=1e-5)
    assert float(DPPOPDM(dataclasses.replace(cfg, crossing_eta=0.1)).loss(Forward(logp=logp), b, ctx())[0]) > 0
    assert float(DPPOPDM(dataclasses.replace(cfg, crossing_eta=0.2)).loss(Forward(logp=logp), b, ctx())[0]) == 0
    # p = 0.1 < q = 0.3 with A = +1: D = 0.2 > δ but moved against A → kept; direction = False masks it
    b, logp = pdm_batch([[1]], [[[1, 2]]], [[[0.3, 0.2]]], [[math.log(0.1)]], [[math.log(0.3)]], [1.0])
    assert float(DPPOPDM(cfg).loss(Forward(logp=logp), b, ctx())[0]) > 0
    assert float(DPPOPDM(dataclasses.replace(cfg, direction=False)).loss(Forward(logp=logp), b, ctx())[0]) == 0


def test_realised_divergence_change_on_a_second_visit():
    # binary TV, q = 0.3, A = +1: first visit p = 0.4 (D = 0.1, ΔD_pred > 0); after an "update" the
    # same row comes back with p = 0.45 (D = 0.15): realised +0.05, same sign as predicted
    algo = DPPOPDM(DPPOPDMConfig(divergence="tv"))
    b, logp = pdm_batch([[1]], [[[1, 2]]], [[[0.3, 0.2]]], [[math.log(0.4)]], [[math.log(0.3)]], [1.0])
    _, m1 = algo.loss(Forward(logp=logp), b, ctx())
    assert "algo/dppo_pdm/realised_mean" not in m1  # first visit: nothing to compare
    _, m2 = algo.loss(Forward(logp=t([[math.log(0.45)]])), b, ctx())
    assert float(m2["algo/dppo_pdm/realised_mean"]) == pytest.approx(0.05, abs=1e-6)
    assert float(m2["algo/dppo_pdm/sign_agreement"]) == 1.0 and float(m2["algo/dppo_pdm/realised_up_frac"]) == 1.0
    _, m3 = algo.loss(Forward(logp=logp), b, ctx(step=2))  # a new step starts afresh
    assert "algo/dppo_pdm/realised_mean" not in m3


def test_topk_rest_bucket_gets_the_sampled_token():
    from rlsuite.algorithms.dppo_pdm import categories
    pi, mu, one = categories(None, None, "topk_tv", t([[[0.5, 0.2]]]).log(), t([[[0.6, 0.3]]]).log(),
                             torch.tensor([[[3, 4]]]), torch.tensor([[9]]))
    torch.testing.assert_close(one, t([[[0.0, 0.0, 1.0]]]))
    torch.testing.assert_close(pi, t([[[0.5, 0.2, 0.3]]]))
    torch.testing.assert_close(mu, t([[[0.6, 0.3, 0.1]]]))
