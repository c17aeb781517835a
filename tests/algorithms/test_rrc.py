"""RRC (``rrc``): Borda and rank rewards from a fake judge worked by hand, the tournament against all
pairs, order debiasing of a position-biased judge, the GRPO and RLOO estimators, and the paper's
vote rule (majority, margin-ordered cycle resolution, seeded Bernoulli votes). The judges
themselves: ``tests/unit/test_judges.py``."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.rrc import average_ranks, draw_votes, rank_reward, resolve_ranking, tournament_ranks
from rlsuite.suite.judges import Judge
from rlsuite.suite.types import Batch
from tests.algorithms.hand_judges import ABC, TableJudge, ctx, group, make
from tests.fakes import hook_ctx


class BiasedJudge(Judge):
    """P_A = σ(q(first) − q(second) + β): prefers whatever is shown first by β in logit."""

    def __init__(self, quality: dict[str, float], bias: float) -> None:
        self.q, self.bias = quality, bias

    def prefer(self, pool, pairs, charge=None):
        return torch.sigmoid(torch.tensor([self.q[pool.texts[i]] - self.q[pool.texts[j]] + self.bias
                                           for i, j in pairs]))


def test_borda_rewards_by_hand():
    # b_a = (.8 + .6)/2 = .7; b_b = (.2 + .3)/2 = .25; b_c = (.4 + .7)/2 = .55
    algo = make(fake=TableJudge(ABC), reward="borda")
    r = algo.rewards(group("abc"), ctx())
    torch.testing.assert_close(r, torch.tensor([0.7, 0.25, 0.55]))
    m = algo._step_metrics()
    assert m["algo/rrc/judge_calls"] == 6 and m["algo/rrc/comparisons"] == 3  # 3 pairs × 2 orders
    assert m["algo/rrc/order_flip_agreement"] == 1.0 and m["algo/rrc/tie_rate"] == 0.0


def test_rank_rewards_by_hand():
    # ranks a:1, c:2, b:3 → R = 1 − 2(rank − 1)/(G − 1) = [1, −1, 0]
    r = make(fake=TableJudge(ABC), reward="rank").rewards(group("abc"), ctx())
    torch.testing.assert_close(r, torch.tensor([1.0, -1.0, 0.0]))
    # ties share the average rank: scores (.5, .5, .2) → ranks (1.5, 1.5, 3) → R (.5, .5, −1)
    torch.testing.assert_close(rank_reward(average_ranks(torch.tensor([0.5, 0.5, 0.2]))),
                               torch.tensor([0.5, 0.5, -1.0]))


def test_tournament_matches_all_pairs_for_a_transitive_judge_with_fewer_calls():
    texts = "abcdefgh"
    q = {t: float(k % 3) for k, t in enumerate(texts)}  # ties among equal qualities
    table = {(x, y): 0.5 + 0.5 * math.copysign(1, q[x] - q[y]) if q[x] != q[y] else 0.5
             for x in texts for y in texts if x < y}
    for reward in ("borda", "rank"):
        full = make(fake=TableJudge(table), reward=reward)
        tour = make(fake=TableJudge(table), reward=reward, pairs="tournament")
        torch.testing.assert_close(tour.rewards(group(texts), ctx()), full.rewards(group(texts), ctx()))
        assert tour._step_metrics()["algo/rrc/comparisons"] < full._step_metrics()["algo/rrc/comparisons"] == 28
    ranks = tournament_ranks(3, lambda i, j: ABC.get(("abc"[i], "abc"[j]), 1 - ABC.get(("abc"[j], "abc"[i]), 0.5)))
    torch.testing.assert_close(ranks, torch.tensor([1.0, 3.0, 2.0]))


def test_order_debiasing_cancels_a_position_biased_judge():
    judge = BiasedJudge({"x": 0.0, "y": 0.0, "w": 1.0}, bias=2.0)
    sb = torch.sigmoid(torch.tensor(2.0))
    # equal-quality responses: one order favours whoever is shown first; both orders → exact tie
    biased = make(fake=judge, debias_order=False).rewards(group("xy"), ctx())
    torch.testing.assert_close(biased, torch.stack([sb, 1 - sb]))
    fair = make(fake=judge)
    torch.testing.assert_close(fair.rewards(group("xy"), ctx()), torch.tensor([0.5, 0.5]))
    m = fair._step_metrics()
    assert m["algo/rrc/tie_rate"] == 1.0 and m["algo/rrc/order_flip_agreement"] == 0.0
    # a real difference survives: s(w ≻ x) = ½[σ(1 + 2) + σ(1 − 2)] > ½ and s(x ≻ w) = 1 − s(w ≻ x)
    p = judge.compare("p", "w", "x")
    assert p.calls == 2 and \
        p.p == pytest.approx(0.5 * (torch.sigmoid(torch.tensor(3.0)) + torch.sigmoid(torch.tensor(-1.0))))
    assert judge.compare("p", "x", "w").p == pytest.approx(1 - p.p)
    assert judge.compare("p", "x", "y", debias=False).p == pytest.approx(float(sb))


def test_grpo_and_rloo_estimators_differ():
    rewards = torch.tensor([1.0, -1.0, 0.0, 0.5, 0.5, 0.0])
    mask = torch.ones(6, 2)
    batch = Batch(tokens=torch.zeros(6, 2, dtype=torch.long), attn_mask=mask.long(), loss_mask=mask,
                  behav_logp=torch.zeros(6, 2), turn_id=torch.zeros(6, 2, dtype=torch.long),
                  policy_version=torch.zeros(6, dtype=torch.long), behaviour_id=torch.zeros(6, dtype=torch.long),
                  group_id=torch.tensor([0, 0, 0, 1, 1, 1]), example_idx=torch.tensor([0, 0, 0, 1, 1, 1]),
                  scores=rewards, rewards=rewards, truncated=torch.zeros(6, dtype=torch.bool), prompt_width=0)
    grpo = make(estimator="grpo").advantages(batch, ctx()).adv[:, 0]
    rloo = make(estimator="rloo").advantages(batch, ctx()).adv[:, 0]
    # group 0: mean 0, std 1 → z = R; leave-one-out = G/(G−1)·(R − mean) = 1.5·R
    torch.testing.assert_close(grpo[:3], torch.tensor([1.0, -1.0, 0.0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(rloo[:3], torch.tensor([1.5, -1.5, 0.0]))
    assert not torch.allclose(grpo, rloo)


# ======================================================================================
# The paper's rule (rule = votes, the default of rrc, rrc_self and rrc_anchor): V votes per pair,
# majority, greedy margin-ordered resolution with transitive closure, R = α·#wins. The three
# minimal cases of the fidelity issue, by hand, where the soft variant gives other rewards.


def test_split_votes_rank_by_majority():
    # G = 3, V = 3: 0≻1 2/3, 0≻2 2/3, 1≻2 3/3 → every majority agrees: 0 > 1 > 2, wins [2, 1, 0]
    wins, dropped, undecided = resolve_ranking(3, {(0, 1): (2, 1), (0, 2): (2, 1), (1, 2): (3, 0)})
    torch.testing.assert_close(wins, torch.tensor([2.0, 1.0, 0.0]))
    assert (dropped, undecided) == (0, 0)
    # the soft variant's rank reward on the same vote shares ties 0 and 1 (Borda 2/3 each): [.5, .5, −1]
    P = torch.tensor([[0.5, 2 / 3, 2 / 3], [1 / 3, 0.5, 1.0], [1 / 3, 0.0, 0.5]])
    from rlsuite.algorithms.rrc import borda_scores
    torch.testing.assert_close(rank_reward(average_ranks(borda_scores(P))), torch.tensor([0.5, 0.5, -1.0]))


def test_a_cycle_resolves_by_margin():
    # V = 5: 0≻1 5/5 (margin 5), 1≻2 4/5 (3), 2≻0 3/5 (1): 0>1 and 1>2 are fixed, they imply 0>2, so
    # the weakest edge 2≻0 is dropped → 0 > 1 > 2, wins [2, 1, 0]
    wins, dropped, undecided = resolve_ranking(3, {(0, 1): (5, 0), (1, 2): (4, 1), (0, 2): (2, 3)})
    torch.testing.assert_close(wins, torch.tensor([2.0, 1.0, 0.0]))
    assert (dropped, undecided) == (1, 0)
    # equal margins are fixed in pair order: (0,1) 0≻1, (0,2) 2≻0, then (1,2) 1≻2 is implied opposite
    wins, dropped, _ = resolve_ranking(3, {(0, 1): (3, 0), (0, 2): (0, 3), (1, 2): (3, 0)})
    torch.testing.assert_close(wins, torch.tensor([1.0, 0.0, 2.0]))
    assert dropped == 1
    # equal vote counts add no edge: nobody wins that pair
    wins, _, undecided = resolve_ranking(3, {(0, 1): (2, 2), (0, 2): (4, 0), (1, 2): (4, 0)})
    torch.testing.assert_close(wins, torch.tensor([1.0, 1.0, 0.0]))
    assert undecided == 1


class CoinJudge(Judge):
    """P_A = p for every pair in either order (a judge with no preference but a position bias when p ≠ ½)."""

    def __init__(self, p: float) -> None:
        self.p = p

    def prefer(self, pool, pairs, charge=None):
        return torch.full((len(pairs),), self.p)


def test_votes_are_seeded_bernoulli_draws_with_a_random_order():
    gen = lambda k: torch.Generator().manual_seed(k)
    # listed order only: each vote is Bernoulli(P_A(i, j)); over many pairs the share is P
    share = sum(draw_votes(0.7, None, 5, gen(k))[0] for k in range(400)) / 2000
    assert abs(share - 0.7) < 0.04
    # a random A/B order each vote: a judge preferring position A by P = .9 votes for i half the time
    share = sum(draw_votes(0.9, 0.9, 5, gen(k))[0] for k in range(400)) / 2000
    assert abs(share - 0.5) < 0.04
    # deterministic verdicts give V identical votes; a tie verdict counts for neither
    assert all(draw_votes(1.0, 0.0, 5, gen(k)) == (5, 0) for k in range(20))
    assert draw_votes(0.5, 0.5, 5, gen(0)) == (0, 0)
    # through the entry: the stream (seed, "judge", step, prompt, pair) fixes the votes
    algo = make("rrc_self", fake=CoinJudge(0.9), rule="votes")
    a = algo.rewards(group("abcd"), ctx())
    torch.testing.assert_close(algo.rewards(group("abcd"), ctx()), a)  # the same step: the same votes
    at_step = lambda s: hook_ctx(gen_seed=0, group_size=4, prompts_per_step=1, n_train=1, step=s)
    assert any(not torch.equal(algo.rewards(group("abcd"), at_step(s)), a) for s in range(2, 8))
