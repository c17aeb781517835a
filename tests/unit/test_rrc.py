"""RRC and its judges: hand-computed rewards with fake judges, order debiasing, the task judge
through a fake ``Group.grade``, the LM judge on a tiny Llama saved to a temp dir, estimators.

Run: ``python -m pytest tests/unit/test_rrc.py -q``
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite import algorithms  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS, Context, Group
from rlsuite.algorithms.judges import JUDGES, Judge, LMJudge, Pool, TaskJudge, judge_pairs, load_judge
from rlsuite.algorithms.rrc import average_ranks, draw_votes, rank_reward, resolve_ranking, tournament_ranks
from rlsuite.suite.registry import UnknownName
from tests.fakes import hook_ctx
from rlsuite.suite.types import Batch


class TableJudge(Judge):
    """P_A(first, second) from a table of consistent preferences: P(a, b) given, P(b, a) = 1 − P(a, b)."""

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table
        self.seen: list[tuple[str, str]] = []

    def prefer(self, pool, pairs, charge=None):
        out = []
        for i, j in pairs:
            a, b = pool.texts[i], pool.texts[j]
            self.seen.append((a, b))
            out.append(self.table[(a, b)] if (a, b) in self.table else 1 - self.table[(b, a)])
        return torch.tensor(out)


class BiasedJudge(Judge):
    """P_A = σ(q(first) − q(second) + β): prefers whatever is shown first by β in logit."""

    def __init__(self, quality: dict[str, float], bias: float) -> None:
        self.q, self.bias = quality, bias

    def prefer(self, pool, pairs, charge=None):
        return torch.sigmoid(torch.tensor([self.q[pool.texts[i]] - self.q[pool.texts[j]] + self.bias
                                           for i, j in pairs]))


def ctx(charges: list | None = None) -> Context:
    return hook_ctx(gen_seed=0, group_size=3, prompts_per_step=1, n_train=1,
                    charge=(lambda *a: charges.append(a)) if charges is not None else (lambda *a: None))


def group(texts, scores=None, anchors=(), grade=None) -> Group:
    scores = torch.zeros(len(texts)) if scores is None else torch.tensor(scores, dtype=torch.float)
    return Group(prompt="p", example=None, completions=tuple(texts), parsed=(None,) * len(texts), scores=scores,
                 grade=grade, anchors=tuple(anchors))


def make(name: str = "rrc", fake: Judge | None = None, **changes):
    """The entry with the soft variant (rule = soft, the policy's greedy anchor) unless ``changes`` say
    otherwise: the tests of the paper's vote rule pass ``rule="votes"``."""
    cls = ALGORITHMS.get(name)
    changes = {"rule": "soft", "anchor_source": "policy", **changes}
    algo = cls(dataclasses.replace(cls.Config(name=name), **changes))
    if fake is not None:
        algo._judge = fake  # bypass the registry: a fake judge
    return algo


# P(a ≻ b) = .8, P(a ≻ c) = .6, P(b ≻ c) = .3 (consistent in both orders, so debiasing changes nothing)
ABC = {("a", "b"): 0.8, ("a", "c"): 0.6, ("b", "c"): 0.3}


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
    torch.testing.assert_close(rank_reward(average_ranks(torch.tensor([0.5, 0.5, 0.2]))), torch.tensor([0.5, 0.5, -1.0]))


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


def test_anchor_rewards_are_preference_minus_half():
    table = {("a", "z"): 0.9, ("b", "z"): 0.5, ("c", "z"): 0.2}
    algo = make("rrc_anchor", fake=TableJudge(table))
    assert "anchor" in algo.needs and "anchor" not in make("rrc_self").needs
    torch.testing.assert_close(algo.rewards(group("abc", anchors=("z",)), ctx()), torch.tensor([0.4, 0.0, -0.3]))
    hard = make("rrc_anchor", fake=TableJudge(table), reward="rank")  # hard wins 1, ½, 0
    torch.testing.assert_close(hard.rewards(group("abc", anchors=("z",)), ctx()), torch.tensor([0.5, 0.0, -0.5]))
    m = algo._step_metrics()
    assert m["algo/rrc/judge_calls"] == 6 and m["algo/rrc/anchorless_groups"] == 0
    # no anchors (hooks called outside the trainer): the other members are the anchors, b_i − ½
    algo._judge = TableJudge(ABC)
    torch.testing.assert_close(algo.rewards(group("abc"), ctx()), torch.tensor([0.2, -0.25, 0.05]))
    assert algo._step_metrics()["algo/rrc/anchorless_groups"] == 1


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
    assert p.calls == 2 and p.p == pytest.approx(0.5 * (torch.sigmoid(torch.tensor(3.0)) + torch.sigmoid(torch.tensor(-1.0))))
    assert judge.compare("p", "x", "w").p == pytest.approx(1 - p.p)
    assert judge.compare("p", "x", "y", debias=False).p == pytest.approx(float(sb))


def test_task_judge_grades_through_group_grade():
    graded: list[str] = []

    def grade(text: str) -> float:
        graded.append(text)
        return float(text.strip() == "42")

    judge = TaskJudge()
    assert judge.compare("6*7=", "42", "41", grade=grade).p == 1.0
    assert judge.compare("6*7=", "40", "41", grade=grade).p == 0.5  # tie
    assert judge.compare("6*7=", "40", "42", grade=grade, debias=False).p == 0.0
    graded.clear()
    algo = make("rrc_anchor", judge="task")
    g = group(["42", "41", " 42"], scores=[1.0, 0.0, 1.0], anchors=("41",), grade=grade)
    torch.testing.assert_close(algo.rewards(g, ctx()), torch.tensor([0.5, 0.0, 0.5]))
    assert graded == ["41"]  # the group's own grades are reused; only the anchor is graded
    with pytest.raises(ValueError, match="Group.grade"):
        judge_pairs(judge, Pool("p", ("a", "b")), [(0, 1)])
    # deterministic, and self-competitive Borda from task grades
    r = make(judge="task").rewards(group(["a", "b", "c"], scores=[1.0, 0.0, 1.0]), ctx())
    torch.testing.assert_close(r, torch.tensor([0.75, 0.0, 0.75]))


def test_judge_registry_and_loaded_once():
    assert set(JUDGES.names()) >= {"task", "lm"}
    with pytest.raises(UnknownName, match="did you mean 'task'"):
        JUDGES.get("tsk")
    assert load_judge("task") is load_judge("task", "ignored")
    with pytest.raises(ValueError, match="judge_model"):
        make(judge="lm", judge_model="")


@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory):
    from transformers import LlamaForCausalLM

    from rlsuite.suite.models import char_tokenizer, tiny_config

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(len(tok)))
    path = tmp_path_factory.mktemp("judge")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_lm_judge_on_a_saved_tiny_llama(tiny_judge_dir):
    from rlsuite.suite.models import non_embedding_params

    judge = load_judge("lm", tiny_judge_dir)
    assert isinstance(judge, LMJudge) and load_judge("lm", tiny_judge_dir) is judge
    charges: list = []
    charge = lambda *a: charges.append(a)
    pref = judge.compare("2+2=", "4", "5", charge=charge)
    assert 0.0 <= pref.p <= 1.0 and pref.calls == 2
    # both orders, averaged: check each order against a direct single-sequence forward
    ids = judge.encode("2+2=", "4", "5")
    with torch.no_grad():
        logits = judge.model(input_ids=torch.tensor([ids])).logits[0, -1]
    p_ab = torch.softmax(logits[list(judge.verdict_ids)], -1)[0]
    assert pref.p_ab == pytest.approx(float(p_ab), abs=1e-5)
    assert pref.p == pytest.approx(0.5 * (pref.p_ab + 1 - pref.p_ba))
    # FLOPs: one batched forward over both orders, charged with the judge's non-embedding params
    n_tok = len(ids) + len(judge.encode("2+2=", "5", "4"))
    assert charges == [("judge", n_tok, non_embedding_params(judge.model))]
    # through the entry: all 3 pairs × 2 orders in one forward; rewards are Borda scores in [0, 1]
    charges.clear()
    algo = make(judge="lm", judge_model=tiny_judge_dir)
    r = algo.rewards(group(["4", "5", "44"]), ctx(charges))
    assert r.shape == (3,) and ((r >= 0) & (r <= 1)).all()
    assert algo._step_metrics()["algo/rrc/judge_calls"] == 6 and len(charges) == 1 and charges[0][0] == "judge"


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


def test_the_entry_applies_the_vote_rule():
    # a deterministic judge (P ∈ {0, 1}) gives V identical votes; a unanimous cycle a≻b, b≻c, c≻a
    # (all margins V) resolves in pair order: a>b, c>a, then b≻c is implied opposite → R = α·[1, 0, 2]
    table = {("a", "b"): 1.0, ("a", "c"): 0.0, ("b", "c"): 1.0}
    algo = make("rrc_self", fake=TableJudge(table), rule="votes")
    torch.testing.assert_close(algo.rewards(group("abc"), ctx()), torch.tensor([0.1, 0.0, 0.2]))
    m = algo._step_metrics()
    assert m["algo/rrc/judge_calls"] == 6 and m["algo/rrc/dropped_edges"] == 1 and m["algo/rrc/undecided_pairs"] == 0
    # the defaults of all three entries are the vote rule with V = 5 and α = 0.1
    for name in ("rrc", "rrc_self", "rrc_anchor"):
        cfg = ALGORITHMS.get(name).Config(name=name)
        assert (cfg.rule, cfg.votes, cfg.alpha, cfg.anchor_source) == ("votes", 5, 0.1, "reference")
    with pytest.raises(ValueError, match="rule = soft"):
        make(rule="votes", pairs="tournament")


def test_one_anchor_beaten_by_both_gives_zero_advantage():
    # V = 3, one anchor z; the two responses beat it 2/3 and 3/3 → both beat it by majority: wins [1, 1],
    # zero GRPO advantage (the soft variant gives s − ½ = [1/6, 1/2] → z-scores [−0.707, +0.707])
    counts = [(2, 1), (3, 0)]
    beaten = torch.tensor([float(wi > wa) for wi, wa in counts])
    torch.testing.assert_close(beaten, torch.tensor([1.0, 1.0]))
    from rlsuite.suite.ops import group_normalised_advantage
    torch.testing.assert_close(group_normalised_advantage(0.1 * beaten, torch.tensor([0, 0])), torch.zeros(2))
    soft = group_normalised_advantage(torch.tensor([2 / 3, 1.0]) - 0.5, torch.tensor([0, 0]))
    torch.testing.assert_close(soft, torch.tensor([-0.707107, 0.707107]), atol=1e-5, rtol=0)
    # through rrc_anchor: n anchors given in the group (as the trainer gives the frozen base's samples)
    table = {("a", "y"): 1.0, ("a", "z"): 1.0, ("b", "y"): 0.5, ("b", "z"): 1.0, ("c", "y"): 0.0, ("c", "z"): 0.0}
    algo = make("rrc_anchor", fake=TableJudge(table), rule="votes", anchor_source="reference")
    assert "ref_anchor" in algo.needs and "anchor" not in algo.needs and algo.anchors_per_prompt == 4
    torch.testing.assert_close(algo.rewards(group("abc", anchors=("y", "z")), ctx()), torch.tensor([0.2, 0.1, 0.0]))


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
