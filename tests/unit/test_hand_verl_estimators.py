"""Hand-computed examples for the entries that port verl 0.9.1's advantage estimators — OPO, GPG,
ReMax, GRPO pass@k and GDPO (definitions in their module docstrings) — and verl's own numbers on
the same inputs.

Every hand value is worked out in the comments from the formulas, never by calling the code under
test. The ``VERL_*`` constants were produced once by running verl 0.9.1's functions
(``verl/trainer/ppo/core_algos.py``: ``compute_opo_outcome_advantage``,
``compute_gpg_outcome_advantage``, ``compute_policy_loss_gpg``, ``compute_policy_loss_vanilla``,
``compute_remax_outcome_advantage``, ``compute_grpo_passk_outcome_advantage``,
``compute_gdpo_outcome_advantage``) on these inputs — verl's tensors are the response columns
only (the suite's batch adds one prompt column), the outcome reward on the last valid token, an
``index`` per group, float32 — and are recorded here; verl is not needed to run the tests.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.base import Group
from rlsuite.algorithms.grpo_passk import passk_advantage
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.fakes import hand_batch, hook_ctx, make_entry

D = torch.float64
CTX = hook_ctx(gen_seed=0, max_new_tokens=4, group_size=3, prompts_per_step=3)


def t(x):
    return torch.tensor(x, dtype=D)


def with_adv(alg, batch):
    out = alg.advantages(batch, CTX)
    return out, dataclasses.replace(batch, adv=out.adv, extras={**batch.extras, **out.extras})


def close(x, want, tol=1e-6):
    torch.testing.assert_close(x.to(D), t(want), rtol=0, atol=tol)


# ========================================================================================
# Shared input of OPO, GPG and GDPO: groups a = rows 0-2, b = rows 3-4, c = row 5 (a singleton);
# one prompt column, then 4 response columns; lengths |y| = 2, 1, 3, 1, 2, 2 (11 policy tokens).
MASK = [[0, 1, 1, 0, 0], [0, 1, 0, 0, 0], [0, 1, 1, 1, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0]]
GID = [0, 0, 0, 1, 1, 2]
R = [1.0, 0.0, 1.0, 0.5, 0.0, 0.7]
# log π_θ (the forward) and log π_old on the policy tokens; the log-ratio δ = log π_θ − log π_old is
# row 0: 0.3, −0.4 | row 1: 1.5 | row 2: 0, 0.1, −0.1 | row 3: −2.0 | row 4: 0.05, 1.3 | row 5: 0, 0
LOGP = [[0, -0.5, -1.0, 0, 0], [0, -2.0, 0, 0, 0], [0, -0.1, -0.2, -0.3, 0], [0, -1.5, 0, 0, 0],
        [0, -0.4, -0.6, 0, 0], [0, -1.0, -0.8, 0, 0]]
DELTA = [[0, 0.3, -0.4, 0, 0], [0, 1.5, 0, 0, 0], [0, 0.0, 0.1, -0.1, 0], [0, -2.0, 0, 0, 0],
         [0, 0.05, 1.3, 0, 0], [0, 0, 0, 0, 0]]


def shared_batch(rewards=R):
    return hand_batch(MASK, GID, rewards, old_logp=(t(LOGP) - t(DELTA)) * t(MASK))


# verl 0.9.1 on the same inputs (float32; the first response column, the advantage being per sequence)
VERL_OPO = [0.1666666865348816, -0.8333333134651184, 0.1666666865348816, 0.3333333134651184,
            -0.1666666716337204, 0.699999988079071]
VERL_OPO_VANILLA_LOSS = 0.0833374559879303  # compute_policy_loss_vanilla, clip 0.2, clip_ratio_c 3, token-mean
VERL_GPG = [0.4999999701976776, -1.0, 0.4999999701976776, 0.375, -0.375, 1.0499999523162842]
VERL_GPG_LOSS = 0.10249998420476913  # compute_policy_loss_gpg, token-mean
VERL_GDPO = [0.5075113773345947, -1.9554582834243774, 0.5075113773345947, 0.692023515701294,
             -1.3189804553985596, 0.6819196343421936]
VERL_GDPO_NOSTD = [0.329850435256958, -2.062471628189087, 0.329850435256958, 0.13049031794071198,
                   -1.0656707286834717, 1.2070351839065552]


# ========================================================================================
# OPO — b = Σ|y_j| R_j / Σ|y_j| per group; Â_i = R_i − b
# a: b = (2·1 + 1·0 + 3·1)/(2 + 1 + 3) = 5/6 → Â = 1/6, −5/6, 1/6 (the mean 2/3 would give 1/3, −2/3, 1/3)
# b: b = (1·0.5 + 2·0)/(1 + 2) = 1/6 → Â = 1/3, −1/6
# c: singleton → b = 0 → Â = 0.7
OPO_HAND = [1 / 6, -5 / 6, 1 / 6, 1 / 3, -1 / 6, 0.7]


def test_opo_length_weighted_baseline():
    out = make_entry("opo").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(OPO_HAND)[:, None] * t(MASK))


def test_opo_matches_verl():
    out = make_entry("opo").advantages(shared_batch(), CTX)
    close(out.adv[:, 1], VERL_OPO)


def test_opo_equal_group_is_exactly_zero_and_empty_group_is_finite():
    # rewards 0.1 in group a: Σ l·0.1 / Σ l need not round back to 0.1; the advantage is exactly 0
    out = make_entry("opo").advantages(shared_batch([0.1, 0.1, 0.1, 0.5, 0.0, 0.7]), CTX)
    assert (out.adv[:3] == 0).all()
    # a group whose rows have no policy tokens: baseline 0 (verl: 0/0), advantage 0 on the empty mask
    b = hand_batch([[0, 0, 0], [0, 0, 0], [0, 1, 1]], [0, 0, 1], [1.0, 0.0, 1.0])
    adv = make_entry("opo").advantages(b, CTX).adv
    assert torch.isfinite(adv).all() and (adv[:2] == 0).all() and float(adv[2, 1]) == 1.0


def test_opo_ppo_loss_with_verls_dual_clip():
    alg = make_entry("opo")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0 and alg.cfg.dual_clip == 3.0
    _, b = with_adv(alg, shared_batch())
    loss, _ = alg.loss(Forward(logp=t(LOGP) * t(MASK)), b, CTX)
    # per token max(−Â r, −Â clip(r, 0.8, 1.2)), then for Â < 0 min(·, −3Â):
    # row 0 (Â 1/6): r = e^0.3 = 1.349859 → −1.2/6 = −0.2; r = e^−0.4 = 0.670320 → −0.670320/6 = −0.111720
    # row 1 (Â −5/6): r = e^1.5 = 4.481689 → 5/6·4.481689 = 3.734741, dual clip → 5/6·3 = 2.5
    # row 2 (Â 1/6): r = 1, e^0.1, e^−0.1 → −0.166667, −0.184195, −0.150806
    # row 3 (Â 1/3): r = e^−2 = 0.135335 → −0.045112
    # row 4 (Â −1/6): r = e^0.05 → 1.051271/6 = 0.175212; r = e^1.3 = 3.669297 → 0.611550, dual clip → 0.5
    # row 5 (Â 0.7): r = 1 → −0.7, −0.7
    want = [[0, -0.2, -math.exp(-0.4) / 6, 0, 0], [0, 2.5, 0, 0, 0],
            [0, -1 / 6, -math.exp(0.1) / 6, -math.exp(-0.1) / 6, 0], [0, -math.exp(-2.0) / 3, 0, 0, 0],
            [0, math.exp(0.05) / 6, 0.5, 0, 0], [0, -0.7, -0.7, 0, 0]]
    torch.testing.assert_close(loss, t(want))
    # token-mean: Σ = 0.916712 over 11 tokens = 0.083337
    total = aggregate(loss, b.loss_mask, alg.aggregation, 4)
    assert float(total) == pytest.approx(0.9167120 / 11, abs=1e-6)
    assert float(total) == pytest.approx(VERL_OPO_VANILLA_LOSS, abs=1e-6)
    # without the dual clip, row 1 and row 4's second token keep 3.734741 and 0.611550
    loss_nd, _ = make_entry("opo", dual_clip=None).loss(Forward(logp=t(LOGP) * t(MASK)), b, CTX)
    assert float(loss_nd[1, 1]) == pytest.approx(5 / 6 * math.exp(1.5))
    assert float(loss_nd[4, 2]) == pytest.approx(math.exp(1.3) / 6)


# ========================================================================================
# GPG — Â_i = α·(R_i − mean_G R), α = B / #{R ≠ 0} = 6/4 = 1.5 (rewards 1, 1, 0.5, 0.7 are non-zero)
# a: mean 2/3 → 1.5·(1/3, −2/3, 1/3) = 0.5, −1, 0.5;  b: mean 0.25 → ±0.375;  c: mean 0 → 1.5·0.7 = 1.05
GPG_HAND = [0.5, -1.0, 0.5, 0.375, -0.375, 1.05]


def test_gpg_advantage_and_alpha():
    out = make_entry("gpg").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(GPG_HAND)[:, None] * t(MASK))
    assert out.metrics["algo/gpg/alpha"] == 1.5
    close(out.adv[:, 1], VERL_GPG)
    # every reward 0: #{R ≠ 0} is clamped to 1 → α = B = 6 (and every advantage is 0)
    zero = make_entry("gpg").advantages(shared_batch([0.0] * 6), CTX)
    assert zero.metrics["algo/gpg/alpha"] == 6.0 and (zero.adv == 0).all()


def test_gpg_loss_is_plain_policy_gradient():
    alg = make_entry("gpg")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0 and "old_logp" not in alg.needs
    _, b = with_adv(alg, shared_batch())
    x = (t(LOGP) * t(MASK)).requires_grad_(True)
    loss, _ = alg.loss(Forward(logp=x), b, CTX)
    # −Â·log π per token (no ratio: log π_old plays no part): row 0 0.5·(0.5 + 1.0) = 0.75, row 1 −1·2 = −2,
    # row 2 0.5·0.6 = 0.3, row 3 0.375·1.5 = 0.5625, row 4 −0.375·1.0 = −0.375, row 5 1.05·1.8 = 1.89
    # Σ = 1.1275 over 11 tokens = 0.1025
    total = aggregate(loss, b.loss_mask, alg.aggregation, 4)
    assert float(total.detach()) == pytest.approx(0.1025)
    assert float(total.detach()) == pytest.approx(VERL_GPG_LOSS, abs=1e-6)
    total.backward()  # ∂/∂log π_t = −Â_i / 11
    torch.testing.assert_close(x.grad, -t(GPG_HAND)[:, None] * t(MASK) / 11)


# ========================================================================================
# ReMax — 2 prompts × 2 samples; row 1 has a tool observation at column 2 (mask 0 inside the response)
RM_MASK = [[0, 1, 1, 0, 0], [0, 1, 0, 1, 1], [0, 1, 1, 1, 0], [0, 1, 0, 0, 0]]
RM_SCORES = [1.0, 0.0, 1.0, 1.0]
RM_BASE = [1.0, 0.0]  # the grades of the two prompts' greedy decodes
RM_KL = [[0, 0.2, 0.4, 0, 0], [0, 0.1, 0, -0.3, 0.5], [0, 0.0, 0.2, 0.6, 0], [0, 1.0, 0, 0, 0]]  # k1 at π_old
VERL_REMAX_KL = [[-0.06000000238418579, -0.04000002145767212, 0.0, 0.0],
                 [-1.0299999713897705, -0.0, -1.0199999809265137, -1.0499999523162842],
                 [0.9200000166893005, 0.9200000166893005, 0.9399999976158142, 0.0], [0.8999999761581421, 0.0, 0.0, 0.0]]
VERL_REMAX_NOKL = [[0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, -1.0, -1.0], [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def remax_rewards(alg):
    out = []
    for g, base in enumerate(RM_BASE):
        sl = slice(2 * g, 2 * g + 2)
        grp = Group(prompt="p", example=None, completions=("y",) * 2, parsed=(None,) * 2,
                    scores=torch.tensor(RM_SCORES[sl]), grade=lambda text, b=base: b if text == "greedy" else -9.0,
                    anchors=("greedy",))
        out.append(torch.as_tensor(alg.rewards(grp, CTX)))
    return torch.cat(out).to(D)


def trainer_token_rewards(rewards, beta):
    """What the trainer builds (suite/trainer.py ``_score``): −β·k on policy tokens, the reward on the last."""
    mask = t(RM_MASK)
    tr = -beta * t(RM_KL) * mask
    last = (mask * torch.arange(mask.shape[1])).argmax(-1)
    tr[torch.arange(4), last] += rewards
    return tr * mask, rewards - beta * (t(RM_KL) * mask).sum(-1)


def test_remax_defaults_and_greedy_baseline_in_the_reward():
    alg = make_entry("remax")
    assert {"anchor", "old_logp", "ref_logp"} <= alg.needs
    assert (alg.cfg.kl_coef, alg.cfg.kl_estimator, alg.cfg.kl_where) == (0.001, "k1", "reward")
    assert alg.aggregation == "token-mean" and alg.cfg.dual_clip == 3.0
    # R − b: prompt 0 (greedy graded 1): 1 − 1 = 0, 0 − 1 = −1; prompt 1 (greedy graded 0): 1, 1
    torch.testing.assert_close(remax_rewards(alg), t([0.0, -1.0, 1.0, 1.0]))
    # no anchor or no grader (hooks outside the trainer): baseline 0
    bare = Group(prompt="p", example=None, completions=("y",), parsed=(None,), scores=torch.tensor([0.4]))
    assert float(alg.rewards(bare, CTX)[0]) == pytest.approx(0.4)


def test_remax_returns_to_go_of_the_kl_shaped_reward():
    alg = make_entry("remax", kl_coef=0.1)
    tr, shaped = trainer_token_rewards(remax_rewards(alg), 0.1)
    b = hand_batch(RM_MASK, [0, 0, 1, 1], shaped, token_rewards=tr, scores=t(RM_SCORES))
    adv = alg.advantages(b, CTX).adv
    # Â_t = Σ_{s≥t} r_s over policy tokens (β = 0.1):
    # row 0 (R − b = 0): r = −0.02, −0.04 → −0.06, −0.04
    # row 1 (R − b = −1): r = −0.01 | obs | +0.03, −0.05 − 1 = −1.05 → −1.03, 0, −1.02, −1.05
    # row 2 (R − b = 1): r = 0, −0.02, −0.06 + 1 = 0.94 → 0.92, 0.92, 0.94
    # row 3 (R − b = 1): r = −0.1 + 1 = 0.9 → 0.9
    want = [[0, -0.06, -0.04, 0, 0], [0, -1.03, 0, -1.02, -1.05], [0, 0.92, 0.92, 0.94, 0], [0, 0.9, 0, 0, 0]]
    torch.testing.assert_close(adv, t(want))
    close(adv[:, 1:], VERL_REMAX_KL)


def test_remax_without_kl_is_reward_minus_greedy_reward():
    alg = make_entry("remax", kl_coef=0.0)
    rewards = remax_rewards(alg)
    tr, shaped = trainer_token_rewards(rewards, 0.0)
    b = hand_batch(RM_MASK, [0, 0, 1, 1], rewards, token_rewards=tr, scores=t(RM_SCORES))
    want = t([0.0, -1.0, 1.0, 1.0])[:, None] * t(RM_MASK)  # R − b on every policy token
    torch.testing.assert_close(alg.advantages(b, CTX).adv, want)
    close(alg.advantages(b, CTX).adv[:, 1:], VERL_REMAX_NOKL)
    # a batch without token rewards: the sequence reward broadcast (the same numbers)
    torch.testing.assert_close(alg.advantages(dataclasses.replace(b, token_rewards=None), CTX).adv, want)


# ========================================================================================
# GRPO pass@k — groups of 4, 4, 3 (one response column each)
PK_R = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.2, 0.9, 0.5]
PK_GID = [0] * 4 + [1] * 4 + [2] * 3
# group 0: R_(1) − R_(2) = 1 − 0 = 1 on row 1; std of (0, 1, 0, 0): mean 0.25, Σ(dev²) = 3·0.0625 + 0.5625 = 0.75,
#   /3 = 0.25 → 0.5 → 1/(0.5 + 1e-6) = 1.999996
# group 1: two 1.0 at the top → 1 − 1 = 0 for everyone
# group 2: 0.9 − 0.5 = 0.4 on row 9; std of (0.2, 0.9, 0.5): mean 0.533333, devs −0.333333, 0.366667, −0.033333,
#   Σ(dev²) = 0.246667, /2 = 0.123333 → 0.351188 → 0.4/0.351189 = 1.138986
PK_HAND = [0, 1 / (0.5 + 1e-6), 0, 0, 0, 0, 0, 0, 0, 0.4 / (math.sqrt(0.24666666666666667 / 2) + 1e-6), 0]
VERL_PASSK = [0.0, 1.9999959468841553, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.1389862298965454, 0.0]
VERL_PASSK_NOSTD = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3999999761581421, 0.0]


def test_grpo_passk_only_the_best_sample_gets_its_margin():
    b = hand_batch([[0, 1]] * 11, PK_GID, PK_R)
    alg = make_entry("grpo_passk")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0
    adv = alg.advantages(b, CTX).adv
    torch.testing.assert_close(adv[:, 1], t(PK_HAND))
    close(adv[:, 1], VERL_PASSK)
    # scale_by_std off: the raw margins 1 and 0.4
    raw = make_entry("grpo_passk", scale_by_std=False).advantages(b, CTX).adv[:, 1]
    torch.testing.assert_close(raw, t([0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0.9 - 0.5, 0]))
    close(raw, VERL_PASSK_NOSTD)


def test_grpo_passk_clip_acts_on_the_best_sample():
    b = hand_batch([[0, 1]] * 11, PK_GID, PK_R, old_logp=t([[0, -1.0]] * 11))
    logp = Forward(logp=t([[0, -0.5]] * 11))  # r = e^0.5 = 1.648721 on every token
    for eps_high in (0.2, 0.5):
        alg = make_entry("grpo_passk", clip_eps_high=eps_high)
        _, bb = with_adv(alg, b)
        loss, _ = alg.loss(logp, bb, CTX)
        # Â > 0 only on rows 1 and 9: ℓ = −Â·min(r, 1 + ε_high); every other row 0
        torch.testing.assert_close(loss[:, 1], -t(PK_HAND) * (1 + eps_high))


def test_grpo_passk_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="at least 2 samples"):
        passk_advantage(t([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))


# ========================================================================================
# GDPO with one reward component — GRPO z-score, then whitened over the batch's policy tokens
# z: a: mean 2/3, std √(1/3) = 0.577350 → (1/3)/0.577351 = 0.577349, −1.154699, 0.577349
#    b: mean 0.25, std √0.125 = 0.353553 → ±0.707105;  c: singleton (mean 0, std 1) → 0.7/(1 + 1e-6) = 0.699999
# token-weighted (|y| = 2, 1, 3, 1, 2, 2; 11 tokens) mean m = (2·0.577349 − 1.154699 + 3·0.577349 + 0.707105
#    − 2·0.707105 + 2·0.699999)/11 = 2.424942/11 = 0.220449; unbiased var = Σ l (z − m)²/10 = 0.494540
#    → sqrt(var + 1e-8) = 0.703236;  Â = (z − m)/0.703236 = 0.507511, −1.955458, 0.507511, 0.692023, −1.318981, 0.681920
GDPO_HAND = [0.5075113426710127, -1.9554582102738014, 0.5075113426710127, 0.6920234987369954,
             -1.3189805153581795, 0.6819195144490509]
# scale_by_std off: z = 1/3, −2/3, 1/3, 0.25, −0.25, 0.7; m = 2.15/11 = 0.195455; var = 0.174727
#    → Â = (z − m)/0.418004 = 0.329850, −2.062472, 0.329850, 0.130490, −1.065671, 1.207035
GDPO_NOSTD_HAND = [0.32985046090591064, -2.0624715632468478, 0.32985046090591064, 0.13049029222651415,
                   -1.0656707198498652, 1.2070352030952554]


def test_gdpo_is_grpo_then_batch_whitening():
    out = make_entry("gdpo").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(GDPO_HAND)[:, None] * t(MASK))
    close(out.adv[:, 1], VERL_GDPO)
    nostd = make_entry("gdpo", scale_by_std=False).advantages(shared_batch(), CTX)
    torch.testing.assert_close(nostd.adv, t(GDPO_NOSTD_HAND)[:, None] * t(MASK))
    close(nostd.adv[:, 1], VERL_GDPO_NOSTD)


def test_gdpo_equal_groups_are_shifted_by_one_constant_and_an_equal_batch_is_zero():
    # group a all 0.3: z = 0 there, then −m/std of the batch on all its tokens (not 0, unlike GRPO)
    adv = make_entry("gdpo").advantages(shared_batch([0.3, 0.3, 0.3, 0.5, 0.0, 0.7]), CTX).adv
    on = t(MASK)[:3] > 0
    assert (adv[:3][on] == adv[0, 1]).all() and float(adv[0, 1]) != 0.0
    # every group equal (and no singleton): every z is 0 → exactly 0
    flat = hand_batch(MASK[:5], GID[:5], [0.3] * 3 + [0.9] * 2)
    assert (make_entry("gdpo").advantages(flat, CTX).adv == 0).all()
