"""Hand-computed examples for the baseline entries (Dr. GRPO, RLOO, REINFORCE++, DAPO, GSPO, CISPO, DPPO; see algorithms/README.md) and plain REINFORCE.

Every expected number is worked out in the comments from the reference formulas (§0, §A3–A9),
never by calling the code under test. Entries are looked up by registry name.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.algorithms.base import Group
from rlsuite.algorithms.dppo import binary_divergence, topk_divergence
from rlsuite.suite.aggregation import aggregate
from tests.fakes import hand_batch, hook_ctx
from rlsuite.suite.types import Batch, Forward

D = torch.float64
LN = math.log


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


CTX = hook_ctx(gen_seed=0, max_new_tokens=3, group_size=3, prompts_per_step=2)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(**cfg))


def make_batch(loss_mask, group_id, rewards, prompt_width=1, scores=None, truncated=None, **kw) -> Batch:
    extra = {} if scores is None else {"scores": scores}
    if truncated is not None:
        extra["truncated"] = torch.tensor(truncated)
    return hand_batch(loss_mask, group_id, rewards, prompt_width=prompt_width, dtype=D, **extra, **kw)


def group(scores, lengths=None, truncated=None) -> Group:
    g = len(scores)
    return Group(prompt="p", example=None, completions=("c",) * g, parsed=(None,) * g,
                 scores=torch.tensor(scores, dtype=torch.float),
                 lengths=None if lengths is None else torch.tensor(lengths),
                 truncated=None if truncated is None else torch.tensor(truncated))


def grad_of_agg(alg, logp_value, batch, ctx=CTX, fwd_kw=None):
    """(per-token loss, metrics, ∂ aggregate/∂ logp) with the entry's own aggregation mode."""
    logp = logp_value.clone().requires_grad_(True)
    loss, metrics = alg.loss(Forward(logp=logp, **(fwd_kw or {})), batch, ctx)
    aggregate(loss, batch.loss_mask, alg.aggregation, ctx.max_new_tokens).backward()
    return loss.detach(), metrics, logp.grad


# ========================================================================================
# reinforce — ℓ_t = −Â_i·log π, Â_i = R_i − b (b = 0 or the group mean); token-mean

RF_MASK = [[0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 1, 1]]
RF_LOGP = [[0, -0.5, -1.0, 0], [0, -2.0, 0, 0], [0, -0.1, -0.2, -0.3]]


@pytest.mark.parametrize("baseline, adv_seq, loss_rows, agg", [
    # R = (2, 0, 1), group mean 1 → Â = (1, −1, 0)
    # ℓ: row 0: −1·(−0.5) = 0.5, −1·(−1) = 1.0;  row 1: +1·(−2) = −2;  row 2: 0
    # token-mean over 6 tokens: (0.5 + 1 − 2)/6 = −1/12
    ("group_mean", [1.0, -1.0, 0.0], [[0, 0.5, 1.0, 0], [0, -2.0, 0, 0], [0, 0, 0, 0]], -0.5 / 6),
    # b = 0 → Â = R = (2, 0, 1)
    # ℓ: row 0: 1.0, 2.0;  row 1: 0;  row 2: 0.1, 0.2, 0.3 → sum 3.6, /6 = 0.6
    ("none", [2.0, 0.0, 1.0], [[0, 1.0, 2.0, 0], [0, 0, 0, 0], [0, 0.1, 0.2, 0.3]], 0.6),
])
def test_reinforce_both_baselines(baseline, adv_seq, loss_rows, agg):
    a = algo("reinforce", baseline=baseline)
    batch = make_batch(RF_MASK, [0, 0, 0], [2.0, 0.0, 1.0])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t(adv_seq)[:, None] * t(RF_MASK))
    batch = batch.replace(adv=adv)
    loss, _, grad = grad_of_agg(a, t(RF_LOGP), batch)
    torch.testing.assert_close(loss, t(loss_rows))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(agg)
    # ∂/∂logp_t of the token mean = −Â_i/6 on policy tokens, 0 elsewhere
    torch.testing.assert_close(grad, -t(adv_seq)[:, None] * t(RF_MASK) / 6)
    assert a.group_relative is (baseline == "group_mean")


# ========================================================================================
# dr_grpo — truncated → reward 0; Â = R − mean (no std); seq-mean-token-sum-norm with L

def test_dr_grpo_truncated_rewards_zero():
    a = algo("dr_grpo")
    # scores (1, 1, 0), sample 1 truncated → (1, 0, 0)
    r = a.rewards(group([1.0, 1.0, 0.0], lengths=[3, 3, 1], truncated=[False, True, False]), CTX)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.0, 0.0]))
    # the switch off keeps the task's grade
    r = algo("dr_grpo", zero_truncated=False).rewards(group([1.0, 1.0, 0.0], truncated=[False, True, False]), CTX)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 1.0, 0.0]))


def test_dr_grpo_mean_only_advantage_and_constant_normaliser():
    a = algo("dr_grpo")
    assert a.aggregation == "seq-mean-token-sum-norm"
    assert a.needs == {"old_logp"}                   # β = 0: no reference model
    # 1 prompt × 3, L = max_new_tokens = 3; rewards after truncation zeroing: (1, 0, 0)
    # mean 1/3 → Â = (2/3, −1/3, −1/3) — no std division (GRPO would give 2/√3, −1/√3, −1/√3)
    mask = [[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 0, 0]]
    batch = make_batch(mask, [0, 0, 0], [1.0, 0.0, 0.0], scores=torch.tensor([1.0, 1.0, 0.0]),
                       truncated=[False, True, False])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t([2 / 3, -1 / 3, -1 / 3])[:, None] * t(mask))
    # on-policy (r = 1): ℓ = −Â per token; token sums: row 0: −2, row 1: +1, row 2: +1/3
    # seq-mean-token-sum-norm: (−2 + 1 + 1/3)/(N·L) = (−2/3)/9 = −2/27 = −0.0740741
    # (seq-mean-token-mean would give (−2/3 + 1/3 + 1/3)/3 = 0: the length bias Dr. GRPO removes)
    old = -0.7 * t(mask)
    batch = batch.replace(adv=adv, old_logp=old)
    loss, _, grad = grad_of_agg(a, old, batch)
    agg = aggregate(loss, batch.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx(-2 / 27)
    # ∂/∂logp_t = −Â_i/(N·L), independent of |y_i|: −2/27 on row 0, +1/27 on rows 1 and 2
    torch.testing.assert_close(grad, t([-2 / 27, 1 / 27, 1 / 27])[:, None] * t(mask))


# ========================================================================================
# rloo — Â_i = G/(G−1)·(R_i − mean) = R_i − mean_{j≠i} R_j

def test_rloo_leave_one_out_advantage():
    a = algo("rloo")
    # prompt 0: R = (1, 0, 0): 1 − (0+0)/2 = 1;  0 − (1+0)/2 = −0.5 (×2)  [= 1.5·(2/3, −1/3, −1/3)]
    # prompt 1: R = (1, 1, 0): 1 − 0.5 = 0.5 (×2);  0 − 1 = −1
    mask = [[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 1, 1], [0, 1, 0], [0, 1, 1]]
    batch = make_batch(mask, [0, 0, 0, 1, 1, 1], [1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t([1.0, -0.5, -0.5, 0.5, 0.5, -1.0])[:, None] * t(mask))


RLOO_MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 1]]
RLOO_REWARDS = [1.0, 0.0, 0.0]                        # → Â = (1, −0.5, −0.5)


def test_rloo_verl_mode_is_ppo_clip_token_mean():
    a = algo("rloo")                                    # mode verl, ε = 0.2
    assert a.aggregation == "token-mean"
    assert a.needs == {"old_logp", "ref_logp"}          # β = 0.001 > 0
    # ratios: row 0 (1.5, 1.0), row 1 (0.5, 1.0), row 2 (2.0, 1.0)
    # row 0 (Â = 1):    r 1.5 → max(−1.5, −1.2) = −1.2;  r 1 → −1
    # row 1 (Â = −.5):  r 0.5 → max(0.25, 0.4) = 0.4;  r 1 → 0.5
    # row 2 (Â = −.5):  r 2 → max(1.0, 0.6) = 1.0 (no dual clip);  r 1 → 0.5
    # token-mean: (−1.2 − 1 + 0.4 + 0.5 + 1 + 0.5)/6 = 0.2/6 = 1/30
    batch = make_batch(RLOO_MASK, [0, 0, 0], RLOO_REWARDS)
    old = t([[0, -1.0, -2.0], [0, -0.3, -0.4], [0, -2.5, -0.6]])
    logp = old + torch.log(t([[1, 1.5, 1.0], [1, 0.5, 1.0], [1, 2.0, 1.0]]))
    batch = batch.replace(adv=a.advantages(batch, CTX).adv, old_logp=old)
    loss, metrics = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.2, -1.0], [0, 0.4, 0.5], [0, 1.0, 0.5]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(1 / 30)
    assert metrics["stats/clip_frac"].item() == pytest.approx(2 / 6)   # the r = 1.5 and r = 0.5 tokens


def test_rloo_paper_mode_is_sequence_reinforce():
    a = algo("rloo", mode="paper")
    assert a.aggregation == "seq-mean-token-sum"        # via the property, whatever cfg.aggregation says
    assert algo("rloo", mode="paper", aggregation="seq-mean-token-mean").aggregation == "seq-mean-token-sum"
    assert "old_logp" not in a.needs
    # log π(y_i|x) = token sums: row 0: −0.5 − 1 = −1.5;  row 1: −0.2 − 0.3 = −0.5;  row 2: −1 − 2 = −3
    # loss = −(1/G) Σ_i Â_i log π(y_i|x) = −(1/3)(1·(−1.5) − 0.5·(−0.5) − 0.5·(−3))
    #      = −(1/3)(−1.5 + 0.25 + 1.5) = −0.25/3 = −1/12
    logp = t([[0, -0.5, -1.0], [0, -0.2, -0.3], [0, -1.0, -2.0]])
    batch = make_batch(RLOO_MASK, [0, 0, 0], RLOO_REWARDS)
    batch = batch.replace(adv=a.advantages(batch, CTX).adv)          # no old_logp: no ratio is used
    loss, _, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, 0.5, 1.0], [0, -0.1, -0.15], [0, -0.5, -1.0]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(-1 / 12)
    # gradient −Â_i/G on every token of y_i: −1/3, +1/6, +1/6
    torch.testing.assert_close(grad, t([-1 / 3, 1 / 6, 1 / 6])[:, None] * t(RLOO_MASK))


# ========================================================================================
# reinforce_pp — token rewards r_t = 1[t = T]·R − β·KL_t; G_t = Σ γ^{k−t} r_k; global whitening

def test_reinforce_pp_discounted_returns_with_kl_rewards_then_global_whitening():
    a = algo("reinforce_pp", gamma=0.5)
    assert a.needs == {"old_logp", "ref_logp"}
    # β = 0.1, k1 KL_t per token: row 0: (1, 0, 2), row 1: (0, 1); R = (1, 0)
    # token rewards: row 0: (−0.1, 0, −0.2 + 1 = 0.8);  row 1: (0, −0.1 + 0 = −0.1)
    mask = [[0, 1, 1, 1], [0, 1, 1, 0]]
    tr = t([[0, -0.1, 0.0, 0.8], [0, 0.0, -0.1, 0]])
    # γ = 0.5: row 0: G_3 = 0.8, G_2 = 0 + 0.5·0.8 = 0.4, G_1 = −0.1 + 0.5·0.4 = 0.1
    #          row 1: G_2 = −0.1, G_1 = 0 + 0.5·(−0.1) = −0.05
    # whiten the 5 policy tokens (0.1, 0.4, 0.8, −0.05, −0.1): mean 1.15/5 = 0.23
    #   deviations (−0.13, 0.17, 0.57, −0.28, −0.33); Σ dev² = 0.0169 + 0.0289 + 0.3249 + 0.0784
    #   + 0.1089 = 0.558; unbiased var = 0.558/4 = 0.1395, std = 0.3734970
    #   → (−0.348062, 0.455158, 1.526117, −0.749671, −0.883541)
    s = math.sqrt(0.1395)
    expected = t([[0, -0.13 / s, 0.17 / s, 0.57 / s], [0, -0.28 / s, -0.33 / s, 0]])
    out = a.advantages(make_batch(mask, [0, 1], [1.0, 0.0], token_rewards=tr), CTX)
    torch.testing.assert_close(out.adv, expected, rtol=1e-6, atol=1e-6)
    assert out.adv[0, 3].item() == pytest.approx(1.526117, abs=1e-6)
    # γ = 1 (default): row 0: (0.7, 0.8, 0.8), row 1: (−0.1, −0.1)
    #   mean 2.1/5 = 0.42; dev (0.28, 0.38, 0.38, −0.52, −0.52); Σ dev² = 0.0784 + 2·0.1444 + 2·0.2704
    #   = 0.908; var 0.227 → std 0.4764452
    s1 = math.sqrt(0.227)
    out1 = algo("reinforce_pp").advantages(make_batch(mask, [0, 1], [1.0, 0.0], token_rewards=tr), CTX)
    torch.testing.assert_close(out1.adv, t([[0, 0.28 / s1, 0.38 / s1, 0.38 / s1], [0, -0.52 / s1, -0.52 / s1, 0]]),
                               rtol=1e-6, atol=1e-6)


def test_reinforce_pp_loss_is_ppo_clip_without_dual_clip():
    # ε = 0.2: (Â = 1, r = 1.5) → −1.2;  (Â = −1, r = 2) → max(2, 1.2) = 2 (no dual clip);
    # (Â = −1, r = 0.5) → max(0.5, 0.8) = 0.8
    a = algo("reinforce_pp")
    old = t([[0, -1.0, -1.0, -1.0]])
    logp = old + torch.log(t([[1, 1.5, 2.0, 0.5]]))
    batch = make_batch([[0, 1, 1, 1]], [0], [0.0], old_logp=old, adv=t([[0, 1.0, -1.0, -1.0]]))
    loss, _ = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.2, 2.0, 0.8]]))


def test_reinforce_pp_baseline_group_mean_then_global_whitening():
    a = algo("reinforce_pp_baseline")
    assert a.cfg.kl_where == "loss" and a.cfg.kl_estimator == "k3"
    # prompt 0: R = (1, 0), lengths (3, 1) → centred (0.5, −0.5)
    # prompt 1: R = (3, 1), lengths (2, 2) → centred (1, −1)
    # token values: 0.5 ×3, −0.5, 1 ×2, −1 ×2 (8 tokens); mean 1/8 = 0.125
    # dev: 0.375 ×3, −0.625, 0.875 ×2, −1.125 ×2; Σ dev² = 0.421875 + 0.390625 + 1.53125 + 2.53125
    #   = 4.875; unbiased var 4.875/7 = 0.6964286, std 0.8345230
    #   → 0.449359, −0.748931, 1.048503, −1.348076 (token-weighted: not symmetric within a group)
    mask = [[0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0]]
    out = a.advantages(make_batch(mask, [0, 0, 1, 1], [1.0, 0.0, 3.0, 1.0]), CTX)
    s = math.sqrt(4.875 / 7)
    expected = t([0.375 / s, -0.625 / s, 0.875 / s, -1.125 / s])[:, None] * t(mask)
    torch.testing.assert_close(out.adv, expected, rtol=1e-6, atol=1e-6)
    assert out.adv[1, 1].item() == pytest.approx(-0.748931, abs=1e-6)


# ========================================================================================
# dapo — clip-higher, overlong shaping, dynamic-sampling filter, overlong filtering

def test_dapo_clip_higher_asymmetric():
    a = algo("dapo")
    assert (a.cfg.clip_eps_low, a.cfg.clip_eps_high) == (0.2, 0.28) and a.aggregation == "token-mean"
    # clip range [0.8, 1.28]:
    # (Â = 1, r = 1.25) → −1.25 (inside: GRPO's symmetric 0.2 would clip it to −1.2)
    # (Â = 1, r = 1.4)  → max(−1.4, −1.28) = −1.28
    # (Â = −1, r = 0.75) → max(0.75, 0.8) = 0.8
    # (Â = −1, r = 0.85) → 0.85
    # (Â = −1, r = 1.4)  → max(1.4, 1.28) = 1.4 (upper clip never binds for Â < 0)
    # token-mean: (−1.25 − 1.28 + 0.8 + 0.85 + 1.4)/5 = 0.52/5 = 0.104
    ratio = [[1, 1.25, 1.4, 1], [1, 0.75, 0.85, 1.4]]
    mask = [[0, 1, 1, 0], [0, 1, 1, 1]]
    old = t([[0, LN(0.4), LN(0.5), 0], [0, LN(0.8), LN(0.2), LN(0.5)]])
    logp = old + torch.log(t(ratio)) * t(mask)
    batch = make_batch(mask, [0, 0], [1.0, 0.0], old_logp=old, adv=t([[0, 1, 1, 0], [0, -1, -1, -1]]))
    loss, m = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.25, -1.28, 0], [0, 0.8, 0.85, 1.4]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(0.104)
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 5)
    assert m["stats/clip_frac_high"].item() == pytest.approx(1 / 5)
    assert m["stats/clip_frac_low"].item() == pytest.approx(1 / 5)
    # mean generation probability π_θ: (0.5, 0.7, 0.6, 0.17, 0.7)/5 = 2.67/5 = 0.534
    assert float(m["algo/dapo/gen_prob_mean"]) == pytest.approx(0.534)


def test_dapo_overlong_penalty_values():
    # max_new_tokens = L_max = 10, buffer 0.2 → L_cache = 2, L_exp = 8
    # |y| = 5 → 0;  8 (= L_exp) → 0;  9 → (8 − 9)/2 = −0.5;  10 (= L_max) → (8 − 10)/2 = −1
    ctx = dataclasses.replace(CTX, max_new_tokens=10, group_size=4)
    a = algo("dapo")
    r = a.rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.5, 0.0, 0.0]))
    # penalty factor 0.5 halves it: 9 → −0.25, 10 → −0.5
    r = algo("dapo", overlong_penalty=0.5).rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.75, 0.5, 0.0]))
    # no shaping under overlong = filter / none
    for mode in ("filter", "none"):
        r = algo("dapo", overlong=mode).rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
        torch.testing.assert_close(r.float(), torch.tensor([1.0, 1.0, 1.0, 0.0]))


def test_dapo_filter_drops_all_equal_groups():
    a = algo("dapo")
    # group 5: scores (1, 1, 1) → dropped even though the shaped rewards differ (the filter reads
    # the accuracy); group 2: (1, 0, 1) → kept
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    batch = make_batch([[0, 1]] * 6, [5, 5, 5, 2, 2, 2], [1.0, 0.5, 0.0, 1.0, 0.0, 1.0], scores=scores)
    keep = a.filter(batch, CTX)
    assert keep.tolist() == [False, False, False, True, True, True]
    # all-zero group dropped as well
    batch = make_batch([[0, 1]] * 4, [0, 0, 1, 1], [0.0, 0.0, 1.0, 0.0], scores=torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert a.filter(batch, CTX).tolist() == [False, False, True, True]
    assert algo("dapo", dynamic_sampling=False).filter(batch, CTX) is None


def test_dapo_overlong_filter_masks_truncated_rows():
    a = algo("dapo", overlong="filter")
    # R = (1, 0, 0), GRPO z-score (2/√3, −1/√3, −1/√3); sample 1 truncated → its row leaves the loss
    mask = [[0, 1, 1], [0, 1, 1], [0, 1, 0]]
    batch = make_batch(mask, [0, 0, 0], [1.0, 0.0, 0.0], truncated=[False, True, False])
    out = a.advantages(batch, CTX)
    torch.testing.assert_close(out.loss_mask, t([[0, 1, 1], [0, 0, 0], [0, 1, 0]]))
    r3 = math.sqrt(3)
    torch.testing.assert_close(out.adv, t([[0, 2 / r3, 2 / r3], [0, 0, 0], [0, -1 / r3, 0]]), rtol=1e-5, atol=1e-5)
    assert out.metrics["algo/dapo/overlong_frac"] == pytest.approx(1 / 3)
    # shaping mode keeps the batch's mask
    assert algo("dapo").advantages(batch, CTX).loss_mask is None


# ========================================================================================
# gspo / gspo_token — s_i = exp(mean_t log r_it), sequence-level clip; seq-mean-token-mean

GSPO_MASK = [[0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 0]]
GSPO_LOGR = [[0, 0.3, -0.1, 0.1], [0, 0.2, 0.4, 0], [0, 0.2, 0.4, 0]]   # per-token log r
GSPO_ADV = [1.0, 1.0, -1.0]
E1, E3 = math.exp(0.1), math.exp(0.3)     # 1.1051709, 1.3498588


def _gspo_batch():
    old = t([[0, -1.0, -2.0, -0.5], [0, -0.7, -1.1, 0], [0, -0.9, -1.3, 0]])
    batch = make_batch(GSPO_MASK, [0, 0, 0], [1.0, 1.0, 0.0], old_logp=old,
                       adv=t(GSPO_ADV)[:, None] * t(GSPO_MASK))
    return batch, old + t(GSPO_LOGR)


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_sequence_ratio_and_clip_by_hand(name):
    # ε_l = ε_r = 0.2 for readable numbers (clip range [0.8, 1.2])
    a = algo(name, clip_eps_low=0.2, clip_eps_high=0.2)
    assert a.aggregation == "seq-mean-token-mean"
    # row 0: s = exp((0.3 − 0.1 + 0.1)/3) = e^0.1 = 1.105171, Â = 1 → inside → ℓ = −1.105171 on all
    #        3 tokens (its first token alone has r = e^0.3 = 1.35 which a token clip would clip)
    # row 1: s = exp((0.2 + 0.4)/2) = e^0.3 = 1.349859, Â = 1 → clipped → ℓ = −1.2 on both tokens
    # row 2: same s, Â = −1 → max(1.349859, 1.2) → ℓ = 1.349859 on both tokens
    batch, logp = _gspo_batch()
    loss, m, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, -E1, -E1, -E1], [0, -1.2, -1.2, 0], [0, E3, E3, 0]]))
    # J = (−1.105171 − 1.2 + 1.349859)/3 = −0.318437
    agg = aggregate(loss, batch.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx(-0.318437, abs=1e-6)
    # ∂J/∂logp_it = (1/N)·(−Â_i·s_i/|y_i|) unless clipped:
    #   row 0: −e^0.1/9 = −0.122797;  row 1: 0 (clipped);  row 2: +e^0.3/6 = 0.224976
    torch.testing.assert_close(grad, t([[0, -E1 / 9, -E1 / 9, -E1 / 9], [0, 0, 0, 0], [0, E3 / 6, E3 / 6, 0]]))
    # clipped-token fraction: the 2 tokens of row 1 out of 7
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 7)


def test_gspo_defaults_and_sequence_clip_fraction():
    a = algo("gspo")
    assert (a.cfg.clip_eps_low, a.cfg.clip_eps_high, a.cfg.kl_coef) == (3e-4, 4e-4, 0.0)
    # with [1 − 3e-4, 1 + 4e-4]: row 0 (s = e^0.1, Â > 0) and row 1 (e^0.3, Â > 0) are clipped,
    # row 2 (Â < 0, s > 1) is not: tokens 5/7, sequences 2/3
    batch, logp = _gspo_batch()
    loss, m = a.loss(Forward(logp=logp), batch, CTX)
    assert m["stats/clip_frac"].item() == pytest.approx(5 / 7)
    assert m["algo/gspo/seq_clip_frac"].item() == pytest.approx(2 / 3)
    torch.testing.assert_close(loss[0], t([0, -1.0004, -1.0004, -1.0004]))


# ========================================================================================
# cispo — ℓ = −sg(clip(r, 1 − ε_low, 1 + ε_high))·Â·log π; every token keeps a gradient

@pytest.mark.parametrize("eps_low, w_low, clip_frac", [(None, 0.5, 1 / 3), (0.2, 0.8, 2 / 3)])
def test_cispo_stop_gradient_truncated_weight(eps_low, w_low, clip_frac):
    a = algo("cispo", eps_is_low=eps_low)           # ε_high = 0.2 (cap 1.2)
    # token 1: Â = 1,  r = 1.5 → w = 1.2;           log π = −0.5 → ℓ = −1.2·1·(−0.5) = 0.6
    # token 2: Â = −1, r = 0.5 → w = 0.5 (no lower bound) or 0.8 (ε_low 0.2); log π = −1 → ℓ = −w
    # token 3: Â = 1,  r = 1 → w = 1;               log π = −2 → ℓ = 2
    logp = t([[0, -0.5, -1.0, -2.0]])
    old = logp - torch.log(t([[1, 1.5, 0.5, 1.0]]))
    batch = make_batch([[0, 1, 1, 1]], [0], [0.0], old_logp=old, adv=t([[0, 1.0, -1.0, 1.0]]))
    loss, m, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, 0.6, -w_low, 2.0]]))
    # token-mean: (0.6 − w + 2)/3
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx((2.6 - w_low) / 3)
    # ∂ℓ/∂log π = −w·Â (the weight is a constant), /3 for the token mean:
    #   (−1.2, +w, −1)/3 — nonzero even where PPO's clip would have cut the gradient (r = 1.5, Â > 0)
    torch.testing.assert_close(grad, t([[0, -1.2, w_low, -1.0]]) / 3)
    assert m["stats/clip_frac"].item() == pytest.approx(clip_frac)
    assert m["stats/clip_frac_high"].item() == pytest.approx(1 / 3)
    assert m["stats/ratio_mean"].item() == pytest.approx(1.0)       # (1.5 + 0.5 + 1)/3


def test_cispo_advantage_is_group_z_score():
    # R = (1, 0, 0): mean 1/3, unbiased std 1/√3 → (2/√3, −1/√3, −1/√3); mean-only: (2/3, −1/3, −1/3)
    batch = make_batch([[0, 1]] * 3, [0, 0, 0], [1.0, 0.0, 0.0])
    r3 = math.sqrt(3)
    torch.testing.assert_close(algo("cispo").advantages(batch, CTX).adv[:, 1], t([2 / r3, -1 / r3, -1 / r3]),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(algo("cispo", scale_by_std=False).advantages(batch, CTX).adv[:, 1],
                               t([2 / 3, -1 / 3, -1 / 3]))


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
