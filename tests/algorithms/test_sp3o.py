"""SP3O: position and delimiter anchors, the segment GAE and the interpolated token GAE worked by hand,
the sparse value loss at the anchors (× |y|/K), the anchor count and gap switches, the authors'
relative anchors with token GAE, and the flatness index."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.sp3o import interpolate_values, select_anchors
from rlsuite.suite.types import Forward
from tests.algorithms.hand import D, t
from tests.algorithms.hand_full_batch import CTX, algo, make_batch, with_adv


# ========================================================================================
# SP3O — anchors, segment GAE, interpolated GAE, sparse value loss


def test_sp3o_position_and_delimiter_anchors():
    mask = torch.zeros(3, 12)
    mask[0, 2:12] = 1  # L = 10 policy tokens from column 2
    mask[1, 2:4] = 1  # L = 2 → first and last
    mask[2, 2] = 1  # L = 1 → one anchor
    # K = 4, d = 3: k = min(4, ⌊9/3⌋ + 1 = 4) → round(j·9/3) = 0, 3, 6, 9 → columns 2, 5, 8, 11
    a = select_anchors(torch.zeros(3, 12, dtype=torch.long), mask, 4, 3, "position")
    assert a[0].nonzero().squeeze(-1).tolist() == [2, 5, 8, 11]
    assert a[1].nonzero().squeeze(-1).tolist() == [2, 3] and a[2].nonzero().squeeze(-1).tolist() == [2]
    # d = 4: k = ⌊9/4⌋ + 1 = 3 → 0, round(4.5) = 5, 9 → columns 2, 7, 11;  d = 64: first and last only
    none = torch.zeros(3, 12, dtype=torch.long)
    assert select_anchors(none, mask, 4, 4, "position")[0].nonzero().squeeze(-1).tolist() == [2, 7, 11]
    assert select_anchors(none, mask, 8, 64, "position")[0].sum() == 2
    # delimiter 99 at policy indices 1, 2, 6 → candidates j = 2, 3, 7 (token after a delimiter); d = 2:
    # j = 2 (gap 2 from 0, 7 to the end) kept; j = 3 (gap 1) dropped; j = 7 (gap 5, 2 to the end) kept
    tokens = torch.zeros(3, 12, dtype=torch.long)
    tokens[0, [3, 4, 8]] = 99
    d = select_anchors(tokens, mask, 8, 2, "delimiter", (99,))
    assert d[0].nonzero().squeeze(-1).tolist() == [2, 4, 9, 11]
    assert select_anchors(tokens, mask, 3, 2, "delimiter", (99,))[0].nonzero().squeeze(-1).tolist() == [2, 4, 11]


# One response of 5 policy tokens (columns 1..5), anchors at 0, 2, 4 (K = 3, d = 2), γ = 1, λ = 0.5
SP_MASK = [[0, 1, 1, 1, 1, 1]]
SP_V = [[0, 0.5, 9.0, 0.2, 9.0, 0.8]]  # V at non-anchors (9) is ignored by the segment estimator
SP_R = [[0, 0, 0.1, 0, 0, 1.0]]
SP_CFG = {"anchor_selector": "position", "advantage": "segment", "n_anchors": 3, "min_gap": 2, "lam": 0.5,
          "whiten_adv": False, "value_clip": None}  # the reconstruction's switches (the defaults are the source's)


def sp_batch():
    return make_batch(SP_MASK, [0], [1.0], values=t(SP_V), token_rewards=t(SP_R))


def test_sp3o_segment_gae_by_hand():
    # segments: {0,1} R0 = 0.1, {2,3} R1 = 0, {4} R2 = 1;  V(anchors) = 0.5, 0.2, 0.8
    # δ2 = 1 − 0.8 = 0.2, Â2 = 0.2;  δ1 = 0 + 0.8 − 0.2 = 0.6, Â1 = 0.6 + 0.5·0.2 = 0.7
    # δ0 = 0.1 + 0.2 − 0.5 = −0.2, Â0 = −0.2 + 0.5·0.7 = 0.15;  targets Â_k + V(t_k) = 0.65, 0.9, 1.0
    out = algo("sp3o", **SP_CFG).advantages(sp_batch(), CTX)
    torch.testing.assert_close(out.adv, t([[0, 0.15, 0.15, 0.7, 0.7, 0.2]]))
    torch.testing.assert_close(out.returns, t([[0, 0.65, 0.65, 0.9, 0.9, 1.0]]))
    assert out.extras["sp3o_anchors"][0].tolist() == [0, 1, 0, 1, 0, 1]


def test_sp3o_interpolated_token_gae_by_hand():
    # Ṽ = (0.5, 0.35, 0.2, 0.5, 0.8);  token GAE with r = (0, 0.1, 0, 0, 1):
    # δ4 = 0.2 → Â4 = 0.2; δ3 = 0.8 − 0.5 = 0.3 → 0.4; δ2 = 0.5 − 0.2 = 0.3 → 0.5;
    # δ1 = 0.1 + 0.2 − 0.35 = −0.05 → 0.2; δ0 = 0.35 − 0.5 = −0.15 → −0.05
    b = sp_batch()
    torch.testing.assert_close(interpolate_values(b.values, b.loss_mask, t([[0, 1, 0, 1, 0, 1]])),
                               t([[0, 0.5, 0.35, 0.2, 0.5, 0.8]]))
    out = algo("sp3o", **{**SP_CFG, "advantage": "interpolated"}).advantages(b, CTX)
    torch.testing.assert_close(out.adv, t([[0, -0.05, 0.2, 0.5, 0.4, 0.2]]))


@pytest.mark.parametrize("cfg, expected", [
    # ½(V − G)² with V = 0.6, G = (0.65, 0.65, 0.9, 0.9, 1.0): 0.00125, 0.00125, 0.045, 0.045, 0.08
    ({}, [0, 0.00125 * 5 / 3, 0, 0.045 * 5 / 3, 0, 0.08 * 5 / 3]),  # anchors only, × |y|/K = 5/3
    ({"anchor_reweight": False}, [0, 0.00125, 0, 0.045, 0, 0.08]),
    ({"sparse_value": False}, [0, 0.00125, 0.00125, 0.045, 0.045, 0.08])])  # PPO's dense loss
def test_sp3o_sparse_value_loss(cfg, expected):
    a = algo("sp3o", **SP_CFG, **cfg)
    _, b = with_adv(a, sp_batch())
    vl, _ = a.value_loss(Forward(logp=torch.zeros(1, 6, dtype=D), values=0.6 * b.loss_mask), b, CTX)
    torch.testing.assert_close(vl, t([expected]))


def test_sp3o_anchor_count_and_gap_are_live_on_long_responses():
    mask = [[0] + [1] * 10]
    b = make_batch(mask, [0], [1.0], values=t([[0] + [0.1 * i for i in range(10)]]),
                   token_rewards=t([[0] * 10 + [1.0]]))
    sel = {"anchor_selector": "position", "advantage": "segment"}
    base = algo("sp3o", n_anchors=4, min_gap=3, lam=0.5, **sel).advantages(b, CTX)
    assert float(base.metrics["algo/sp3o/anchors_mean"]) == 4
    for change in ({"n_anchors": 3}, {"min_gap": 4}, {"min_gap": 64}):
        other = algo("sp3o", **{"n_anchors": 4, "min_gap": 3, "lam": 0.5, **sel, **change}).advantages(b, CTX)
        assert not torch.equal(other.adv, base.adv)


def test_sp3o_source_defaults_relative_anchors_and_token_gae_by_hand():
    """The authors' code: anchors at 0.3 / 0.6 / 0.9 of the response (0-based floor(f·(L − 1)), never the
    last token; a 4th at 0.95 from 6144 tokens) and PPO's token GAE on the dense values. L = 5:
    anchors 1, 2, 3 (columns 2, 3, 4). V = (0.5, 9, 0.2, 9, 0.8), r = (0, 0.1, 0, 0, 1), γ = 1, λ = ½:
    δ4 = 0.2 → Â4 = 0.2; δ3 = 0.8 − 9 = −8.2 → −8.1; δ2 = 9 − 0.2 = 8.8 → 4.75;
    δ1 = 0.1 + 0.2 − 9 = −8.7 → −6.325; δ0 = 9 − 0.5 = 8.5 → 5.3375; returns Â + V."""
    from rlsuite.algorithms.sp3o import relative_anchors
    cfg = {"lam": 0.5, "whiten_adv": False, "value_clip": None}
    out = algo("sp3o", **cfg).advantages(sp_batch(), CTX)
    assert out.extras["sp3o_anchors"][0].tolist() == [0, 0, 1, 1, 1, 0]
    torch.testing.assert_close(out.adv, t([[0, 5.3375, -6.325, 4.75, -8.1, 0.2]]))
    torch.testing.assert_close(out.returns, t([[0, 5.8375, 2.675, 4.95, 0.9, 1.0]]))
    assert relative_anchors(10, (0.3, 0.6, 0.9), 0.95, 6144) == [2, 5, 8]
    assert relative_anchors(8000, (0.3, 0.6, 0.9), 0.95, 6144) == [2399, 4799, 7199, 7599]
    assert relative_anchors(2, (0.3, 0.6, 0.9), 0.95, 6144) == [0]
    # the value loss is at those anchors only: ½(0.6 − G)² at columns 2, 3, 4 × |y|/K = 5/3
    a = algo("sp3o", **cfg)
    _, b = with_adv(a, sp_batch())
    vl, _ = a.value_loss(Forward(logp=torch.zeros(1, 6, dtype=D), values=0.6 * b.loss_mask), b, CTX)
    g = [2.675, 4.95, 0.9]
    torch.testing.assert_close(vl, t([[0, 0] + [0.5 * (0.6 - x) ** 2 * 5 / 3 for x in g] + [0]]))


def test_sp3o_flatness_index():
    # rows V = (1, 1) and (0, 2): row stds 0 and 1 → mean 0.5; batch std over (1, 1, 0, 2):
    # unbiased var = (0 + 0 + 1 + 1)/3 = 2/3 → std 0.816497 → flatness 0.5/0.816497 = 0.612372
    b = make_batch([[0, 1, 1], [0, 1, 1]], [0, 0], [1.0, 0.0], values=t([[0, 1, 1], [0, 0, 2]]),
                   token_rewards=t([[0, 0, 1.0], [0, 0, 0]]))
    m = algo("sp3o").advantages(b, CTX).metrics
    assert float(m["algo/sp3o/flatness"]) == pytest.approx(0.5 / math.sqrt(2 / 3))
