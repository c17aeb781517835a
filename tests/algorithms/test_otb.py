"""OTB: the per-token baseline B_t = Σ G·W / (Σ W + ε) worked by hand from chosen token distributions,
the zero tail, the singleton group, the tool-integrated (policy-token) alignment against the column
one on a row with an observation, the energy's two sources (π_old's full-vocabulary Σπ², verl's; the
behaviour's top-K), the W scaling by the squared importance weight, and the dual-clip PPO loss.

The ``VERL_*`` constants were produced once by running verl 0.9.1's
``compute_optimal_token_baseline_advantage`` and ``compute_multi_turn_optimal_token_baseline_advantage``
(``verl/trainer/ppo/core_algos.py``) on the same inputs — verl's tensors are the response columns only
(this batch adds one prompt column), the outcome reward on the last valid token, ``old_log_probs`` =
log π(y_t), ``sum_pi_squared`` = the Σπ² below, float32; verl is not needed to run the tests.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.otb import optimal_token_baseline, token_energy
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.fakes import hand_batch, hook_ctx, make_entry

CTX = hook_ctx(gen_seed=0, max_new_tokens=4, group_size=3, prompts_per_step=3)
LN5 = math.log(0.5)

# Token distributions (K = 2 top probabilities; π = the sampled token's probability):
#   A: π 0.5,  top (0.5, 0.5)   Σπ² = 0.5     w = 1 − 2·0.5 + 0.5     = 0.5
#   Bd: π 0.5, top (0.5, 0.25)  Σπ² = 0.3125  w = 1 − 1 + 0.3125      = 0.3125
#   C: π 0.25, top (0.5, 0.25)  Σπ² = 0.3125  w = 1 − 0.5 + 0.3125    = 0.8125
#   E: π 0.75, top (0.75, 0.25) Σπ² = 0.625   w = 1 − 1.5 + 0.625     = 0.125
DIST = {"A": (0.5, (0.5, 0.5)), "Bd": (0.5, (0.5, 0.25)), "C": (0.25, (0.5, 0.25)), "E": (0.75, (0.75, 0.25)),
        "-": (1.0, (0.5, 0.5))}  # "-": prompt or padding (masked out)
# one prompt column, then 4 response columns; groups a = rows 0-2 (|y| 2, 3, 1), b = rows 3-4 (2, 2), c = row 5
ROWS = [["-", "A", "E", "-", "-"], ["-", "C", "A", "A", "-"], ["-", "Bd", "-", "-", "-"],
        ["-", "A", "A", "-", "-"], ["-", "E", "C", "-", "-"], ["-", "A", "-", "-", "-"]]
MASK = [[0, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0], [0, 1, 0, 0, 0]]
GID = [0, 0, 0, 1, 1, 2]
R = [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def otb_batch(rows=ROWS, mask=MASK, gid=GID, rewards=R, **kw):
    """π_old(y_t) and Σπ² from the distributions above (the scoring pass's fields); the same π as μ's
    log-prob and the top probabilities as μ's top-K (``energy = behaviour_topk``)."""
    logp = t([[math.log(DIST[d][0]) for d in r] for r in rows]) * t(mask)
    topk = t([[[math.log(p) for p in DIST[d][1]] for d in r] for r in rows])
    sum_sq = t([[sum(p * p for p in DIST[d][1]) for d in r] for r in rows]) * t(mask)
    return hand_batch(mask, gid, rewards, **{"behav_logp": logp, "topk_logp": topk, "old_logp": logp,
                                             "old_sum_pi_sq": sum_sq, **kw})


# Cumulative energies W (response columns) and the baselines:
# a: row 0 w (0.5, 0.125) → W (0.5, 0.625); row 1 w (0.8125, 0.5, 0.5) → W (0.8125, 1.3125, 1.8125);
#    row 2 w 0.3125 → W 0.3125.  R = 0, 1, 1.
#    col 0: B = (0·0.5 + 1·0.8125 + 1·0.3125)/(0.5 + 0.8125 + 0.3125) = 1.125/1.625 = 9/13
#    col 1: B = (0·0.625 + 1·1.3125)/(0.625 + 1.3125) = 1.3125/1.9375 = 21/31
#    col 2: row 1 alone, B = 1.8125/(1.8125 + ε) ≈ 1 − 5.5e-9; zero tail (|y| 3 > 2, unique longest) → B = 0
#    Â: row 0 (−9/13, −21/31); row 1 (4/13, 10/31, 1); row 2 (4/13)
# b: row 3 w (0.5, 0.5) → W (0.5, 1.0); row 4 w (0.125, 0.8125) → W (0.125, 0.9375).  R = 1, 0 (no tail: a tie)
#    col 0: B = 0.5/0.625 = 0.8;  col 1: B = 1.0/1.9375 = 16/31
#    Â: row 3 (0.2, 15/31); row 4 (−0.8, −16/31)
# c: a singleton: no baseline, Â = R = 1
HAND = [[0, -9 / 13, -21 / 31, 0, 0], [0, 4 / 13, 10 / 31, 1.0, 0], [0, 4 / 13, 0, 0, 0],
        [0, 0.2, 15 / 31, 0, 0], [0, -0.8, -16 / 31, 0, 0], [0, 1.0, 0, 0, 0]]
VERL_OTB = [[-0.692307710647583, -0.6774193644523621, -0.0, 0.0], [0.307692289352417, 0.32258063554763794, 1.0, 0.0],
            [0.307692289352417, -0.0, -0.0, 0.0], [0.19999998807907104, 0.4838709831237793, 0.0, 0.0],
            [-0.800000011920929, -0.5161290168762207, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def test_energy_is_one_minus_two_pi_plus_sum_of_squares():
    b = otb_batch()
    w = token_energy(b.old_logp, b.old_sum_pi_sq, b.loss_mask)
    want = [[0, 0.5, 0.125, 0, 0], [0, 0.8125, 0.5, 0.5, 0], [0, 0.3125, 0, 0, 0],
            [0, 0.5, 0.5, 0, 0], [0, 0.125, 0.8125, 0, 0], [0, 0.5, 0, 0, 0]]
    torch.testing.assert_close(w, t(want))


def test_advantage_by_hand_and_as_verl():
    alg = make_entry("otb")
    assert alg.needs >= {"old_sum_pi_sq", "old_logp"} and "topk" not in alg.needs and not alg.group_relative
    assert alg.old_logp_before_update  # π_old's scoring pass runs (its Σπ² is read before the update)
    out = alg.advantages(otb_batch(), CTX)
    torch.testing.assert_close(out.adv, t(HAND), rtol=0, atol=1e-7)  # ε = 1e-8 in the divisor: |ΔÂ| < 2e-8
    torch.testing.assert_close(out.adv[:, 1:], t(VERL_OTB), rtol=0, atol=1e-6)
    # metric: the mean baseline G − Â over the 11 policy tokens: (9/13 + 21/31 + 9/13 + 21/31 + 0 + 9/13 + 0.8
    # + 16/31 + 0.8 + 16/31 + 0)/11
    want = (3 * 9 / 13 + 2 * 21 / 31 + 2 * 0.8 + 2 * 16 / 31) / 11
    assert out.metrics["algo/otb/baseline_mean"] == pytest.approx(want)


def test_energy_reads_pi_old_by_default_and_the_behaviour_top_k_when_asked():
    # μ differs from π_old: the default reads π_old(y_t) and its Σπ² only (μ's fields scrambled: same Â);
    # behaviour_topk reads μ(y_t) and Σ over μ's top-K only (π_old's fields scrambled: same Â)
    good = otb_batch()
    junk_mu = otb_batch(behav_logp=torch.full_like(good.behav_logp, LN5 * 3) * good.loss_mask,
                        topk_logp=torch.full_like(good.topk_logp, -5.0))
    torch.testing.assert_close(make_entry("otb").advantages(junk_mu, CTX).adv, t(HAND), rtol=0, atol=1e-7)
    junk_old = otb_batch(old_logp=torch.full_like(good.old_logp, -3.0) * good.loss_mask,
                         old_sum_pi_sq=torch.full_like(good.old_sum_pi_sq, 0.9))
    topk = make_entry("otb", energy="behaviour_topk")
    assert "topk" in topk.needs and "old_sum_pi_sq" not in topk.needs and not topk.old_logp_before_update
    torch.testing.assert_close(topk.advantages(junk_old, CTX).adv, t(HAND), rtol=0, atol=1e-7)
    no_old = otb_batch(old_logp=None, old_sum_pi_sq=None)  # it does not read π_old before the update
    torch.testing.assert_close(topk.advantages(no_old, CTX).adv, t(HAND), rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="scoring pass"):
        make_entry("otb").advantages(otb_batch(old_sum_pi_sq=None), CTX)
    with pytest.raises(ValueError, match="rollout.topk"):
        topk.advantages(otb_batch(topk_logp=None), CTX)


def test_importance_weight_scales_the_energy_by_its_square():
    # group b (rows 3-4) with ρ̄ = 2 on row 3, 1 elsewhere: row 3's w (0.5, 0.5) → (2, 2), W (2, 4);
    # row 4 W (0.125, 0.9375). col 0: B = (1·2 + 0)/(2 + 0.125) = 16/17; col 1: B = 4/(4 + 0.9375) = 64/79
    b = otb_batch()
    rho = torch.ones_like(b.loss_mask)
    rho[3] = 2.0
    b = b.replace(extras={"is_weight": rho * b.loss_mask})
    adv = make_entry("otb").advantages(b, CTX).adv
    torch.testing.assert_close(adv[3:5, 1:3], t([[1 - 16 / 17, 1 - 64 / 79], [-16 / 17, -64 / 79]]),
                               rtol=0, atol=1e-7)
    torch.testing.assert_close(adv[:3], t(HAND)[:3], rtol=0, atol=1e-7)  # ρ̄ = 1: unchanged
    off = make_entry("otb", is_scaling=False).advantages(b, CTX).adv
    torch.testing.assert_close(off, t(HAND), rtol=0, atol=1e-7)


def test_without_zero_tail_the_longest_tail_is_its_own_baseline():
    adv = make_entry("otb", handle_zero_tail=False).advantages(otb_batch(), CTX).adv
    # row 1, col 2: Â = 1 − 1.8125/(1.8125 + 1e-8) = 1e-8/(1.8125 + 1e-8) ≈ 5.517e-9; the rest unchanged
    assert float(adv[1, 3]) == pytest.approx(1e-8 / 1.8125, rel=1e-6)
    torch.testing.assert_close(adv[:, :3], t(HAND)[:, :3], rtol=0, atol=1e-7)


def test_equal_rewards_give_almost_zero_but_the_tail_keeps_its_return():
    # group a with R = 1 everywhere: B_t = ΣW/(ΣW + ε) → Â = ε/(ΣW + ε) on shared columns; the zero tail of
    # row 1 (col 2) keeps Â = 1
    adv = make_entry("otb").advantages(otb_batch(rewards=[1.0] * 6), CTX).adv
    assert float(adv[0, 1]) == pytest.approx(1e-8 / 1.625, rel=1e-6)
    assert float(adv[1, 3]) == 1.0


# Multi-turn: row 0 = policy token, observation (loss mask 0), policy token; row 1 = two policy tokens;
# every w = 0.5 (distribution A); R = 1, 0; W: row 0 (0.5, ·, 1.0), row 1 (0.5, 1.0).
MT_ROWS = [["-", "A", "-", "A", "-"], ["-", "A", "A", "-", "-"]]
MT_MASK = [[0, 1, 0, 1, 0], [0, 1, 1, 0, 0]]
# column alignment (otb): col 0 B = 0.5/1.0 = 0.5; col 1 row 1 alone: B = 0/1.0 = 0 → Â = 0;
#   col 2 row 0 alone: B = 1.0/(1.0 + ε) → Â = ε/(1 + ε) ≈ 1e-8 (0 in verl's float32)
# token alignment (tir): k 0 B = 0.5; k 1 B = (1·1.0 + 0·1.0)/2.0 = 0.5 → Â row 0 (0.5, 0.5), row 1 (−0.5, −0.5)
VERL_OTB_MT = [[0.5, 0.0, 0.0, 0.0], [-0.5, 0.0, -0.0, 0.0]]
VERL_TIR_MT = [[0.5, 0.0, 0.5, 0.0], [-0.5, -0.5, 0.0, 0.0]]


def test_tool_integrated_form_aligns_policy_tokens_not_columns():
    b = otb_batch(MT_ROWS, MT_MASK, [0, 0], [1.0, 0.0])
    col = make_entry("otb").advantages(b, CTX).adv
    tir = make_entry("otb", variant="tir").advantages(b, CTX).adv
    torch.testing.assert_close(col, t([[0, 0.5, 0, 0, 0], [0, -0.5, 0, 0, 0]]), rtol=0, atol=1e-7)
    assert float(col[0, 3]) == pytest.approx(1e-8 / (1 + 1e-8), rel=1e-6)
    torch.testing.assert_close(tir, t([[0, 0.5, 0, 0.5, 0], [0, -0.5, -0.5, 0, 0]]))
    torch.testing.assert_close(col[:, 1:], t(VERL_OTB_MT), rtol=0, atol=1e-6)
    torch.testing.assert_close(tir[:, 1:], t(VERL_TIR_MT), rtol=0, atol=1e-6)
    # single-turn rows: both alignments are the same
    st = otb_batch()
    torch.testing.assert_close(make_entry("otb", variant="tir").advantages(st, CTX).adv,
                               make_entry("otb").advantages(st, CTX).adv, rtol=0, atol=0)


def test_return_to_go_includes_the_in_reward_kl():
    # token rewards r = (−0.1, 1 − 0.1) on row 0 and (−0.2, −0.2) on row 1 (one group, w = 0.5 each):
    # G row 0 = (0.8, 0.9), row 1 = (−0.4, −0.2); W = (0.5, 1.0) on both rows
    # B_0 = (0.8·0.5 − 0.4·0.5)/1.0 = 0.2; B_1 = (0.9·1.0 − 0.2·1.0)/2.0 = 0.35
    mask = [[0, 1, 1], [0, 1, 1]]
    b = hand_batch(mask, [0, 0], [0.8, -0.4], old_logp=t([[0, LN5, LN5]] * 2),
                   old_sum_pi_sq=t([[0, 0.5, 0.5]] * 2), token_rewards=t([[0, -0.1, 0.9], [0, -0.2, -0.2]]))
    adv = make_entry("otb").advantages(b, CTX).adv
    torch.testing.assert_close(adv, t([[0, 0.6, 0.55], [0, -0.6, -0.55]]), rtol=0, atol=1e-8)


def test_pure_function_leaves_rows_without_policy_tokens_out_of_a_tir_group():
    # rows 0 and 1 in one group, row 1 has no policy token: TIR leaves it out (N = 1: no baseline, Â = G)
    mask = t([[0, 1, 1], [0, 0, 0]])
    adv = optimal_token_baseline(t([[0, 1, 1], [0, 0, 0]]), 0.5 * mask, mask, torch.tensor([0, 0]), 1, "token")
    torch.testing.assert_close(adv, t([[0, 1, 1], [0, 0, 0]]))


def test_loss_is_ppo_clip_with_dual_clip():
    alg = make_entry("otb")
    mask = [[0, 1, 1]]
    b = hand_batch(mask, [0], [0.0], old_logp=t([[0, -1.0, -1.0]]), adv=t([[0, -0.8, 0.5]]))
    x = t([[0, 0.5, -0.5]])  # log-ratios 1.5 and 0.5: r = e^1.5 ≈ 4.4817, e^0.5 ≈ 1.6487
    loss, m = alg.loss(Forward(logp=x), b, CTX)
    # token 1 (Â = −0.8): max(0.8·4.4817, 0.8·1.2) = 3.5853, dual cap −Â·3 = 2.4 → 2.4
    # token 2 (Â = 0.5): max(−0.5·1.6487, −0.5·1.2) = −0.6
    torch.testing.assert_close(loss, t([[0, 2.4, -0.6]]))
    assert float(m["stats/dual_clip_frac"]) == pytest.approx(0.5)
