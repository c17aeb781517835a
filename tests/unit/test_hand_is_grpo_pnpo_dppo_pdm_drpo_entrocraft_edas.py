"""Hand-computed tests of the seed-paper entries A: IS-GRPO, PNPO, DPPO's predictive divergence
mask, DRPO, Entrocraft (with a softmax-bandit control test) and EDAS.

Every expected number is worked out in the comments (or by an independent finite difference),
never by the code under test. Each ablation switch is checked to change what it claims.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.base import Context, Group
from rlsuite.algorithms.dppo_pdm import DPPOPDM, DPPOPDMConfig, predicted_change
from rlsuite.algorithms.drpo import DRPO, DRPOConfig, drpo_weight
from rlsuite.algorithms.edas import EDAS, EDASConfig
from rlsuite.algorithms.entrocraft import Entrocraft, EntrocraftConfig, acceptance, band
from rlsuite.algorithms.is_grpo import ISGRPO, ISGRPOConfig, feature_orthogonality, weighted_group_advantage
from rlsuite.algorithms.pnpo import PNPO, PNPOConfig, prefix_log_ratio
from rlsuite.suite.aggregation import aggregate
from tests.fakes import hand_batch, hook_ctx
from rlsuite.suite.types import Batch, Forward

torch.set_num_threads(1)
D = torch.float64


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


def ctx(step=1, progress=0.0, entropy=None, n_train=4, prompts_per_step=2, group_size=2, seed=0) -> Context:
    return hook_ctx(gen_seed=seed * 1000 + step, step=step, progress=progress, entropy=entropy, n_train=n_train,
                    prompts_per_step=prompts_per_step, group_size=group_size, seed=seed)


def make_batch(mask, group_id, rewards, scores=None, example_idx=None, logp=None, behav=None, old=None, **kw) -> Batch:
    B, T = t(mask).shape
    z = torch.zeros(B, T, dtype=D)
    return hand_batch(mask, group_id, rewards, prompt_width=0, prompt_turns=False, dtype=D,
                      behav_logp=behav if behav is not None else z, example_idx=torch.tensor(example_idx or group_id),
                      scores=t(scores if scores is not None else rewards), old_logp=old if old is not None else z, **kw)


def close(actual, expected):
    """Hand numbers are written with 6 decimals."""
    torch.testing.assert_close(actual, expected, atol=2e-6, rtol=0)


def with_adv(batch: Batch, adv) -> Batch:
    """Set a per-sequence advantage [B] (broadcast on the loss mask)."""
    a = adv if isinstance(adv, torch.Tensor) else t(adv)
    return dataclasses.replace(batch, adv=a[:, None] * batch.loss_mask)


# ======================================================================================
# IS-GRPO. σ̂ table [0.4, 0.1, 0.0, unseen]; prior 0.5, floor 0.05, α = 1:
#   σ̂ → [0.4, 0.1, 0.05, 0.5], Σ = 1.05, P = σ̂/1.05; w = 1/(N·P) with N = 4:
#   prompt 0: 1.05/1.6 = 0.65625, prompt 1: 1.05/0.4 = 2.625; batch mean (2 samples each) 1.640625
#   → renormalised 0.4 and 1.6. Rewards (1, 0) per prompt: mean-only Â = ±0.5.

IS_BATCH = {"mask": [[1, 1]] * 4, "group_id": [0, 0, 1, 1], "rewards": [1.0, 0.0, 1.0, 0.0]}


def is_algo(**kw) -> ISGRPO:
    algo = ISGRPO(ISGRPOConfig(**kw))
    algo.sigma = torch.tensor([0.4, 0.1, 0.0, float("nan")])
    return algo


def is_adv(algo) -> torch.Tensor:
    return algo.advantages(make_batch(**IS_BATCH), ctx()).adv[:, 0]


def test_is_grpo_advantage_by_hand():
    out = is_algo().advantages(make_batch(**IS_BATCH), ctx())
    torch.testing.assert_close(out.adv[:, 0], t([0.2, -0.2, 0.8, -0.8]))
    assert out.metrics["algo/is_grpo/is_weight_mean"] == pytest.approx(1.640625)
    assert out.metrics["algo/is_grpo/is_weight_max"] == pytest.approx(2.625)


def test_is_grpo_switches():
    torch.testing.assert_close(is_adv(is_algo(is_weight=False)), t([0.5, -0.5, 0.5, -0.5]))
    # no renormalisation: 0.5·0.65625 = 0.328125, 0.5·2.625 = 1.3125
    torch.testing.assert_close(is_adv(is_algo(renormalise=False)), t([0.328125, -0.328125, 1.3125, -1.3125]))
    # GRPO z-score: 0.5/(std 1/√2 + 1e-6) = 0.707106 → × 0.4 / × 1.6
    torch.testing.assert_close(is_adv(is_algo(scale_by_std=True)), t([0.282842, -0.282842, 1.131369, -1.131369]),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(is_adv(is_algo(alpha=0.0)), t([0.5, -0.5, 0.5, -0.5]))  # uniform sampler → w ≡ 1
    # floor 0.2: σ̂ = [0.4, 0.2, ...] → w ∝ 1/0.4 : 1/0.2 = 2.5 : 5, mean 3.75 → 2/3, 4/3
    torch.testing.assert_close(is_adv(is_algo(sigma_min=0.2)), t([1 / 3, -1 / 3, 2 / 3, -2 / 3]))
    # prior 1.0 (unseen prompt 3): Σ = 1.55 → w0 = 1.55/1.6 = 0.96875 (without renormalisation)
    torch.testing.assert_close(is_adv(is_algo(sigma_prior=1.0, renormalise=False))[0], t(0.5 * 0.96875))


def test_is_grpo_sigma_table_update_last_and_ema():
    # both groups have rewards (1, 0): unbiased std = √0.5 = 0.707107
    for source, expected in (("last", [0.707107, 0.707107]), ("ema", [0.553553, 0.403553])):  # ½·0.4 + ½·0.7071
        algo = is_algo(sigma_source=source)
        algo.advantages(make_batch(**IS_BATCH), ctx())
        assert algo.sigma[:2].tolist() == pytest.approx([0.4, 0.1])  # not before the update
        algo.after_update(ctx())
        assert algo.sigma[:2].tolist() == pytest.approx(expected, abs=1e-5)
        assert math.isnan(algo.sigma[3]) and algo.pending == []
        fresh = ISGRPO(ISGRPOConfig(sigma_source=source))
        fresh.load_state_dict(algo.state_dict())
        assert torch.equal(fresh._probs(4), algo._probs(4))


def test_is_grpo_sampler_frequencies_and_replacement():
    algo = ISGRPO(ISGRPOConfig())
    algo.sigma = torch.tensor([0.3, 0.1, float("nan"), 0.1])  # → P = [0.3, 0.1, 0.5, 0.1]
    idx = torch.tensor(algo.sample_prompts(ctx(prompts_per_step=20000)))
    freq = torch.bincount(idx, minlength=4).float() / len(idx)
    torch.testing.assert_close(freq, torch.tensor([0.3, 0.1, 0.5, 0.1]), atol=0.015, rtol=0)
    no_repl = ISGRPO(ISGRPOConfig(with_replacement=False))
    no_repl.sigma = torch.tensor([0.3, 0.1, float("nan"), 0.1])
    assert sorted(no_repl.sample_prompts(ctx(prompts_per_step=4))) == [0, 1, 2, 3]
    # unbiasedness of the weights: Σ_q P(q)·w_q·x_q = mean(x) for any x
    p = algo._probs(4)
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    assert float((p * (1 / (4 * p)) * x).sum()) == pytest.approx(0.625)


def test_is_grpo_orthogonality_statistic():
    mask, adv, gid = torch.ones(2, 1), torch.ones(2, 1), torch.tensor([0, 1])
    assert float(feature_orthogonality(t([[[1.0, 0.0]], [[0.0, 1.0]]]), adv, mask, gid)) == pytest.approx(0.0)
    # cos((1,0), (1,1)) = 1/√2
    assert float(feature_orthogonality(t([[[1.0, 0.0]], [[1.0, 1.0]]]), adv, mask, gid)) == pytest.approx(0.707107)
    assert "hidden" in ISGRPO(ISGRPOConfig(orthogonality=True)).needs


def test_weighted_group_advantage_by_hand():
    # R = (1, 0, 0), w = (2, 1, 1): m = 2/4 = 0.5; σ² = (2·¼ + ¼ + ¼)/4 · 3/2 = 0.375 → σ = 0.612372
    close(weighted_group_advantage(t([1, 0, 0]), torch.tensor([0, 0, 0]), t([2, 1, 1])),
          t([0.816497, -0.816497, -0.816497]))
    from rlsuite.suite.ops import group_normalised_advantage

    r, g = t([1, 0, 0, 1, 1, 0.5]), torch.tensor([0, 0, 0, 1, 1, 1])
    close(weighted_group_advantage(r, g, torch.ones(6)), group_normalised_advantage(r, g))  # w ≡ 1: GRPO


def test_is_grpo_response_reading_reuses_last_steps_groups():
    """Step 1: fresh rows only (stored); step 2: replay returns them, they come back appended with
    old log-probs re-scored, and get ρ·(R − m_ρ)/σ_ρ with ρ = min(exp Σ(log π_old − log μ), 2)."""
    algo = ISGRPO(ISGRPOConfig(reading="response"))
    assert algo.sample_prompts(ctx()) is None and algo.replay(ctx()) is None
    first = make_batch([[1]] * 3, [0, 0, 0], [1, 0, 0])
    out = algo.advantages(first, ctx())
    assert out.metrics["algo/is_grpo/replayed_rows"] == 0
    old = algo.replay(ctx(step=2))
    assert old is not None and old.batch_size == 3 and torch.equal(old.rewards, t([1, 0, 0]))
    # the trainer appends the stale rows (group ids shifted) and re-scores π_old: log ρ = (ln 2, 0, 0) + ln 3 cap
    both = make_batch([[1]] * 5, [0, 0, 1, 1, 1], [1, 0, 1, 0, 0],
                      old=t([[0.0], [0.0], [math.log(3.0)], [0.0], [0.0]]))
    out = algo.advantages(both, ctx(step=2))
    # fresh group: ±1/√2; re-used group with ρ = (2 [3 capped], 1, 1): ρ × (0.816497, −0.816497, −0.816497)
    close(out.adv[:, 0], t([0.707107, -0.707107, 1.632991, -0.816496, -0.816496]))  # eps 1e-6 in σ + eps
    assert out.metrics["algo/is_grpo/rho_truncated_frac"] == pytest.approx(1 / 3)
    assert algo.buffer.batch_size == 2  # only the fresh rows are kept for the next step (re-used once)
    algo2 = ISGRPO(ISGRPOConfig(reading="response"))
    algo2.load_state_dict(algo.state_dict())
    assert torch.equal(algo2.replay(ctx()).tokens, algo.buffer.tokens)


# ======================================================================================
# PNPO. Row 0 (A = +1): log r = (0.3, −0.1, 0.1) → prefix means 0.3, 0.1, 0.1.
# Row 1 (A = −1): policy tokens at 0 and 2 (1 is an observation): log r = (0.2, ·, 0.4) → 0.2, ·, 0.3.

PN_MASK = [[1, 1, 1], [1, 0, 1]]
PN_DIFF = [[0.3, -0.1, 0.1], [0.2, 9.0, 0.4]]


def pn_loss(**kw):
    b = with_adv(make_batch(PN_MASK, [0, 0], [1.0, 0.0]), [1.0, -1.0])
    return PNPO(PNPOConfig(**kw)).loss(Forward(logp=t(PN_DIFF)), b, ctx())


def test_pnpo_prefix_ratio_by_hand():
    close(prefix_log_ratio(t(PN_DIFF), torch.zeros(2, 3, dtype=D), t(PN_MASK)),
                               t([[0.3, 0.1, 0.1], [0.2, 0.0, 0.3]]))


def test_pnpo_loss_by_hand_and_ratio_switch():
    # ε = 5e-3. Row 0: ρ = e^0.3, e^0.1, e^0.1, all > 1.005 with A > 0 → clipped: −1.005.
    # Row 1 (A < 0): max(ρ, clip(ρ)) = ρ = e^0.2 = 1.221403, e^0.3 = 1.349859.
    loss, m = pn_loss()
    close(loss, t([[-1.005, -1.005, -1.005], [1.221403, 0.0, 1.349859]]))
    assert "algo/pnpo/clip_frac_pos_1_4" in m and float(m["algo/pnpo/clip_frac_pos_1_4"]) == pytest.approx(3 / 5)
    # token ratio: row 0 t=2 has ρ = e^−0.1 = 0.904837 → max(−0.904837, −0.995) = −0.904837
    close(pn_loss(ratio="token")[0][0], t([-1.005, -0.904837, -1.005]))
    # sequence ratio: row 1 mean log r = 0.3 → e^0.3 on both policy tokens
    close(pn_loss(ratio="sequence")[0][1], t([1.349859, 0.0, 1.349859]))


def test_pnpo_gradient_variants_on_policy():
    # π_θ = π_old, A = +1, 3 tokens: full gradient puts Σ_{t≥k} 1/t on token k: 11/6, 5/6, 1/3;
    # the detached (GSPO-token) variant gives the plain policy gradient 1, 1, 1.
    b = with_adv(make_batch([[1, 1, 1]], [0], [1.0], old=t([[-1.0, -2.0, -0.5]])), [1.0])
    for variant, expected in (("full", [-11 / 6, -5 / 6, -1 / 3]), ("detached", [-1.0, -1.0, -1.0])):
        logp = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
        loss, _ = PNPO(PNPOConfig(gradient=variant)).loss(Forward(logp=logp), b, ctx())
        loss.sum().backward()
        close(logp.grad, t([expected]))
    assert not PNPO(PNPOConfig()).on_policy_pg and PNPO(PNPOConfig(gradient="detached")).on_policy_pg


def test_pnpo_position_scaled_clip():
    # log r = ln 1.15 = 0.139762 at every token → ρ^PN = 1.15; ε_t = 0.2/√t = 0.2, 0.141421, 0.115470, 0.1
    lr = math.log(1.15)
    b = with_adv(make_batch([[1, 1, 1, 1]], [0], [1.0]), [1.0])
    loss, _ = PNPO(PNPOConfig(clip_schedule="inv_sqrt")).loss(Forward(logp=t([[lr] * 4])), b, ctx())
    close(loss[0], t([-1.15, -1.141421, -1.115470, -1.1]))
    loss, _ = PNPO(PNPOConfig(clip_schedule="inv_sqrt", clip_eps0=0.1)).loss(Forward(logp=t([[lr] * 4])), b, ctx())
    close(loss[0], t([-1.1, -1.070711, -1.057735, -1.05]))  # 0.1/√t


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


# ======================================================================================
# DRPO, δ = 0.15: w = 1 − sign(A)(p − q)/δ
#   A>0, p .5, q .4 → 1 − 0.1/0.15 = 1/3;   A>0, p .6 → 1 − 0.2/0.15 = −1/3 (corrective)
#   A<0, p .3 → 1 − 0.1/0.15 = 1/3;         A<0, p .5 → 1 + 0.1/0.15 = 5/3;   A>0, p .52 → 1 − 0.8 = 0.2

DR_P, DR_A = [0.5, 0.6, 0.3, 0.5, 0.52], [1.0, 1.0, -1.0, -1.0, 1.0]


def dr_w(**kw):
    return drpo_weight(t(DR_P).log(), t([0.4] * 5).log(), t(DR_A), kw.get("lo", 0.15), kw.get("hi", 0.15),
                       kw.get("space", "prob"))


def test_drpo_weight_by_hand():
    torch.testing.assert_close(dr_w(), t([1 / 3, -1 / 3, 1 / 3, 5 / 3, 0.2]))
    # ratio space (SPO): Δ = ρ − 1 = 0.25, 0.5, −0.25, 0.25, 0.3 → 1 − 0.25/0.15 = −2/3, ...
    torch.testing.assert_close(dr_w(space="ratio"), t([-2 / 3, -7 / 3, -2 / 3, 8 / 3, -1.0]))
    # asymmetric: δ_low = 0.05 for A < 0 → 1 − 0.1/0.05 = −1, 1 + 2 = 3
    torch.testing.assert_close(dr_w(lo=0.05)[2:4], t([-1.0, 3.0]))


def test_drpo_loss_gradient_and_switches():
    # token 0: ℓ = −A·min(ρ, C)·w·log p = −1.25·(1/3)·ln 0.5 = 0.288811; ∂ℓ/∂log p = −1.25/3 = −0.416667
    b = with_adv(make_batch([[1]] * 5, [0] * 5, [0.0] * 5, behav=t([[0.4]] * 5).log()), DR_A)
    def run(**kw):  # at δ = 0.15 (DPPO's δ_TV), where the weight binds on these tokens
        logp = t([[p] for p in DR_P]).log().requires_grad_(True)
        loss, m = DRPO(DRPOConfig(**{"delta_low": 0.15, "delta_high": 0.15, **kw})).loss(Forward(logp=logp), b, ctx())
        loss.sum().backward()
        return loss[:, 0].detach(), logp.grad[:, 0], m
    # the default δ = 12.5 (the authors' port's ε): w = 1 − 0.1/12.5 = 0.992 → ∂ℓ/∂log p = −1.25·0.992 = −1.24
    assert (DRPOConfig().delta_low, DRPOConfig().delta_high) == (12.5, 12.5)
    assert float(run(delta_low=12.5, delta_high=12.5)[1][0]) == pytest.approx(-1.24, abs=1e-6)
    loss, grad, m = run()
    assert float(loss[0]) == pytest.approx(0.288811, abs=1e-6) and float(grad[0]) == pytest.approx(-0.416667, abs=1e-6)
    assert float(grad[1]) == pytest.approx(1.5 / 3, abs=1e-6)  # corrective: −A·1.5·(−1/3) = +0.5
    assert float(m["algo/drpo/w_neg_frac"]) == pytest.approx(1 / 5)
    assert float(run(corrective=False)[1][1]) == 0.0  # w clamped at 0
    _, g_hard, _ = run(weight="hard")  # DPPO mask: token 1 (Δ = 0.2 > δ, A > 0) masked, others w = 1
    torch.testing.assert_close(g_hard, t([-1.25, 0.0, 0.75, 1.25, -1.3]))
    assert float(run(tis_cap=1.2)[1][0]) == pytest.approx(-1.2 / 3, abs=1e-6)


# ======================================================================================
# Entrocraft

def test_entrocraft_band_schedules_and_acceptance():
    c = EntrocraftConfig()
    assert band(0.5, c) == pytest.approx((0.5, 0.6))  # linear: 0.6 − 0.2·½, 0.7 − 0.2·½
    assert band(0.5, dataclasses.replace(c, schedule="constant")) == pytest.approx((0.6, 0.7))
    # cosine at s = ¼: f = ½(1 − cos π/4) = 0.146447 → L = 0.6 − 0.2·0.146447 = 0.570711
    assert band(0.25, dataclasses.replace(c, schedule="cosine"))[0] == pytest.approx(0.570711, abs=1e-6)
    cu = dataclasses.replace(c, schedule="custom", custom_lower=(1.0, 0.5, 0.8), custom_upper=(1.2, 1.2, 1.2))
    assert band(0.25, cu) == pytest.approx((0.75, 1.2)) and band(0.75, cu) == pytest.approx((0.65, 1.2))
    with pytest.raises(ValueError):
        EntrocraftConfig(schedule="custom")
    assert acceptance(0.9, 0.5, 0.6, "band", 5) == (1.0, 0.0)  # H > U: RAFT++
    assert acceptance(0.3, 0.5, 0.6, "band", 5) == (0.0, 1.0)  # H < L: NSR
    assert acceptance(0.55, 0.5, 0.6, "band", 5) == (1.0, 1.0) == acceptance(None, 0.5, 0.6, "band", 5)
    assert acceptance(0.65, 0.5, 0.6, "proportional", 5) == pytest.approx((1.0, 0.5))  # e = 0.1 → 1 − 0.5
    assert acceptance(0.9, 0.5, 0.6, "off", 5) == (1.0, 1.0)


def test_entrocraft_advantages_mechanisms_and_branches():
    # rewards (1, 0, 0, 1): unbiased std 1/√3·… = 0.57735 → z = ±0.866024
    b = make_batch([[1]] * 4, [0] * 4, [1.0, 0.0, 0.0, 1.0])
    hi = ctx(entropy=0.9, progress=0.5)  # band (0.5, 0.6): H > U → RAFT++
    lo = ctx(entropy=0.1, progress=0.5)  # H < L → NSR
    z = 0.866024
    out = Entrocraft(EntrocraftConfig()).advantages(b, hi)
    torch.testing.assert_close(out.adv[:, 0], t([z, 0, 0, z]), rtol=1e-5, atol=1e-6)
    assert out.metrics["algo/entrocraft/regime"] == 1.0 and out.metrics["algo/entrocraft/rejected_frac"] == 0.5
    torch.testing.assert_close(Entrocraft(EntrocraftConfig()).advantages(b, lo).adv[:, 0], t([0, -z, -z, 0]),
                               rtol=1e-5, atol=1e-6)
    off = Entrocraft(EntrocraftConfig(controller="off")).advantages(b, hi).adv[:, 0]
    torch.testing.assert_close(off, t([z, -z, -z, z]), rtol=1e-5, atol=1e-6)
    raw = Entrocraft(EntrocraftConfig(branch_adv="raw")).advantages(b, hi).adv[:, 0]  # R − 0.5 → (0.5, 0, 0, 0.5)
    torch.testing.assert_close(raw, t([0.5, 0, 0, 0.5]))
    algo = Entrocraft(EntrocraftConfig(mechanism="reject"))
    out = algo.advantages(b, hi)
    keep = algo.filter(dataclasses.replace(b, adv=out.adv, extras=dict(out.extras)), hi)
    assert keep.tolist() == [True, False, False, True]
    assert Entrocraft(EntrocraftConfig()).filter(dataclasses.replace(b, extras=dict(out.extras)), hi) is None
    assert Entrocraft(EntrocraftConfig()).group_relative and not Entrocraft(EntrocraftConfig(branch_adv="raw")).group_relative


def bandit(cfg: EntrocraftConfig, steps=200, arms=20, P=16, G=8, lr=1.0, seed=0) -> list[tuple[float, float]]:
    """A single softmax policy over ``arms`` arms, plain SGD on the logits, driven by the entry's
    advantages → filter → loss hooks. Rewards are random with zero mean for every arm and an
    arm-dependent spread σ_a (log-spaced 0.1 … 2): no arm is better, so the only thing the
    advantage signs can steer is the entropy. (With arm-dependent *means*, E[A⁺|a] and E[A⁻|a]
    both increase with arm quality, so RAFT++ and NSR move H the same way in expectation and no
    sign-rejection controller can hold a target.) Returns (H, H*) per step, H measured exactly."""
    g = torch.Generator().manual_seed(seed)
    sig = torch.exp(torch.linspace(math.log(0.1), math.log(2.0), arms))
    theta, algo, B, hist = torch.zeros(arms), Entrocraft(cfg), P * G, []
    ones, z = torch.ones(B, 1), torch.zeros(B, dtype=torch.long)
    for step in range(steps):
        logp_all = torch.log_softmax(theta, -1)
        H = float(-(logp_all.exp() * logp_all).sum())
        c = Context(step=step + 1, progress=step / steps, entropy=H, max_new_tokens=1, group_size=G,
                    prompts_per_step=P, n_train=P, seed=seed, policy=None,
                    generator=lambda s, k=step: torch.Generator().manual_seed(k), charge=lambda *a: None)
        hist.append((H, sum(band(c.progress, cfg)) / 2))
        a = torch.multinomial(logp_all.exp(), B, replacement=True, generator=g)
        r = sig[a] * torch.randn(B, generator=g)
        lp = logp_all[a][:, None]
        batch = Batch(tokens=a[:, None], attn_mask=ones.long(), loss_mask=ones, behav_logp=lp, turn_id=z[:, None],
                      policy_version=z, behaviour_id=z, group_id=torch.arange(B) // G, example_idx=torch.arange(B) // G,
                      scores=r, rewards=r, truncated=z.bool(), prompt_width=0, old_logp=lp)
        out = algo.advantages(batch, c)
        batch = dataclasses.replace(batch, adv=out.adv, extras=dict(out.extras))
        keep = algo.filter(batch, c)
        if keep is not None:
            batch = batch.select(keep.nonzero().flatten())
        th = theta.clone().requires_grad_(True)
        loss, _ = algo.loss(Forward(logp=torch.log_softmax(th, -1)[batch.tokens]), batch, c)
        aggregate(loss, batch.loss_mask, algo.aggregation, 1).backward()
        theta = theta - lr * th.grad
    return hist


def second_half_error(hist) -> float:
    h = hist[len(hist) // 2:]
    return sum(abs(x - y) for x, y in h) / len(h)


def test_entrocraft_bandit_holds_a_constant_target():
    cfg = EntrocraftConfig(schedule="constant", lower_start=2.45, upper_start=2.55, kl_coef=0.0)
    assert second_half_error(bandit(cfg)) < 0.05  # H* = 2.5 nats, from ln 20 = 3.0
    off = bandit(dataclasses.replace(cfg, controller="off"))  # GRPO alone does not track it
    assert second_half_error(off) > 0.2


def test_entrocraft_bandit_follows_a_linear_schedule():
    cfg = EntrocraftConfig(schedule="linear", lower_start=2.75, lower_end=1.95, upper_start=2.85, upper_end=2.05,
                           kl_coef=0.0)  # H* from 2.8 to 2.0
    assert second_half_error(bandit(cfg)) < 0.05
    assert second_half_error(bandit(dataclasses.replace(cfg, mechanism="reject"))) < 0.05


# ======================================================================================
# EDAS. Group 0: scores (1, 0, 0, 0, 0, 1), wrong answers "3", "3", "3", "7". GRPO z-score: mean 1/3,
# unbiased std √(4/15) = 0.516398 → wrong Â = −0.645497, right 1.290994. S = 0.645497;
# p = (¾, ¼), H = 0.562335, I = (0.287682, 1.386294), ln N_w = ln 4 = 1.386294.
# α = 0.4: Δ_3 = 0.4·S·(0.287682 − 0.562335)/1.386294 = −0.051154; Δ_7 = 0.4·S·0.594361 = 0.153463
# (|A|/κ = 0.322749 does not bind) → Â_3 = −0.696650, Â_7 = −0.492033. Group 1: one wrong → unchanged.

ED_SCORES = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
ED_GROUPS = [0] * 6 + [1] * 3


def ed_adv(parsed, progress=0.0, error_class=None, **kw):
    b = make_batch([[1]] * 9, ED_GROUPS, ED_SCORES, parsed=tuple(parsed),
                   error_class=tuple(parsed if error_class is None else error_class))
    out = EDAS(EDASConfig(base="grpo", **kw)).advantages(b, ctx(progress=progress))
    return out.adv[:, 0], out.metrics


AW, AC = -0.645496, 1.290992  # with the 1e-6 in the z-score denominator
G1 = [0.577350, -1.154700, 0.577350]  # group 1 z-scores (1, 0, 1): ±(1/3, 2/3)/0.57735


def test_edas_diverse_errors_by_hand():
    adv, m = ed_adv(["5", "3", "3", "3", "7", "5", "1", "2", "1"])
    torch.testing.assert_close(adv, t([AC, -0.696650, -0.696650, -0.696650, -0.492033, AC] + G1), atol=2e-6, rtol=0)
    assert m["algo/edas/groups_kmulti"] == 1 and m["algo/edas/groups_k1"] == 0
    assert m["algo/edas/error_entropy"] == pytest.approx(0.562335, abs=1e-6)
    # α = 0.8 doubles Δ: Δ_7 = 0.306926 < 0.322749 → −0.338570; Δ_3 = −0.102309 → −0.747805
    adv, _ = ed_adv(["5", "3", "3", "3", "7", "5", "1", "2", "1"], alpha=0.8)
    torch.testing.assert_close(adv[1:5], t([-0.747805] * 3 + [-0.338570]), atol=2e-6, rtol=0)


def test_edas_perseveration_kappa_warmup_and_none_class():
    same = ["5", "3", "3", "3", "3", "5", "1", "2", "1"]
    # K = 1: Δ = −β·S; β = 0.2 (GRPO default) → −0.774597; β = 0.3 → −0.839146
    adv, m = ed_adv(same)
    torch.testing.assert_close(adv[1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)
    assert m["algo/edas/perseveration_rate"] == 1.0
    torch.testing.assert_close(ed_adv(same, beta=0.3)[0][1:5], t([-0.839146] * 4), atol=2e-6, rtol=0)
    # κ = 4: |Δ| ≤ |A|/4 = 0.161374 binds against 0.193649 → −0.806871
    torch.testing.assert_close(ed_adv(same, beta=0.3, kappa=4.0)[0][1:5], t([-0.806871] * 4), atol=2e-6, rtol=0)
    # warm-up over half the training, at progress ¼ → half the shaping: −0.645497 − 0.064550 = −0.710047
    torch.testing.assert_close(ed_adv(same, progress=0.25, warmup_frac=0.5)[0][1:5], t([-0.710047] * 4),
                               atol=2e-6, rtol=0)
    nones = ["5", None, None, None, None, "5", "1", "2", "1"]
    torch.testing.assert_close(ed_adv(nones)[0][1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)  # shared class
    torch.testing.assert_close(ed_adv(nones, none_class="unique")[0][1:5], t([AW] * 4), atol=2e-6, rtol=0)
    with pytest.raises(ValueError):
        EDASConfig(kappa=1.0)


def test_edas_error_equivalence_switch():
    """The task's error class (e.g. an exception type) partitions the wrong answers; ``equivalence =
    parsed`` uses the parsed answers instead."""
    parsed = ["5", "3", "3", "3", "7", "5", "1", "2", "1"]
    same_exc = ["", "ValueError", "ValueError", "ValueError", "ValueError", "", "", "x", ""]
    adv, m = ed_adv(parsed, error_class=same_exc)  # one class (K = 1): perseveration → −0.774597
    torch.testing.assert_close(adv[1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)
    assert m["algo/edas/groups_k1"] == 1
    adv, _ = ed_adv(parsed, error_class=same_exc, equivalence="parsed")  # K = 2 as in the hand example
    torch.testing.assert_close(adv[1:5], t([-0.696650] * 3 + [-0.492033]), atol=2e-6, rtol=0)


def test_edas_base_switch():
    b = make_batch([[1]] * 2, [0, 0], [1.0, 1.0])
    assert EDAS(EDASConfig(base="dapo")).filter(b, ctx()).tolist() == [False, False]  # dynamic sampling
    assert EDAS(EDASConfig(base="grpo")).filter(b, ctx()) is None
    # ratio 1.25 with A = 1: GRPO clips at 1.2, DAPO's clip-higher at 1.28 does not
    b = with_adv(make_batch([[1]], [0], [1.0]), [1.0])
    fwd = Forward(logp=t([[math.log(1.25)]]))
    assert float(EDAS(EDASConfig(base="grpo")).loss(fwd, b, ctx())[0]) == pytest.approx(-1.2)
    assert float(EDAS(EDASConfig(base="dapo")).loss(fwd, b, ctx())[0]) == pytest.approx(-1.25)


def test_edas_defaults_are_the_authors_launch_settings():
    """The GRPO launcher's KL loss (0.01, k3 = verl's low_var_kl), the DAPO launcher's zero overlong
    buffer (no penalty), no warm-up; each departure stays a switch."""
    grpo, dapo = EDASConfig(base="grpo"), EDASConfig()
    assert (grpo.kl_coef, grpo.kl_estimator) == (0.01, "k3") and "ref_logp" in EDAS(grpo).needs
    assert dapo.kl_coef == 0.0 and "ref_logp" not in EDAS(dapo).needs
    assert EDASConfig(base="grpo", kl_coef=0.0).kl_coef == 0.0
    assert dapo.overlong == "none" and grpo.ramp(1, 0.0) == 1.0
    # no overlong penalty by default: a truncated wrong row keeps its grade as reward
    g = Group(prompt="p", example=None, completions=("a", "b"), parsed=(None, None), scores=t([1.0, 0.0]),
              lengths=torch.tensor([4, 4]), truncated=torch.tensor([False, True]))
    c = ctx()
    c.max_new_tokens = 4
    close(EDAS(dapo).rewards(g, c), t([1.0, 0.0]))
    close(EDAS(EDASConfig(overlong="shaping")).rewards(g, c), t([0.0, -1.0]))  # L = L_max: the full −1


def test_edas_authors_warmup_waits_then_ramps_in_steps():
    same = ["5", "3", "3", "3", "3", "5", "1", "2", "1"]
    b = make_batch([[1]] * 9, ED_GROUPS, ED_SCORES, parsed=tuple(same), error_class=tuple(same))
    cfg = dict(base="grpo", warmup_start=2, warmup_steps=4)
    at = lambda step: EDAS(EDASConfig(**cfg)).advantages(b, ctx(step=step)).adv[1:5, 0]
    close(at(2), t([AW] * 4))                    # not started: Â unchanged
    close(at(4), t([-0.710047] * 4))             # (4 − 2)/4 = ½ of Δ = −0.129100
    close(at(9), t([-0.774597] * 4))             # past the ramp: the full shaping
    assert EDASConfig(**cfg).ramp(3, 0.9) == 0.25  # in steps, whatever the progress
    with pytest.raises(ValueError, match="alternatives"):
        EDASConfig(warmup_frac=0.5, warmup_steps=4)


def test_edas_overlong_filter_drops_truncated_rows_from_the_wrong_set():
    """The fidelity issue's case: scores (1, 0, 0, 0), error classes (42, 3, 3, 7), the last row
    truncated; DAPO's z-score: right 1.5, wrong −0.5. Without the filter W = {3, 3, 7}: S = 0.5,
    p = (⅔, ⅓), H = 0.636514, Δ_3 = 0.4·0.5·(0.405465 − 0.636514)/ln 3 = −0.042062 → −0.542062.
    With the filter the truncated row leaves the loss and W: W = {3, 3}, K = 1, Δ = −β·S = −0.3·0.5 →
    −0.65 (|A|/κ = 0.25 does not bind). (Counted in W with Â = 0 it was S = ⅓, Δ = −0.028040.)"""
    cls = ("42", "3", "3", "7")
    b = make_batch([[1]] * 4, [0] * 4, [1.0, 0.0, 0.0, 0.0], parsed=cls, error_class=cls,
                   truncated=torch.tensor([False, False, False, True]))
    near = lambda a, e: torch.testing.assert_close(a, t(e), atol=1e-5, rtol=0)  # the z-score's 1e-6: 1.499997
    plain = EDAS(EDASConfig()).advantages(b, ctx()).adv[:, 0]
    near(plain, [1.5, -0.542062, -0.542062, -0.415876])  # Δ_7 = 0.4·0.5·(1.098612 − 0.636514)/ln 3 = 0.084124
    out = EDAS(EDASConfig(overlong="filter")).advantages(b, ctx())
    near(out.adv[:, 0], [1.5, -0.65, -0.65, 0.0])
    assert out.metrics["algo/edas/groups_k1"] == 1.0
