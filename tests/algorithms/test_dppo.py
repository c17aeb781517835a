"""DPPO: the binary TV and KL divergences, the divergence mask with the direction criterion, truncated
IS with cap C, the clip fractions (ours and verl's), the anchor μ or π_old, the mean-only advantage,
and the top-K divergences and mask, all worked by hand."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms.dppo import binary_divergence, topk_divergence
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, LN, algo, grad_of_agg, make_batch, t


# ========================================================================================
# dppo — divergence mask with the direction criterion, truncated IS, anchor μ

def test_dppo_binary_divergences_by_hand():
    p = t([[0.5, 0.5, 0.25, 0.3, 0.6]])
    q = t([[0.25, 0.45, 0.5, 0.5, 0.5]])
    # TV = |p − q|: 0.25, 0.05, 0.25, 0.2, 0.1
    torch.testing.assert_close(binary_divergence(p.log(), q.log(), "tv"), t([[0.25, 0.05, 0.25, 0.2, 0.1]]))
    # KL(Bern(q) ‖ Bern(p)) = q ln(q/p) + (1−q) ln((1−q)/(1−p)):
    #  (p .5, q .25): .25 ln .5 + .75 ln 1.5 = −0.173287 + 0.304099 = 0.130812
    #  (p .5, q .45): .45 ln .9 + .55 ln 1.1 = −0.047412 + 0.052421 = 0.005008
    #  (p .25, q .5): .5 ln 2 + .5 ln(2/3)   = 0.346574 − 0.202733 = 0.143841 (≠ 0.130812: direction)
    #  (p .3, q .5):  .5 ln(5/3) + .5 ln(5/7) = 0.255413 − 0.168236 = 0.087177
    #  (p .6, q .5):  .5 ln(5/6) + .5 ln(5/4) = −0.091161 + 0.111572 = 0.020411
    kl = binary_divergence(p.log(), q.log(), "kl")
    torch.testing.assert_close(kl, t([[0.130812, 0.005008, 0.143841, 0.087177, 0.020411]]), rtol=0, atol=2e-6)


# six one-token rows: (Â, p, q)
DPPO_ROWS = [(1.0, 0.5, 0.3),     # D_TV 0.2 > 0.15, p > q, Â > 0 → moved with Â → masked
             (-1.0, 0.5, 0.3),    # same D, Â < 0, moved against Â → kept
             (-1.0, 0.3, 0.5),    # p < q, Â < 0 → masked
             (1.0, 0.3, 0.5),     # p < q, Â > 0 → kept
             (1.0, 0.6, 0.5),     # D 0.1 inside → kept
             (-1.0, 0.4, 0.5)]    # D 0.1 inside → kept


def _dppo_rows(rows, old=None):
    adv = t([[0, r[0]] for r in rows])
    logp = t([[0, LN(r[1])] for r in rows])
    behav = t([[0, LN(r[2])] for r in rows])
    batch = make_batch([[0, 1]] * len(rows), list(range(len(rows))), [0.0] * len(rows),
                       adv=adv, behav_logp=behav, old_logp=old)
    return batch, logp


@pytest.mark.parametrize("direction, kept", [(True, [0, 1, 0, 1, 1, 1]), (False, [0, 0, 0, 0, 1, 1])])
def test_dppo_tv_direction_criterion(direction, kept):
    a = algo("dppo", direction=direction)            # TV, δ 0.15, C 10, anchor μ
    batch, logp = _dppo_rows(DPPO_ROWS)
    ctx = dataclasses.replace(CTX, max_new_tokens=1)
    loss, m, grad = grad_of_agg(a, logp, batch, ctx)
    # ℓ = −Â·min(p/q, C)·M·ln p; ∂ℓ/∂ln p = −Â·w·M
    # row 1: w = 5/3, ℓ = (5/3)·ln 0.5 = −1.155245;  row 3: w = 0.6, ℓ = −0.6·ln 0.3 = 0.722384
    # row 4: w = 1.2, ℓ = −1.2·ln 0.6 = 0.612991;     row 5: w = 0.8, ℓ = 0.8·ln 0.4 = −0.733033
    # rows 0 and 2 (w 5/3 and 0.6) are masked; with direction off rows 1 and 3 are masked too
    full = [-1.0 * 5 / 3 * LN(0.5), 1.0 * 5 / 3 * LN(0.5), 0.6 * LN(0.3), -0.6 * LN(0.3), -1.2 * LN(0.6), 0.8 * LN(0.4)]
    torch.testing.assert_close(loss[:, 1], t(full) * t(kept), rtol=1e-6, atol=1e-6)
    if kept[1]:
        assert loss[1, 1].item() == pytest.approx(-1.155245, abs=1e-6)
    assert loss[4, 1].item() == pytest.approx(0.612991, abs=1e-6)
    # seq-mean-token-sum-norm with N = 6, L = 1: ∂/∂ln p = −Â·w·M/6
    g = [-5 / 3, 5 / 3, 0.6, -0.6, -1.2, 0.8]
    torch.testing.assert_close(grad[:, 1], t(g) * t(kept) / 6)
    n_masked = 6 - sum(kept)
    assert m["stats/clip_frac"].item() == pytest.approx(n_masked / 6)
    assert m["algo/dppo/masked_pos_frac"].item() == pytest.approx((2 if not direction else 1) / 6)
    assert m["algo/dppo/masked_neg_frac"].item() == pytest.approx((2 if not direction else 1) / 6)


def test_dppo_binary_kl_mask():
    # δ_KL = 0.05, all Â > 0:
    # (p .5, q .25): KL 0.130812 > δ, p > q → masked
    # (p .5, q .45): KL 0.005008 ≤ δ → kept, w = 10/9, ℓ = −(10/9)·ln 0.5 = 0.770164
    # (p .25, q .5): KL 0.143841 > δ but p < q (moved against Â) → kept, w 0.5, ℓ = −0.5·ln 0.25 = 0.693147
    a = algo("dppo", divergence="kl")
    batch, logp = _dppo_rows([(1.0, 0.5, 0.25), (1.0, 0.5, 0.45), (1.0, 0.25, 0.5)])
    loss, m = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss[:, 1], t([0.0, 0.770164, 0.693147]), rtol=0, atol=2e-6)
    # mean divergence (0.130812 + 0.005008 + 0.143841)/3 = 0.093220
    assert m["algo/dppo/div_mean"].item() == pytest.approx(0.093220, abs=2e-6)
    assert m["stats/clip_frac"].item() == pytest.approx(1 / 3)


def test_dppo_tis_cap():
    # Â = −1, p = 0.5, q = 0.025: ρ = 20; D_TV 0.475 > δ but p > q moves against Â → kept
    # C = 10: ℓ = −(−1)·10·ln 0.5 = −6.931472, gradient +10;  C = 1e4: ℓ = 20·ln 0.5 = −13.862944
    batch, logp = _dppo_rows([(-1.0, 0.5, 0.025)])
    loss, m, grad = grad_of_agg(algo("dppo"), logp, batch, dataclasses.replace(CTX, max_new_tokens=1))
    assert loss[0, 1].item() == pytest.approx(-6.931472, abs=1e-6)
    assert grad[0, 1].item() == pytest.approx(10.0)
    assert m["algo/dppo/tis_clip_frac"].item() == pytest.approx(1.0)
    loss, m = algo("dppo", tis_cap=1e4).loss(Forward(logp=logp), batch, CTX)
    assert loss[0, 1].item() == pytest.approx(-13.862944, abs=1e-6)
    assert m["algo/dppo/tis_clip_frac"].item() == pytest.approx(0.0)


def test_dppo_clip_fractions_ours_and_verl_s():
    # (Â, p, q), δ_TV 0.15, C 10, one response token a row (5 tokens):
    # r0 (+1, .5, .3):   D .2 > δ, p > q, Â > 0 → masked (ours and verl's)
    # r1 ( 0, .2, .5):   D .3 > δ, p < q, Â = 0 → kept by ours (no push); verl's A ≤ 0 rule: invalid
    # r2 (−1, .5, .04):  ratio 12.5 > C; p > q moves against Â → kept: truncated and kept
    # r3 (+1, .6, .05):  ratio 12 > C but D .55 > δ, p > q → masked: truncated, not kept
    # r4 (−1, .3, .3):   kept, ratio 1
    batch, logp = _dppo_rows([(1.0, 0.5, 0.3), (0.0, 0.2, 0.5), (-1.0, 0.5, 0.04), (1.0, 0.6, 0.05),
                              (-1.0, 0.3, 0.3)])
    _, m = algo("dppo").loss(Forward(logp=logp), batch, CTX)
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 4)          # masked r0, r3 of the 4 with Â ≠ 0
    assert m["algo/dppo/tis_clip_frac"].item() == pytest.approx(1 / 5)  # r2 only: r3 is masked
    assert m["algo/dppo/pg_clipfrac"].item() == pytest.approx(3 / 5)    # verl: r0, r1, r3 of all 5
    assert m["algo/dppo/pg_clipfrac_lower"].item() == pytest.approx(1 / 5)  # verl: r2 (kept, ratio > C)


def test_dppo_anchor_behaviour_vs_old():
    # row 0: Â = 1, p = 0.5, μ = 0.3, π_old = 0.5
    #   anchor μ: D 0.2 > δ, p > q → masked, ℓ = 0;  anchor old: D 0, w 1 → ℓ = −ln 0.5 = 0.693147
    # row 1: Â = 1, p = 0.5, μ = 0.45, π_old = 0.3
    #   anchor μ: D 0.05 → kept, w = 0.5/0.45 → ℓ = −(10/9)·ln 0.5 = 0.770164;  anchor old: masked
    old = t([[0, LN(0.5)], [0, LN(0.3)]])
    batch, logp = _dppo_rows([(1.0, 0.5, 0.3), (1.0, 0.5, 0.45)], old=old)
    a_mu, a_old = algo("dppo"), algo("dppo", anchor="old")
    assert "old_logp" not in a_mu.needs and "old_logp" in a_old.needs
    loss, _ = a_mu.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss[:, 1], t([0.0, 0.770164]), rtol=0, atol=1e-6)
    loss, _ = a_old.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss[:, 1], t([0.693147, 0.0]), rtol=0, atol=1e-6)


def test_dppo_advantage_mean_only():
    a = algo("dppo")
    assert a.aggregation == "seq-mean-token-sum-norm"
    batch = make_batch([[0, 1]] * 3, [0, 0, 0], [1.0, 0.0, 0.0])
    torch.testing.assert_close(a.advantages(batch, CTX).adv[:, 1], t([2 / 3, -1 / 3, -1 / 3]))


# Top-K (K = 2) + rest bucket, 3 response positions, Â = −1, sampled token = μ's top-1:
#   pos 1: μ (0.5, 0.3 | rest 0.2), π (0.4, 0.3 | rest 0.3)
#          TV = ½(0.1 + 0 + 0.1) = 0.1;  KL = 0.5 ln(5/4) + 0.3 ln 1 + 0.2 ln(2/3) = 0.111572 − 0.081093 = 0.030479
#   pos 2: μ (0.6, 0.2 | 0.2), π (0.3, 0.2 | 0.5)
#          TV = ½(0.3 + 0 + 0.3) = 0.3;   KL = 0.6 ln 2 + 0.2 ln 0.4 = 0.415888 − 0.183258 = 0.232630
#   pos 3: μ (0.5, 0.3 | 0.2), π (0.45, 0.1 | 0.45)
#          TV = ½(0.05 + 0.2 + 0.25) = 0.25; KL = 0.5 ln(10/9) + 0.3 ln 3 + 0.2 ln(4/9)
#          = 0.052680 + 0.329584 − 0.162186 = 0.220078
MU_K = [[0.5, 0.3], [0.5, 0.3], [0.6, 0.2], [0.5, 0.3]]      # position 0 is the prompt
PI_K = [[0.5, 0.3], [0.4, 0.3], [0.3, 0.2], [0.45, 0.1]]


def test_dppo_topk_divergences_by_hand():
    mu, pi = t(MU_K).log()[None], t(PI_K).log()[None]
    torch.testing.assert_close(topk_divergence(pi, mu, "topk_tv")[0, 1:], t([0.1, 0.3, 0.25]))
    kl = t([0.5 * LN(5 / 4) + 0.2 * LN(2 / 3), 0.6 * LN(2) + 0.2 * LN(0.4),
            0.5 * LN(10 / 9) + 0.3 * LN(3) + 0.2 * LN(4 / 9)])
    torch.testing.assert_close(kl, t([0.030479, 0.232630, 0.220078]), rtol=0, atol=1e-6)
    torch.testing.assert_close(topk_divergence(pi, mu, "topk_kl")[0, 1:], kl)


@pytest.mark.parametrize("div, div_mean", [("topk_tv", (0.1 + 0.3 + 0.25) / 3),
                                           ("topk_kl", (0.030479 + 0.232630 + 0.220078) / 3)])
def test_dppo_topk_mask_and_loss(div, div_mean):
    a = algo("dppo", divergence=div)
    assert "topk" in a.needs
    # sampled token p/q: pos 1: 0.4/0.5, pos 2: 0.3/0.6, pos 3: 0.45/0.5 — all p < q with Â < 0
    # (moved with Â), so the mask is D > δ: TV (δ .15): 0.1 kept, 0.3 and 0.25 masked;
    # KL (δ .05): 0.030 kept, 0.233 and 0.220 masked.  (Binary TV would keep pos 3: |0.45 − 0.5| = 0.05.)
    # pos 1: w = 0.8, ℓ = −(−1)·0.8·ln 0.4 = −0.733033
    logp = t([[0, LN(0.4), LN(0.3), LN(0.45)]])
    behav = t([[0, LN(0.5), LN(0.6), LN(0.5)]])
    batch = make_batch([[0, 1, 1, 1]], [0], [0.0], adv=t([[0, -1.0, -1.0, -1.0]]), behav_logp=behav,
                       topk_ids=torch.zeros(1, 4, 2, dtype=torch.long), topk_logp=t(MU_K).log()[None])
    loss, m = a.loss(Forward(logp=logp, topk_logp=t(PI_K).log()[None]), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -0.733033, 0, 0]]), rtol=0, atol=1e-6)
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 3)
    assert m["algo/dppo/div_mean"].item() == pytest.approx(div_mean, abs=1e-6)
    # the binary-TV counterpart keeps pos 3: w 0.9, ℓ = 0.9·ln 0.45 = −0.718657
    loss_bin, _ = algo("dppo").loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss_bin, t([[0, -0.733033, 0, -0.718657]]), rtol=0, atol=1e-6)
