"""Hand-computed examples for the seed-paper entries GGPO, AGRO, SP3O, COPC and DC-GRPO
(definitions in their module docstrings), and one test per ablation switch that it changes what it
claims. Every expected number is worked out in the comments from the reference formulas,
never by calling the code under test.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.algorithms.sp3o import interpolate_values, select_anchors
from rlsuite.suite.aggregation import aggregate
from tests.fakes import hand_batch, hook_ctx
from rlsuite.suite.types import Batch, Forward

D = torch.float64
LN = math.log
R3 = math.sqrt(3.0)
CTX = hook_ctx(gen_seed=0, max_new_tokens=3, group_size=3, prompts_per_step=1)


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(name=name, **cfg))


def make_batch(loss_mask, group_id, rewards, **kw) -> Batch:
    """Prompt width 1; every field the entries read can be given through ``kw`` (lists become
    float64 tensors)."""
    B, T = t(loss_mask).shape
    zeros = {k: torch.zeros(B, T, dtype=D) for k in ("old_logp", "ref_logp", "values", "token_rewards")}
    return hand_batch(loss_mask, group_id, rewards, prompt_turns=False, dtype=D, **{**zeros, **kw})


def with_adv(alg, batch):
    out = alg.advantages(batch, CTX)
    return out, dataclasses.replace(batch, adv=out.adv, returns=out.returns, extras={**batch.extras, **out.extras})


# ========================================================================================
# GGPO / AGRO — U_i = R_i − β·Σ_t(log π_old − log π_ref); Φ = β·log mean exp(U/β); Â_i = U_i − Φ

GG_MASK = [[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 1, 0], [0, 1, 0]]
GG_LOGR = [[0, 0.2, 0.2], [0, -0.4, 0], [0, 0.4, 0.0], [0, 0, 0], [0, 0, 0]]  # log π_old − log π_ref
GG_R = [1.0, 0.0, 0.0, 1.0, 1.0]
# β = 0.5.  Group 0: U = 1 − 0.5·0.4 = 0.8;  0 − 0.5·(−0.4) = 0.2;  0 − 0.5·0.4 = −0.2
#   Φ = 0.5·ln((e^1.6 + e^0.4 + e^−0.4)/3) = 0.5·ln((4.953032 + 1.491825 + 0.670320)/3) = 0.5·ln 2.371726
#     = 0.431809;  gaps 0.368191, −0.231809, −0.631809;  Ū = 0.8/3 = 0.266667, Φ − Ū = 0.165142
#   mean contrast (AGRO): 0.8 − 0.266667 = 0.533333, −0.066667, −0.466667
# Group 1: U = (1, 1) → Φ = Ū = 1, zero gap (generation consistency holds)
PHI = 0.4318089216031399
GG_BATCH = make_batch(GG_MASK, [0, 0, 0, 1, 1], GG_R, ref_logp=-t(GG_LOGR))  # old = 0, ref = −(old − ref)


@pytest.mark.parametrize("contrast, gaps", [
    ("log_mean_exp", [0.8 - PHI, 0.2 - PHI, -0.2 - PHI, 0.0, 0.0]),
    ("mean", [0.8 - 0.8 / 3, 0.2 - 0.8 / 3, -0.2 - 0.8 / 3, 0.0, 0.0])])
def test_ggpo_gibbs_gap_and_agro_mean_contrast(contrast, gaps):
    out = algo("ggpo", beta=0.5, contrast=contrast).advantages(GG_BATCH, CTX)
    torch.testing.assert_close(out.adv, t(gaps)[:, None] * t(GG_MASK))
    m = out.metrics
    # Φ − Ū per sample: group 0 (3 samples) 0.165142, group 1 0 → mean 3·0.165142/5 = 0.099085
    assert float(m["algo/ggpo/phi_minus_ubar"]) == pytest.approx(0.0990853530, abs=1e-7)
    # sequence k1 KL to π_ref: (0.4 − 0.4 + 0.4 + 0 + 0)/5 = 0.08
    assert float(m["algo/ggpo/kl_ref"]) == pytest.approx(0.08)
    assert float(m["algo/ggpo/gibbs_gap_mean"]) == pytest.approx(sum(gaps) / 5)


def test_ggpo_beta_enters_u_and_the_temperature():
    # β = 1: U = 1 − 0.4 = 0.6, 0 + 0.4 = 0.4, −0.4;  Φ = ln((e^0.6 + e^0.4 + e^−0.4)/3)
    #   = ln((1.822119 + 1.491825 + 0.670320)/3) = ln 1.328088 = 0.283740
    out = algo("ggpo", beta=1.0).advantages(GG_BATCH, CTX)
    phi = math.log((math.exp(0.6) + math.exp(0.4) + math.exp(-0.4)) / 3)
    torch.testing.assert_close(out.adv[:3, 1], t([0.6 - phi, 0.4 - phi, -0.4 - phi]))


def test_ggpo_loss_types():
    a = algo("ggpo", beta=0.5)
    _, b = with_adv(a, GG_BATCH)
    logp = t([[0, 0.1, 0.1], [0, -0.6, 0], [0, -2.0, -1.0], [0, -0.5, 0], [0, -0.5, 0]])  # π_θ ≠ π_old (= 0)
    # reinforce: ℓ = −sg(Â)·log π → row 0: −0.368191·0.1 = −0.0368191 per token
    loss, _ = a.loss(Forward(logp=logp), b, CTX)
    assert float(loss[0, 1]) == pytest.approx(-(0.8 - PHI) * 0.1)
    # squared_gap: live gap with π_θ: row 0 U(θ) = 1 − 0.5·(0.3 + 0.3) = 0.7 → 0.7 − Φ = 0.268191
    # (the gradient of ½(U(θ) − Φ)²/β w.r.t. log π_t is −(U(θ) − Φ)); row 1 (ref 0.4): U(θ) = 0 − 0.5·(−0.6 − 0.4)
    # = 0.5 → 0.5 − Φ = 0.068191
    sq = algo("ggpo", beta=0.5, loss_type="squared_gap")
    x = logp.clone().requires_grad_(True)
    loss, _ = sq.loss(Forward(logp=x), b, CTX)
    loss.sum().backward()
    assert float(x.grad[0, 1]) == pytest.approx(-(0.7 - PHI)) and float(x.grad[1, 1]) == pytest.approx(-(0.5 - PHI))
    y = logp.clone().requires_grad_(True)  # the same gradient from the squared gap written out
    u = t(GG_R) - 0.5 * ((y - b.ref_logp) * b.loss_mask).sum(-1)
    (0.5 * (u - b.extras["ggpo_baseline"]).square() / 0.5).sum().backward()
    torch.testing.assert_close(x.grad * b.loss_mask, y.grad * b.loss_mask)
    # ppo_clip: ratio e^0.1 = 1.105171 inside 1 ± 0.2 → ℓ = −Â·r = −0.368191·1.105171
    loss, _ = algo("ggpo", beta=0.5, loss_type="ppo_clip").loss(Forward(logp=logp), b, CTX)
    assert float(loss[0, 1]) == pytest.approx(-(0.8 - PHI) * math.exp(0.1))


def test_agro_defaults_and_sequence_sum_gradient():
    a = algo("agro", beta=0.5)
    assert a.cfg.contrast == "mean" and a.cfg.refresh_every is None and a.aggregation == "seq-mean-token-sum"
    _, b = with_adv(a, GG_BATCH)
    x = torch.zeros(5, 3, dtype=D, requires_grad=True)
    loss, _ = a.loss(Forward(logp=x), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, 3).backward()
    # seq-mean-token-sum: ∂/∂log π_it = −Â_i/N on every token of y_i; N = 5: row 0 −0.533333/5 = −0.106667
    torch.testing.assert_close(x.grad[0], t([0, -(0.8 - 0.8 / 3) / 5, -(0.8 - 0.8 / 3) / 5]))


def test_ggpo_reference_refresh_every_t_updates_and_logging():
    a, calls = algo("ggpo", refresh_every=2), []
    ctx = SimpleNamespace(refresh_reference=lambda: calls.append(1))
    assert a.advantages(GG_BATCH, CTX).metrics["algo/ggpo/refreshed"] == 0
    a.after_update(ctx), a.after_update(ctx)  # update 2 → refresh
    m = a.advantages(GG_BATCH, CTX).metrics  # this batch is scored with the fresh π_ref
    assert len(calls) == 1 and m["algo/ggpo/refreshed"] == 1 and m["algo/ggpo/refreshes"] == 1
    a.after_update(ctx)  # update 3: no refresh; the logged event is committed
    assert a.advantages(GG_BATCH, CTX).metrics["algo/ggpo/refreshed"] == 0
    for _ in range(5):  # updates 4..8 → refreshes at 4, 6, 8
        a.after_update(ctx)
    assert len(calls) == 4 and a.state_dict()["updates"] == 8
    b = algo("ggpo", refresh_every=2)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    never = algo("ggpo", refresh_every=None)
    for _ in range(10):
        never.after_update(ctx)
    assert len(calls) == 4
    for _ in range(2):
        algo("ggpo", refresh_every=1).after_update(SimpleNamespace())  # no refresh offered: no error


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


# ========================================================================================
# DC-GRPO — δ_t = |π_old − μ|; λ ← clip(λ + η(mean δ − c), 0, λ_max); Â_t = Â_i − λ·δ_t

# R = (1, 0, 0) → GRPO Â = 2/√3 = 1.154701, −1/√3 = −0.577350 (×2)
# (π_old, μ): row 0 (0.5, 0.4), (0.3, 0.3); row 1 (0.25, 0.2), (0.6, 0.62); row 2 (0.1, 0.13)
# δ = (0.1, 0), (0.05, 0.02), (0.03) → mean δ = 0.2/5 = 0.04
DC_MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 0]]
DC_OLD = [[1, 0.5, 0.3], [1, 0.25, 0.6], [1, 0.1, 1]]
DC_MU = [[1, 0.4, 0.3], [1, 0.2, 0.62], [1, 0.13, 1]]
DC_DELTA = [[0, 0.1, 0], [0, 0.05, 0.02], [0, 0.03, 0]]
DC_BATCH = make_batch(DC_MASK, [0, 0, 0], [1.0, 0.0, 0.0], old_logp=t(DC_OLD).log(), behav_logp=t(DC_MU).log())
DC_CFG = {"eta": 2.0, "lambda_init": 0.1, "delta_budget": 0.01, "lambda_max": 0.2}
A_GRPO = t([2 / R3, -1 / R3, -1 / R3])[:, None] * t(DC_MASK)


@pytest.mark.parametrize("cfg, lam, penalty", [
    # dual step first: λ = 0.1 + 2·(0.04 − 0.01) = 0.16, penalty δ
    ({}, 0.16, DC_DELTA),
    # shape with the λ the step started from (0.1)
    ({"dual_order": "shape_then_update"}, 0.1, DC_DELTA),
    # hinge: max(0, δ − 0.01) = (0.09, 0), (0.04, 0.01), (0.02)
    ({"hinge": True}, 0.16, [[0, 0.09, 0], [0, 0.04, 0.01], [0, 0.02, 0]]),
    # η = 0.5: λ = 0.1 + 0.5·0.03 = 0.115;  λ0 = 0: λ = 0.06;  c = 0.1: λ = clip(0.1 − 0.12) = 0
    ({"eta": 0.5}, 0.115, DC_DELTA), ({"lambda_init": 0.0}, 0.06, DC_DELTA),
    ({"delta_budget": 0.1}, 0.0, DC_DELTA)])
def test_dc_grpo_shaping_and_dual_step(cfg, lam, penalty):
    a = algo("dc_grpo", **{**DC_CFG, **cfg})
    out = a.advantages(DC_BATCH, CTX)
    torch.testing.assert_close(out.adv, A_GRPO - lam * t(penalty), atol=1e-5, rtol=0)
    assert out.metrics["algo/dc_grpo/lambda"] == pytest.approx(lam)
    assert float(out.metrics["algo/dc_grpo/delta_mean"]) == pytest.approx(0.04)
    # tokens with δ > c = 0.01: 0.1, 0.05, 0.02, 0.03 → 4/5 (unless c is raised)
    assert float(out.metrics["algo/dc_grpo/delta_above_c_frac"]) == pytest.approx(0.8 if lam else 0.0)


def test_dc_grpo_lambda_is_state_committed_once_per_step_and_capped():
    a = algo("dc_grpo", **DC_CFG)
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.16)
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.16)  # pure until committed
    a.after_update(CTX), a.after_update(CTX)  # two updates in one step: one dual step
    assert a.state_dict()["lambda"] == pytest.approx(0.16)
    # next step: 0.16 + 0.06 = 0.22 → capped at λ_max = 0.2
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.2)
    b = algo("dc_grpo", **DC_CFG)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()


def test_dc_grpo_no_gap_is_grpo():
    b = dataclasses.replace(DC_BATCH, behav_logp=DC_BATCH.old_logp)
    torch.testing.assert_close(algo("dc_grpo").advantages(b, CTX).adv, algo("grpo").advantages(b, CTX).adv)
