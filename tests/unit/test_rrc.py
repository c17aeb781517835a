"""RRC and its judges: hand-computed rewards with fake judges, order debiasing, the task judge
through a fake ``Group.grade``, the LM judge on a tiny Llama saved to a temp dir, estimators.

Run: ``python -m pytest tests/unit/test_rrc.py -q``
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import algorithms  # noqa: F401
from algorithms.base import ALGORITHMS, Context, Group
from algorithms.judges import JUDGES, Judge, LMJudge, Pool, TaskJudge, judge_pairs, load_judge
from algorithms.rrc import average_ranks, rank_reward, tournament_ranks
from suite.registry import UnknownName
from tests.fakes import hook_ctx
from suite.types import Batch


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
    cls = ALGORITHMS.get(name)
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

    from suite.models import char_tokenizer, tiny_config

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(len(tok)))
    path = tmp_path_factory.mktemp("judge")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_lm_judge_on_a_saved_tiny_llama(tiny_judge_dir):
    from suite.models import non_embedding_params

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
