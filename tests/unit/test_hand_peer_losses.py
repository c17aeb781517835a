"""The peer frameworks' policy losses: GMPO, SAPO, Clip-Cov, KL-Cov and DRO (verl 0.9.1) and BNPO,
LUSPO and VESPO (TRL 1.16.0). Per entry a small example worked by hand in the comments, and the
peer's own loss and gradient on one shared batch, recorded below (the peers are not needed here).

How the peer numbers were made (float64, once, outside this repository): verl's
``POLICY_LOSS_REGISTRY[name](old_log_prob, log_prob, advantages, response_mask, "token-mean",
config)`` from ``verl/trainer/ppo/core_algos.py`` with its imports stubbed and the config its
defaults plus the overrides in the table; TRL's ``GRPOTrainer._compute_loss`` called on a minimal
stand-in object (no model: ``_get_per_token_logps_and_entropies`` returns the log-probs below;
one process, no accumulation, ``num_items_in_batch`` = the batch's tokens). The recorded gradient
is d(loss)/d(log π) on the response columns, and the suite's side is aggregated with float64 weights
(``weights64``; the trainer's are the same in float32). Each peer got the advantages it computes itself from
the rewards (verl: std + 1e-6; TRL: std + 1e-4), which the suite's entries reproduce (checked).

Run: OMP_NUM_THREADS=1 python3 -m pytest -q tests/unit/test_hand_peer_losses.py
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.suite.aggregation import aggregate, aggregation_weights
from rlsuite.suite.types import Forward
from tests.fakes import hand_batch, hook_ctx

D = torch.float64
CTX = hook_ctx(gen_seed=0, max_new_tokens=4, group_size=4, prompts_per_step=1)
sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731


def t(x):
    return torch.tensor(x, dtype=D)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(name=name, **cfg))


def weights64(mask, mode):
    """The aggregation weights of ``suite.aggregation`` for the modes used here, in float64 by hand;
    checked equal to the suite's to 1e-15 (they keep a float64 mask's dtype: float32 weights would
    carry ~3e-8 relative error into a float64 loss and hide differences of 1e-7 from the peers)."""
    n = mask.sum(-1, keepdim=True).clamp(min=1)
    w = {"token-mean": mask / mask.sum(), "seq-mean-token-mean": mask / (mask.shape[0] * n),
         "seq-mean-token-sum": mask / mask.shape[0]}[mode]
    got = aggregation_weights(mask, mode, 4)
    assert got.dtype == torch.float64
    torch.testing.assert_close(w, got, rtol=1e-15, atol=0)
    return w


def run_loss(a, batch, logp, adv=None, ctx=CTX):
    """(aggregated loss, d loss / d logp, metrics); ``adv`` given: set directly, else the entry's advantages."""
    if adv is None:
        out = a.advantages(batch, ctx)
        batch = dataclasses.replace(batch, adv=out.adv, extras={**batch.extras, **out.extras})
    else:
        batch = dataclasses.replace(batch, adv=t(adv)[:, None] * batch.loss_mask)
    lp = t(logp).clone().requires_grad_(True) if isinstance(logp, list) else logp.clone().requires_grad_(True)
    loss, m = a.loss(Forward(logp=lp), batch, ctx)
    value = (weights64(batch.loss_mask, a.aggregation) * loss).sum()
    value.backward()
    return value.detach(), lp.grad, m


def batch_of(mask, old_logp, rewards=None):
    rewards = rewards if rewards is not None else [0.0] * len(mask)
    return hand_batch(mask, [0] * len(mask), rewards, prompt_turns=False, old_logp=t(old_logp))


# ========================================================================================
# GMPO (verl geo_mean): δ̃ = σ·min(σδ, σ·clip(δ, −ε, ε)), s_i = exp(Σ δ̃ / (|y| + 1e-8)), ℓ_i = −Â_i s_i

def test_gmpo_by_hand():
    # row 0: Â = +1, δ = (0.1, 0.3, −0.5) → (0.1, 0.2, −0.5) (the upper clip binds) → s0 = e^{−0.2/3} = 0.935507
    # row 1: Â = −2, δ = (0.3, −0.5)      → (0.3, −0.2) (the lower clip binds)      → s1 = e^{0.05}   = 1.051271
    # seq-mean: (−0.935507 + 2·1.051271)/2 = 0.583518
    b = batch_of([[0, 1, 1, 1], [0, 1, 1, 0]], [[0] * 4] * 2)
    value, grad, m = run_loss(algo("gmpo"), b, [[0, 0.1, 0.3, -0.5], [0, 0.3, -0.5, 0]], adv=[1.0, -2.0])
    assert float(value) == pytest.approx(0.5835176035, abs=1e-8)  # verl's |y| + 1e-8 move it by 4e-9
    # d/dδ: row 0 through its unclipped tokens, −Â·s0/3 · ½ = −0.155918 (the clipped token 0);
    # row 1 through token 0 only: 2·s1/2 · ½ = 0.525636
    torch.testing.assert_close(grad, t([[0, -0.1559178309, 0, -0.1559178309], [0, 0.5256355481, 0, 0]]))
    # binding clips: high (δ > 0.2, Â > 0) row 0 token 1, low (δ < −0.2, Â < 0) row 1 token 1: 1/5 each
    assert float(m["stats/clip_frac_high"]) == pytest.approx(0.2)
    assert float(m["stats/clip_frac_low"]) == pytest.approx(0.2)
    assert float(m["stats/clip_frac"]) == pytest.approx(0.4)
    assert float(m["stats/approx_kl"]) == pytest.approx(0.06)  # −mean δ = −(−0.3)/5
    # verl 0.9.1's pg_clipfrac / _lower: every token outside (−0.2, 0.2) by Â's sign, binding or not:
    # row 0 (Â > 0) tokens 1 and 2 (0.3, −0.5), row 1 (Â < 0) tokens 0 and 1 (0.3, −0.5): 2/5 each
    assert float(m["algo/gmpo/pg_clipfrac"]) == pytest.approx(0.4)
    assert float(m["algo/gmpo/pg_clipfrac_lower"]) == pytest.approx(0.4)


# ========================================================================================
# SAPO: ℓ = −f_τ(r)·Â, f_τ(r) = σ(τ(r − 1))·4/τ, τ = τ_pos (1.0) if Â > 0 else τ_neg (1.05)

def test_sapo_by_hand():
    # row 0: Â = +1, r = 1.2: f = 4σ(0.2) = 2.199336;  row 1: Â = −1, r = 0.8: f = σ(−0.21)·4/1.05 = 1.705494
    # seq-mean of one-token rows: (−2.199336 + 1.705494)/2 = −0.246921
    b = batch_of([[0, 1], [0, 1]], [[0, 0], [0, 0]])
    value, grad, m = run_loss(algo("sapo"), b, [[0, math.log(1.2)], [0, math.log(0.8)]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-4 * sig(0.2) + sig(-0.21) * 4 / 1.05) / 2)
    assert float(value) == pytest.approx(-0.2469211557)
    # gradient −Â·4σ'(τ(r−1))·r, /2: row 0 −4·σ(0.2)σ(−0.2)·1.2/2 = −0.594040; row 1 +4·σ(−0.21)σ(0.21)·0.8/2 = 0.395622
    torch.testing.assert_close(grad, t([[0, -0.5940397745], [0, 0.3956222122]]))
    assert float(m["algo/sapo/gate_mean"]) == pytest.approx((4 * sig(0.2) + sig(-0.21) * 4 / 1.05) / 2)
    # on-policy f(1) = 2/τ and the gradient is the plain −Â∇log π
    value, grad, _ = run_loss(algo("sapo"), b, [[0, 0], [0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-2.0 + 2 / 1.05) / 2)
    torch.testing.assert_close(grad, t([[0, -0.5], [0, 0.5]]))


# ========================================================================================
# Clip-Cov: drop k = max(⌊ratio·n⌋, 1) random tokens with lb < Cov < ub (not PPO-clipped); KL-Cov:
# + coef·|δ| on the k tokens of largest Cov. Cov = (Â − mean Â)(log π − mean log π).

CC_MASK = [[0, 1, 1], [0, 1, 1]]
CC_LOGP = [[0, -0.5, -1.5], [0, -0.5, -1.5]]
CC_ADV = [1.0, -1.0]  # mean Â = 0, mean log π = −1 → Cov = Â·(log π + 1) = (0.5, −0.5 | −0.5, 0.5)


def test_clip_cov_by_hand_on_policy():
    # with the entry's own Â = ±0.707107 (R = (1, 0)): Cov = (0.353553, −0.353553 | −0.353553, 0.353553);
    # lb 0.3 < Cov < 1: tokens (0, 0) and (1, 1); ratio 0.5 → k = 2 → both dropped
    # then with Â = ±1 and r = 1, ℓ = −Â·r on the others: (0, −1 | +1, 0) → token-mean 0; gradient −Â/4 on the kept
    b = batch_of(CC_MASK, CC_LOGP, rewards=[1.0, 0.0])
    a = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=1.0, clip_cov_ratio=0.5)
    drop = a.advantages(b, CTX).extras["clip_cov_drop"]
    assert drop.tolist() == [[0, 1, 0], [0, 0, 1]]
    capped = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=0.35, clip_cov_ratio=0.5)  # ub below 0.353553: no candidate
    assert capped.advantages(b, CTX).extras["clip_cov_drop"].sum() == 0
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"clip_cov_drop": drop})
    lp = t(CC_LOGP).requires_grad_(True)
    loss, m = a.loss(Forward(logp=lp), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, 2).backward()
    torch.testing.assert_close(loss, t([[0, 0, -1], [0, 1, 0]]))
    torch.testing.assert_close(lp.grad, t([[0, 0, -0.25], [0, 0.25, 0]]))
    assert float(m["algo/clip_cov/cov_clip_frac"]) == pytest.approx(0.5)


def test_clip_cov_random_draw_and_scopes():
    # ratio 0.25 → k = 1 of the two candidates, the one ctx.generator("clip_cov")'s permutation puts first
    a = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=1.0, clip_cov_ratio=0.25)
    drop = a.advantages(batch_of(CC_MASK, CC_LOGP, rewards=[1.0, 0.0]), CTX).extras["clip_cov_drop"]
    first = torch.randperm(2, generator=torch.Generator().manual_seed(0))[0]
    assert drop.sum() == 1 and drop[[0, 1][first], [1, 2][first]] == 1
    # off-policy, cov_scope = call: old = log π − δ with δ = 0.5 on token (0, 0): r = e^0.5 = 1.648721 > 1.2 with
    # Â > 0 → PPO-clipped, so not a candidate; Cov (current log π) as above → only (1, 1), dropped (k = 2).
    # ℓ = (max(−1.648721, −1.2) = −1.2, −1 | +1, 0) → token-mean −0.3
    old = [[0, -1.0, -1.5], [0, -0.5, -1.5]]
    call = algo("clip_cov", clip_cov_lb=0.4, clip_cov_ub=1.0, clip_cov_ratio=0.5, cov_scope="call")
    value, grad, m = run_loss(call, batch_of(CC_MASK, old), CC_LOGP, adv=CC_ADV)
    assert float(value) == pytest.approx(-0.3)
    torch.testing.assert_close(grad, t([[0, 0, -0.25], [0, 0.25, 0]]))
    assert float(m["algo/clip_cov/cov_clip_frac"]) == pytest.approx(0.25) and float(m["stats/clip_frac_high"]) == 0.25
    # cov_scope = batch selects on π_old: mean log π_old = −1.125, Cov = 0.707107·(0.125, −0.375 | −0.625, 0.375):
    # no candidate in (0.4, 1) → nothing dropped: ℓ = (−1.2, −1 | 1, 1) → −0.05
    batch = algo("clip_cov", clip_cov_lb=0.4, clip_cov_ub=1.0, clip_cov_ratio=0.5)
    b = batch_of(CC_MASK, old, rewards=[1.0, 0.0])
    drop = batch.advantages(b, CTX).extras["clip_cov_drop"]
    assert drop.sum() == 0
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"clip_cov_drop": drop})
    loss, _ = batch.loss(Forward(logp=t(CC_LOGP)), b, CTX)
    assert float(aggregate(loss, b.loss_mask, "token-mean", 2)) == pytest.approx(-0.05)


def test_kl_cov_by_hand():
    # log π = (−0.5, −1.5 | −0.5, −1.3), δ = (0.2, 0 | 0, 0.1), Â = (1, 1 | −1, −1): mean log π = −0.95,
    # Cov = Â·(log π + 0.95) = (0.45, −0.55 | −0.45, 0.35)
    logp = [[0, -0.5, -1.5], [0, -0.5, -1.3]]
    old = [[0, -0.7, -1.5], [0, -0.5, -1.4]]
    # call, ratio 0.25 → k = 1: (0, 0) gets 0.1·|0.2| = 0.02: ℓ = (−e^0.2 + 0.02, −1 | 1, e^0.1)
    #   = (−1.201403, −1 | 1, 1.105171) → token-mean −0.024058
    call = algo("kl_cov", kl_cov_ratio=0.25, cov_scope="call")
    value, grad, m = run_loss(call, batch_of(CC_MASK, old), logp, adv=CC_ADV)
    assert float(value) == pytest.approx((-math.exp(0.2) + 0.02 - 1 + 1 + math.exp(0.1)) / 4)
    assert float(value) == pytest.approx(-0.0240579600)
    # gradient: −Â·r/4, plus 0.1·sign(δ)/4 on (0, 0): (−(1.221403 − 0.1)/4, −1/4 | 1/4, 1.105171/4)
    torch.testing.assert_close(grad, t([[0, -(math.exp(0.2) - 0.1) / 4, -0.25], [0, 0.25, math.exp(0.1) / 4]]))
    assert float(m["algo/kl_cov/penalised_frac"]) == pytest.approx(0.25)
    assert float(m["algo/kl_cov/ppo_kl_abs"]) == pytest.approx(0.3 / 4)  # verl's ppo_kl: mean |δ|
    # k = 2 (ratio 0.5): (1, 1) too, + 0.1·0.1 → −0.021558
    value, _, _ = run_loss(algo("kl_cov", kl_cov_ratio=0.5, cov_scope="call"), batch_of(CC_MASK, old), logp,
                           adv=CC_ADV)
    assert float(value) == pytest.approx(-0.0215579600)
    # batch (default): Cov on π_old with Â = ±0.707107, mean −1.025: ∝ (0.325, −0.475 | −0.525, 0.375) →
    # k = 1 picks (1, 1): ℓ = (−1.221403, −1 | 1, 1.115171) → −0.026558
    a = algo("kl_cov", kl_cov_ratio=0.25)
    b = batch_of(CC_MASK, old, rewards=[1.0, 0.0])
    pick = a.advantages(b, CTX).extras["kl_cov_pick"]
    assert pick.tolist() == [[0, 0, 0], [0, 0, 1]]
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"kl_cov_pick": pick})
    loss, _ = a.loss(Forward(logp=t(logp)), b, CTX)
    assert float(aggregate(loss, b.loss_mask, "token-mean", 2)) == pytest.approx(-0.0265579600)


# ========================================================================================
# DRO: ℓ = −(log π·Â − ½β(log π − log π_old)²), token-mean

def test_dro_by_hand():
    # token 1: Â = 1, log π = −0.5, δ = 0.2:  ℓ = 0.5 + ½·0.05·0.04 = 0.501, dℓ/dlog π = −(1 − 0.05·0.2) = −0.99
    # token 2: Â = −1, log π = −1, δ = −0.4:  ℓ = −1 + ½·0.05·0.16 = −0.996, dℓ/dlog π = −(−1 + 0.02) = 0.98
    b = batch_of([[0, 1], [0, 1]], [[0, -0.7], [0, -0.6]])
    value, grad, m = run_loss(algo("dro"), b, [[0, -0.5], [0, -1.0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((0.501 - 0.996) / 2)
    torch.testing.assert_close(grad, t([[0, -0.495], [0, 0.49]]))
    assert float(m["algo/dro/penalty"]) == pytest.approx((0.001 + 0.004) / 2)


# ========================================================================================
# TRL entries: the group advantage (R − mean)/(std + 1e-4)

def test_trl_entries_use_trls_group_advantage():
    # R = (1, 0): mean 0.5, unbiased std √0.5 = 0.707107 → ±0.5/(0.707107 + 1e-4) = ±0.707007 (GRPO: ±0.707106)
    b = batch_of([[0, 1], [0, 1]], [[0, 0], [0, 0]], rewards=[1.0, 0.0])
    for name in ("bnpo", "luspo", "vespo"):
        torch.testing.assert_close(algo(name).advantages(b, CTX).adv, t([[0, 0.7070067953], [0, -0.7070067953]]))
    torch.testing.assert_close(algo("sapo").advantages(b, CTX).adv, t([[0, 0.7071057812], [0, -0.7071057812]]))


def test_bnpo_by_hand():
    # Â = (+1 | −1), r = (1.3, 1.0 | 0.7), ε 0.2: ℓ = (−min(1.3, 1.2), −1 | max(0.7, 0.8)) = (−1.2, −1 | 0.8)
    # token-mean (−1.2 − 1 + 0.8)/3 = −0.466667; gradient −Â·r/3 on unclipped tokens: (0, −1/3 | 0 (clipped))
    b = batch_of([[0, 1, 1], [0, 1, 0]], [[0, 0, 0], [0, 0, 0]])
    value, grad, m = run_loss(algo("bnpo"), b, [[0, math.log(1.3), 0], [0, math.log(0.7), 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx(-1.4 / 3)
    torch.testing.assert_close(grad, t([[0, 0, -1 / 3], [0, 0, 0]]))
    assert float(m["stats/clip_frac_high"]) == pytest.approx(1 / 3)
    assert float(m["stats/clip_frac_low"]) == pytest.approx(1 / 3)


def test_luspo_by_hand():
    # row 0: Â = +1, δ = (0.1, 0.2, 0.3) → s = e^0.2 = 1.221403 > 1.2 → ℓ0 = −1.2 (clipped: no gradient)
    # row 1: Â = −1, δ = (−0.1, 0)       → s = e^−0.05 = 0.951229  → ℓ1 = +0.951229
    # L = (|y0|ℓ0 + |y1|ℓ1)/N = (3·(−1.2) + 2·0.951229)/2 = −0.848771
    # d/dlog π on row 1: (2/2)·s/|y1| = 0.475615 per token
    b = batch_of([[0, 1, 1, 1], [0, 1, 1, 0]], [[0] * 4] * 2)
    value, grad, m = run_loss(algo("luspo"), b, [[0, 0.1, 0.2, 0.3], [0, -0.1, 0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-3.6 + 2 * math.exp(-0.05)) / 2)
    torch.testing.assert_close(grad, t([[0, 0, 0, 0], [0, 0.4756147123, 0.4756147123, 0]]))
    assert float(m["stats/clip_frac_high"]) == pytest.approx(3 / 5)  # the 3 tokens of the clipped sequence
    # GSPO differs only by the length weights: its seq-mean-token-mean value is (−1.2 + 0.951229)/2
    gspo = algo("gspo", clip_eps_low=0.2, clip_eps_high=0.2)
    value, _, _ = run_loss(gspo, b, [[0, 0.1, 0.2, 0.3], [0, -0.1, 0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-1.2 + math.exp(-0.05)) / 2)


def test_vespo_by_hand():
    # row 0: Â = +1 (k 2, λ 3), δ = (0.1, 0.2): log w = 0.3, w = 1.349859, log φ = 3 + 0.6 − 4.049576 → φ = 0.637898
    # row 1: Â = −1 (k 3, λ 2), δ = (−0.2):    log w = −0.2, w = 0.818731, log φ = 2 − 0.6 − 1.637462 → φ = 0.788627
    # ℓ = −φ·Â·log π with log π = (−0.5, −1 | −2): (0.318949, 0.637898 | −1.577254) → token-mean −0.206802
    b = batch_of([[0, 1, 1], [0, 1, 0]], [[0, -0.6, -1.2], [0, -1.8, 0]])
    value, grad, m = run_loss(algo("vespo"), b, [[0, -0.5, -1.0], [0, -2.0, 0]], adv=[1.0, -1.0])
    p0 = math.exp(3 + 2 * 0.3 - 3 * math.exp(0.3))
    p1 = math.exp(2 + 3 * -0.2 - 2 * math.exp(-0.2))
    assert float(value) == pytest.approx((1.5 * p0 - 2 * p1) / 3) and float(value) == pytest.approx(-0.2068023516)
    # φ is detached: the gradient is −φ·Â/3
    torch.testing.assert_close(grad, t([[0, -p0 / 3, -p0 / 3], [0, p1 / 3, 0]]))
    assert float(m["algo/vespo/phi_seq_mean"]) == pytest.approx((p0 + p1) / 2)
    # at π_θ = π_old: w = 1, φ = e^λ·e^−λ = 1
    value, grad, _ = run_loss(algo("vespo"), b, [[0, -0.6, -1.2], [0, -1.8, 0]], adv=[1.0, -1.0])
    torch.testing.assert_close(grad, t([[0, -1 / 3, -1 / 3], [0, 1 / 3, 0]]))


# ========================================================================================
# The peers' numbers on one shared batch: one group of 4, R = (1, 0, 0.6, 0.1), response columns 1..4

PEER_MASK = [[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1]]
PEER_OLD = [[0, -1.2, -0.4, -2.0, -0.7], [0, -0.9, -1.5, -0.3, 0], [0, -2.2, -0.6, 0, 0], [0, -0.5, -1.1, -1.8, -0.2]]
PEER_DELTA = [[0, 0.10, 0.30, -0.25, 0.05], [0, -0.40, 0.15, 0.22, 0], [0, 0.05, -0.10, 0, 0],
              [0, 0.35, -0.05, -0.30, 0.12]]
PEER_R = [1.0, 0.0, 0.6, 0.1]
ADV_VERL = [1.2376779416645225, -0.9148054351433429, 0.3766845909413763, -0.6995570974625563]
ADV_TRL = [1.2374142538169774, -0.91461053542994, 0.3766043381182104, -0.6994080565052483]
VERL, TRL = "verl 0.9.1", "TRL 1.16.0"

# (entry, config, on-policy (log π = log π_old), peer, its call, its loss, its d loss/d log π)
PEER_CASES = [
    ("gmpo", {}, False, VERL, "geo_mean", 0.01771442099645895,
     [[-0.079313118844, 0, -0.079313118844, -0.079313118844], [0, 0.0806784429244, 0.0806784429244, 0],
      [-0.0459230264532, -0.0459230264532, 0, 0], [0.0461944051223, 0.0461944051223, 0, 0.0461944051223]]),
    ("gmpo", {"clip_eps_low": 0.4, "clip_eps_high": 0.4}, False, VERL, "geo_mean clip_ratio_low/high 0.4",
     -0.010488627442487825,
     [[-0.0813209400016] * 4, [0.0754752469141] * 3 + [0], [-0.0459230264532] * 2 + [0, 0], [0.0450538611988] * 4]),
    ("sapo", {}, False, VERL, "sapo", -0.04193294931102248,
     [[-0.0852543885632, -0.101286998402, -0.0595130808292, -0.081267521017],
      [0.0496002448333, 0.0879347191279, 0.0934251744026, 0], [-0.0494671865823, -0.042508477911, 0, 0],
      [0.0591359849566, 0.0415627016724, 0.0317979042582, 0.0490765648323]]),
    ("clip_cov", {}, False, VERL, "clip_cov (no candidate in (1, 5))", 0.00663321829357701,
     [[-0.105218897467, 0, -0.0741465038583, -0.100087311284], [0, 0.081757867691, 0.0876859819805, 0],
      [-0.0304613556082, -0.0262183317447, 0, 0], [0.0763629827229, 0.0511876380942, 0, 0.0606729557607]]),
    ("clip_cov", {"cov_scope": "call", "clip_cov_lb": 0.2, "clip_cov_ub": 1.0, "clip_cov_ratio": 0.16}, False, VERL,
     "clip_cov lb 0.2, ub 1, ratio 0.16 (k = 2 = the candidates)", 0.024962661886700085,
     [[-0.105218897467, 0, -0.0741465038583, 0], [0, 0, 0.0876859819805, 0],
      [-0.0304613556082, -0.0262183317447, 0, 0], [0.0763629827229, 0.0511876380942, 0, 0.0606729557607]]),
    ("clip_cov", {"clip_cov_lb": 0.2, "clip_cov_ub": 1.0, "clip_cov_ratio": 0.4}, True, VERL,
     "clip_cov lb 0.2, ub 1, ratio 0.4 at log π = log π_old (k = 5 ≥ 4 candidates)", 0.05381208442019671,
     [[-0.0952059955127, 0, -0.0952059955127, 0], [0.0703696488572, 0, 0.0703696488572, 0],
      [-0.0289757377647, -0.0289757377647, 0, 0], [0.0538120844202, 0.0538120844202, 0, 0.0538120844202]]),
    ("kl_cov", {"cov_scope": "call"}, False, VERL, "kl_cov", -0.017636774089443783,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.100087311284],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.0398649726313, 0.0606729557607]]),
    ("kl_cov", {}, False, VERL, "kl_cov (π_old's top-Cov token is π_θ's here)", -0.017636774089443783,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.100087311284],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.0398649726313, 0.0606729557607]]),
    ("kl_cov", {"cov_scope": "call", "kl_cov_ratio": 0.3}, False, VERL, "kl_cov ratio 0.3 (k = 3)",
     -0.014944466397136062,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.0923950035919],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.032172664939, 0.0606729557607]]),
    ("kl_cov", {"kl_cov_ratio": 0.3}, True, VERL, "kl_cov ratio 0.3 at log π = log π_old", -0.01241817332773758,
     [[-0.0952059955127] * 4, [0.0703696488572] * 3 + [0], [-0.0289757377647] * 2 + [0, 0], [0.0538120844202] * 4]),
    ("dro", {}, False, VERL, "dro dro_beta 0.05", 0.09477677753049552,
     [[-0.094821380128, -0.0940521493588, -0.0961675339742, -0.0950136878203],
      [0.0688311873187, 0.0709465719341, 0.0712158027033, 0], [-0.0287834300724, -0.0293603531493, 0, 0],
      [0.0551582382664, 0.0536197767279, 0.0526582382664, 0.0542736228817]]),
    ("dro", {"beta": 0.3}, False, VERL, "dro dro_beta 0.3", 0.10090946983818788,
     [[-0.092898303205, -0.0882829185896, -0.100975226282, -0.0940521493588],
      [0.0611388796264, 0.0738311873187, 0.0754465719341, 0], [-0.0278218916109, -0.0312834300724, 0, 0],
      [0.0618890074971, 0.0526582382664, 0.0468890074971, 0.0565813151894]]),
    ("bnpo", {}, False, TRL, "bnpo", 0.00663180508340719,
     [[-0.105196480533, 0, -0.074130706912, -0.100065987637], [0, 0.0817404491402, 0.0876673004423, 0],
      [-0.0304548658026, -0.0262127459172, 0, 0], [0.0763467135547, 0.0511767325447, 0, 0.0606600293599]]),
    ("bnpo", {"clip_eps_high": 0.28}, False, TRL, "bnpo epsilon_high 0.28", -0.0009830518631588347,
     [[-0.105196480533, 0, -0.074130706912, -0.100065987637], [0, 0.0817404491402, 0.0876673004423, 0],
      [-0.0304548658026, -0.0262127459172, 0, 0], [0.0763467135547, 0.0511767325447, 0, 0.0606600293599]]),
    ("luspo", {}, False, TRL, "luspo, importance_sampling_level sequence", -0.08467010190108604,
     [[-0.32521445982] * 4, [0.226377502137] * 3 + [0], [-0.0918264859699] * 2 + [0, 0], [0.180177050727] * 4]),
    ("luspo", {"clip_eps_low": 0.02, "clip_eps_high": 0.03}, False, TRL, "luspo sequence, epsilon 0.02/0.03",
     -0.05834894405107938,
     [[0] * 4, [0.226377502137] * 3 + [0], [-0.0918264859699] * 2 + [0, 0], [0.180177050727] * 4]),
    ("luspo", {"importance_sampling_level": "token"}, False, TRL, "luspo, importance_sampling_level token",
     0.021553366521073425,
     [[-0.341888561733, 0, -0.240924797464, -0.32521445982], [0, 0.265656459706, 0.284918726437, 0],
      [-0.0989783138584, -0.085191424231, 0, 0], [0.248126819053, 0.16632438077, 0, 0.19714509542]]),
    ("vespo", {}, False, TRL, "vespo", -0.008056257670694298,
     [[-0.0730848847388] * 4, [0.0682145514026] * 3 + [0], [-0.0303427468179] * 2 + [0, 0], [0.0597572954601] * 4]),
    ("vespo", {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 0.5, "lambda_neg": 4.0}, False, TRL,
     "vespo k/λ 1, 0.5 | 0.5, 4", 0.1748553695532196,
     [[-0.104076735213] * 4, [0.0780045250656] * 3 + [0], [-0.0282369404461] * 2 + [0, 0], [0.0343052217416] * 4]),
]


def peer_batch():
    return batch_of(PEER_MASK, PEER_OLD, rewards=PEER_R)


@pytest.mark.parametrize("name, cfg, on_policy, peer, call, loss, grad", PEER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PEER_CASES)])
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    a = algo(name, **cfg)
    b = peer_batch()
    adv = a.advantages(b, CTX).adv
    torch.testing.assert_close(adv[:, 1], t(ADV_VERL if peer == VERL else ADV_TRL), rtol=1e-12, atol=1e-12)
    logp = t(PEER_OLD) if on_policy else t(PEER_OLD) + t(PEER_DELTA)
    value, g, m = run_loss(a, b, logp)
    # 1e-8: verl's seq-mean-token-mean (SAPO's) divides by |y| + 1e-8, the suite's by |y|
    assert float(value) == pytest.approx(loss, rel=1e-8, abs=1e-13), (peer, call)
    torch.testing.assert_close(g[:, 1:], t(grad), rtol=1e-8, atol=1e-12)
    assert (g[:, 0] == 0).all()
    if "stats/approx_kl" in m and not on_policy:  # verl's ppo_kl: −mean δ over the 13 tokens
        assert float(m["stats/approx_kl"]) == pytest.approx(-0.018461538447337254, rel=1e-6)


def test_sapo_equals_trl_sapo_too():
    # TRL 1.16.0 (loss_type sapo, the same verl advantages) on the shared batch: loss −0.041932914592374027.
    # It differs from verl's −0.04193294931102248 by 3.5e-8 because TRL builds τ with torch.where on Python
    # floats, i.e. in float32 (1.05 → 1.0499999523); with τ_neg rounded so, the suite gives TRL's number.
    b = peer_batch()
    logp = t(PEER_OLD) + t(PEER_DELTA)
    value, _, _ = run_loss(algo("sapo"), b, logp)
    assert float(value) == pytest.approx(-0.041932914592374027, abs=1e-7)
    tau32 = float(torch.tensor(1.05, dtype=torch.float32))
    value, g, _ = run_loss(algo("sapo", tau_neg=tau32), b, logp)
    assert float(value) == pytest.approx(-0.041932914592374027, rel=1e-10)
    torch.testing.assert_close(g[0, 1:], t([-0.0852543887763, -0.101286998655, -0.059513080978, -0.0812675212201]),
                               rtol=1e-9, atol=1e-12)


def test_kl_cov_batch_scope_departs_from_verl_off_policy_only_when_the_top_tokens_differ():
    # k = 3 off-policy (row, column): π_old's top-Cov tokens are (0, 2), (3, 3), (1, 2); π_θ's (verl's) are
    # (0, 2), (3, 3), (0, 4)
    b = peer_batch()
    a = algo("kl_cov", kl_cov_ratio=0.3)
    pick = a.advantages(b, CTX).extras["kl_cov_pick"]
    assert pick.nonzero().tolist() == [[0, 2], [1, 2], [3, 3]]
    value, _, _ = run_loss(a, b, t(PEER_OLD) + t(PEER_DELTA))
    assert float(value) != pytest.approx(-0.014944466397136062, rel=1e-6)  # verl's (cov_scope = call) value
