"""GiGPO: the episode term, the anchor-state step groups and their discounted returns, worked by hand.

The inputs are the ones checked against ROLL 8eb27cc ``roll/pipeline/agentic/utils.py``
(``compute_discounted_returns`` → ``build_state_group`` → ``compute_response_level_rewards``,
reward_normalization ``method: mean``) and verl-agent's ``gigpo/core_gigpo.py``
(``episode_norm_reward`` with ``compute_mean_std_cross_steps=True``, ``build_step_group``,
``step_norm_reward``), whose rows are single steps: the three trajectories below are their seven
step rows.

One prompt group, three trajectories, γ = 0.5, ω = 1 (token layout: prompt, turn, observation, …)::

    traj 0: turns 0,1,2  states s0, A, B   R = 1
    traj 1: turns 0,1    states s0, A      R = 0
    traj 2: turns 0,1    states s0, C      R = 1
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import CTX, algo, make_batch, t

# columns: 0 prompt | 1 turn 0 | 2 obs | 3 turn 1 | 4 obs | 5 turn 2 | 6 pad
MASK = [[0, 1, 0, 1, 0, 1, 0],
        [0, 1, 0, 1, 0, 0, 0],
        [0, 1, 0, 1, 0, 0, 0]]
TURN = torch.tensor([[-1, 0, 0, 1, 1, 2, -1],
                     [-1, 0, 0, 1, -1, -1, -1],
                     [-1, 0, 0, 1, -1, -1, -1]])
STATES = (("s0", "A", "B"), ("s0", "A"), ("s0", "C"))
REWARDS = [1.0, 0.0, 1.0]


def batch(**kw):
    fields = {"turn_id": TURN, "turn_states": STATES, **kw}
    return make_batch(MASK, [0, 0, 0], REWARDS, **fields)


def tokens(per_turn):
    """[B, T] from per-row per-turn values laid out on MASK/TURN."""
    out = torch.zeros(3, 7, dtype=torch.float64)
    for b, vals in enumerate(per_turn):
        for col in range(7):
            if MASK[b][col]:
                out[b, col] = vals[int(TURN[b, col])]
    return out


def test_defaults_and_needs():
    a = algo("gigpo")
    assert (a.cfg.gamma, a.cfg.step_weight, a.cfg.scale_by_std, a.cfg.episode_stats) == (0.95, 1.0, False, "steps")
    assert a.aggregation == "token-mean" and a.cfg.kl_coef == 0.01
    assert a.needs == {"old_logp", "ref_logp"}
    assert not a.group_relative


def test_episode_and_step_terms_mean_norm():
    a = algo("gigpo", gamma=0.5)
    # episode term over the 7 step rows (traj 0 counts 3×, the others 2×):
    #   mean = (3·1 + 2·0 + 2·1)/7 = 5/7  →  A_E = 1 − 5/7 = 2/7,  0 − 5/7 = −5/7,  2/7
    # discounted returns G_ik = γ^(n−1−k)·R:  traj 0: .25, .5, 1;  traj 1: 0, 0;  traj 2: .5, 1
    # step groups: s0 = {.25, 0, .5} mean .25 → 0, −.25, +.25;  A = {.5 (traj 0), 0 (traj 1)} mean .25 → ±.25
    #              B (traj 0 turn 2) and C (traj 2 turn 1) are singletons → 0
    out = a.advantages(batch(), CTX)
    e0, e1 = 2 / 7, -5 / 7
    expect = tokens([[e0 + 0, e0 + 0.25, e0 + 0], [e1 - 0.25, e1 - 0.25], [e0 + 0.25, e0 + 0]])
    torch.testing.assert_close(out.adv, expect)
    # 4 step groups of sizes 3, 2, 1, 1 → mean 7/4; 5 of 7 step rows share their state
    assert out.metrics["algo/gigpo/step_group_size_mean"] == pytest.approx(7 / 4)
    assert out.metrics["algo/gigpo/shared_turn_share"] == pytest.approx(5 / 7)
    assert out.metrics["algo/gigpo/turns_mean"] == pytest.approx(7 / 3)
    assert out.metrics["algo/gigpo/step_adv_abs_mean"] == pytest.approx(4 * 0.25 / 7)   # |A_S| over the 7 turns


def test_step_weight_and_trajectory_statistics():
    # ω = 0.5 halves the step term; episode stats over trajectories: mean 2/3 → 1/3, −2/3, 1/3
    a = algo("gigpo", gamma=0.5, step_weight=0.5, episode_stats="trajectories")
    e0, e1 = 1 / 3, -2 / 3
    expect = tokens([[e0, e0 + 0.125, e0], [e1 - 0.125, e1 - 0.125], [e0 + 0.125, e0]])
    torch.testing.assert_close(a.advantages(batch(), CTX).adv, expect)
    # ω = 0: trajectory-level GRPO (mean-only) on every token of the trajectory
    a0 = algo("gigpo", gamma=0.5, step_weight=0.0)
    torch.testing.assert_close(a0.advantages(batch(), CTX).adv, tokens([[2 / 7] * 3, [-5 / 7] * 2, [2 / 7] * 2]))


def test_mean_std_norm():
    a = algo("gigpo", gamma=0.5, scale_by_std=True)
    # episode: step-row values {1,1,1,0,0,1,1}, mean 5/7, unbiased var = (5·(2/7)² + 2·(5/7)²)/6 = (70/49)/6 = 5/21
    sd_e = math.sqrt(5 / 21)
    e0, e1 = (2 / 7) / (sd_e + 1e-6), (-5 / 7) / (sd_e + 1e-6)
    # s0 = {.25, 0, .5}: var = (0 + .0625 + .0625)/2 = .0625, sd .25 → 0, −.25/(.25+ε), +.25/(.25+ε)
    # A = {.5, 0}: var = (.0625 + .0625)/1 = .125, sd √.125 → ±.25/(√.125+ε); singletons stay 0
    s0, sa = 0.25 / (0.25 + 1e-6), 0.25 / (math.sqrt(0.125) + 1e-6)
    expect = tokens([[e0, e0 + sa, e0], [e1 - s0, e1 - sa], [e0 + s0, e0]])
    torch.testing.assert_close(a.advantages(batch(), CTX).adv, expect)


def test_without_environment_states_turn_zero_shares_and_later_turns_match_exact_prefixes():
    a = algo("gigpo", gamma=0.5)
    # same tokens in every row except traj 2's first observation (column 2): before turn 1, trajs 0 and 1
    # share the prefix (columns 0–2), traj 2 does not; traj 0's turn 2 is alone → the same groups as
    # s0 / A / B / C above, so the same advantages
    tok = torch.arange(10, 17).expand(3, 7).clone()
    tok[2, 2] = 99
    out = a.advantages(batch(turn_states=(), tokens=tok), CTX)
    e0, e1 = 2 / 7, -5 / 7
    torch.testing.assert_close(out.adv, tokens([[e0, e0 + 0.25, e0], [e1 - 0.25, e1 - 0.25], [e0 + 0.25, e0]]))


def test_single_turn_is_one_plus_omega_times_grpo_mean():
    # one turn each, no states: every turn acts in the group's initial state, G = R (γ^0):
    # A_E = R − 1/3 = 2/3, −1/3, −1/3 and A_S the same → A = 2·A_E
    a = algo("gigpo")
    b = make_batch([[0, 1, 1]] * 3, [0, 0, 0], [1.0, 0.0, 0.0])
    torch.testing.assert_close(a.advantages(b, CTX).adv, t([4 / 3, -2 / 3, -2 / 3])[:, None] * t([[0, 1, 1]] * 3))


def test_equal_outcomes_in_different_numbers_of_turns_are_not_zero():
    # R = (1, 1): episode term 0; turn 0 of both in s0: G = γ·1 = .5 (two turns) and 1 (one turn),
    # mean .75 → −.25 and +.25; traj 0's turn 1 (state A) is alone → 0
    a = algo("gigpo", gamma=0.5)
    mask = [[0, 1, 0, 1], [0, 1, 0, 0]]
    turn = torch.tensor([[-1, 0, 0, 1], [-1, 0, -1, -1]])
    b = make_batch(mask, [0, 0], [1.0, 1.0], turn_id=turn, turn_states=(("s0", "A"), ("s0",)))
    torch.testing.assert_close(a.advantages(b, CTX).adv, t([[0, -0.25, 0, 0], [0, 0.25, 0, 0]]))


def test_states_are_grouped_within_a_prompt_group_only():
    # two prompt groups with the same state labels: group 1's s0 is not group 0's s0
    a = algo("gigpo", gamma=0.5)
    mask = [[0, 1], [0, 1], [0, 1], [0, 1]]
    b = make_batch(mask, [0, 0, 1, 1], [1.0, 0.0, 1.0, 1.0], turn_states=(("s0",),) * 4)
    # group 0: A_E = ±.5, A_S = ±.5 (one turn: G = R) → ±1;  group 1: all equal → 0
    torch.testing.assert_close(a.advantages(b, CTX).adv, t([[0, 1.0], [0, -1.0], [0, 0.0], [0, 0.0]]))


def test_similar_text_states_share_a_step_group_with_similarity_set():
    # traj 0 turn 1 "the cat sat" and traj 1 turn 1 "the cat sat!": SequenceMatcher ratio
    # 2·11/(11 + 12) = 22/23 ≈ 0.957 — one step group at τ = 0.95 (the hand example above, with A
    # shared: the same advantages), two singletons under exact match (A_S = 0 for both) and at τ = 0.96
    states = (("s0", "the cat sat", "B"), ("s0", "the cat sat!"), ("s0", "C"))
    e0, e1 = 2 / 7, -5 / 7
    shared = tokens([[e0 + 0, e0 + 0.25, e0 + 0], [e1 - 0.25, e1 - 0.25], [e0 + 0.25, e0 + 0]])
    apart = tokens([[e0 + 0, e0 + 0, e0 + 0], [e1 - 0.25, e1 + 0], [e0 + 0.25, e0 + 0]])
    torch.testing.assert_close(algo("gigpo", gamma=0.5, similarity=0.95).advantages(batch(turn_states=states),
                                                                                    CTX).adv, shared)
    torch.testing.assert_close(algo("gigpo", gamma=0.5).advantages(batch(turn_states=states), CTX).adv, apart)
    torch.testing.assert_close(algo("gigpo", gamma=0.5, similarity=0.96).advantages(batch(turn_states=states),
                                                                                    CTX).adv, apart)


def test_similarity_clusters_greedily_against_each_clusters_first_state():
    # τ = 0.8: "abcdX" matches "abcde" (ratio 2·4/10 = 0.8) and joins it; "abcXY" matches "abcdX"
    # (abc + X: 0.8) but not the cluster's first state "abcde" (abc: 0.6): a new cluster (verl-agent's
    # representative is the first member); non-text states keep exact matching; groups stay apart
    from rlsuite.algorithms.gigpo import step_group_labels

    mask = [[0, 1]] * 6
    b = make_batch(mask, [0, 0, 0, 0, 0, 1], [1.0] * 6,
                   turn_states=(("abcde",), ("abcdX",), ("abcXY",), (("t", 1),), (("t", 1),), ("abcde",)))
    labels = step_group_labels(b, [1] * 6, similarity=0.8)
    assert labels[0] == labels[1] != labels[2] and labels[3] == labels[4] not in (labels[0], labels[2])
    assert labels[5] not in (labels[0], labels[2], labels[3])  # the same text in another prompt group
    assert len({row[0] for row in labels}) == 4
