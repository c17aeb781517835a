"""``hops_toy``: the world and its splits, the environment's steps and states, grading, the per-turn
records, the teacher episode's loss mask, and ``collect`` recording one state per policy turn."""

from __future__ import annotations

import random

import pytest
import torch

from rlsuite.suite.engines.base import GenOutput, SamplingParams
from rlsuite.suite.models import char_tokenizer
from rlsuite.suite.rollout import collect
from rlsuite.tasks.hops_toy import INVALID, Hop, HopsToy, HopsToyConfig, actions, follow, make_world


@pytest.fixture(scope="module")
def task():
    return HopsToy(HopsToyConfig(name="hops_toy"))


def test_world_is_one_fixed_cycle():
    w = make_world(300)
    assert w == make_world(300) and len(w) == 300 and all(len(n) == 5 for n in w)
    assert set(w.values()) == set(w)                     # a permutation …
    start = next(iter(w))
    assert len(set(follow(w, start, 299))) == 300        # … that is a single cycle
    assert follow(w, start, 300)[-1] == start


def test_splits_are_deterministic_disjoint_and_cover_every_hop_count(task):
    s = task.splits()
    starts = {k: {q.start for q in v} for k, v in s.items()}
    assert not (starts["train"] & starts["val"] or starts["train"] & starts["test"] or starts["val"] & starts["test"])
    assert sum(len(v) for v in s.values()) == 300 * 5
    assert {q.hops for q in s["test"][:40]} == {4, 5, 6, 7, 8}      # hash order mixes h
    assert s == HopsToy(HopsToyConfig(name="hops_toy")).splits()
    assert all(q.answer == follow(task.world, q.start, q.hops)[-1] for v in s.values() for q in v)


def test_env_steps_states_and_records(task):
    start = task.splits()["test"][0].start
    q = Hop(start, 2, follow(task.world, start, 2)[-1])
    a, b, c = follow(task.world, q.start, 2)
    env = task.make_env(q)
    assert env.state() == (0, "")
    o1 = env.step(f"<search>{a}</search>")
    assert o1 == f"\n<information>hop 1: {b}</information>\n" and env.state() == (1, o1)
    assert env.step("no tags") == INVALID and env.state() == (1, INVALID)     # an invalid turn: no search counted
    assert env.step("<search>zzzzz</search>") == "\n<information>hop 2: no entry</information>\n"
    assert env.step(f"<answer>{c}</answer>") is None
    assert [r.action for r in env.records] == ["search", "invalid", "search", "answer"]
    assert [r.state for r in env.records][:2] == [(0, ""), (1, o1)]


def test_grading_is_exact_match_of_the_last_answer_with_the_search_count(task):
    q = task.splits()["test"][0]
    ref = task.reference_completion(q)
    assert ref.count("<search>") == q.hops
    g = task.grade(q, ref)
    assert (g.reward, g.correct, g.parsed, g.error_class) == (1.0, True, q.answer, f"searches={q.hops}")
    one_short = follow(task.world, q.start, q.hops - 1)[-1]
    g = task.grade(q, f"<search>{q.start}</search>\n<information>hop 1: {q.answer}</information>\n"
                      f"<answer>{one_short}</answer>")
    assert (g.reward, g.correct, g.error_class) == (0.0, False, "searches=1")   # an observation never answers
    assert task.grade(q, "no answer").parsed is None
    m = task.eval_metrics([q, q], [task.grade(q, ref), g])
    assert m == {"searches": (q.hops + 1) / 2, "hop_exact": 0.5, f"acc_h{q.hops}": 0.5}
    other = next(e for e in task.splits()["test"] if e.hops != q.hops)
    m = task.eval_metrics([q, q, other], [task.grade(q, ref), g, task.grade(other, task.reference_completion(other))])
    assert (m[f"acc_h{q.hops}"], m[f"acc_h{other.hops}"]) == (0.5, 1.0)   # per asked hop count
    assert sorted(k for k in m if k.startswith("acc_h")) == sorted({f"acc_h{q.hops}", f"acc_h{other.hops}"})


def test_turn_records_replay_a_completion(task):
    q = task.splits()["test"][0]
    recs = task.turn_records(q, task.reference_completion(q))
    chain = follow(task.world, q.start, q.hops)
    assert [r.arg for r in recs] == chain[:-1] + [q.answer]
    assert [r.state[0] for r in recs] == list(range(q.hops)) + [q.hops]
    assert actions("<search>a</search><information><answer>x</answer></information><answer>b</answer>") == \
        [("search", "a"), ("answer", "b")]


def test_teacher_stops_at_a_random_hop_and_answers_from_the_last_observation(task):
    task = HopsToy(HopsToyConfig(name="hops_toy", warm_read_share=0.0))  # the blind teacher: every hop
    tok = char_tokenizer()
    q = task.splits()["train"][0]
    rng = random.Random(0)
    stops = set()
    for _ in range(40):
        ids, mask = task.episode(q, tok, rng)
        text = tok.decode(ids)
        k = text.count("<search>")
        stops.add(k)
        assert text.endswith(f"<answer>{follow(task.world, q.start, k)[-1]}</answer><eos>")
        policy = tok.decode([i for i, m in zip(ids, mask) if m])
        assert "<information>" not in policy and policy.count("<search>") == k     # observations masked out
    assert stops == {4, 5, 6, 7, 8}


def test_the_teacher_reads_h_in_its_share_of_episodes_and_draws_nothing_more_at_zero(task):
    tok = char_tokenizer()
    q = task.splits()["train"][0]
    reader = HopsToy(HopsToyConfig(name="hops_toy", warm_read_share=1.0))
    rng = random.Random(0)
    assert {tok.decode(reader.episode(q, tok, rng)[0]).count("<search>") for _ in range(20)} == {q.hops}
    half = HopsToy(HopsToyConfig(name="hops_toy", warm_read_share=0.5))
    rng = random.Random(1)
    at_h = sum(tok.decode(half.episode(q, tok, rng)[0]).count("<search>") == q.hops for _ in range(400))
    assert 0.5 + 0.5 / 5 - 0.08 < at_h / 400 < 0.5 + 0.5 / 5 + 0.08  # 0.5 read + 0.5 × 1/5 by chance
    # share 0 (the teacher of the first committed base, 83e0d394): one randint per episode, no other draw
    blind = HopsToy(HopsToyConfig(name="hops_toy", warm_read_share=0.0))
    a, b = random.Random(3), random.Random(3)
    assert [tok.decode(blind.episode(q, tok, a)[0]).count("<search>") for _ in range(10)] == [
        b.randint(4, 8) for _ in range(10)]
    assert a.random() == b.random()


class Scripted:
    """An engine that writes fixed turns: call ``k`` gives every active row the text ``turns[k]``."""

    version = 0

    def __init__(self, tok, turns):
        self.tok, self.turns, self.calls = tok, turns, 0

    def generate(self, prompts, params, generator, want_attn=False, limits=None):
        text = self.turns[self.calls]
        self.calls += 1
        ids = self.tok.encode(text, add_special_tokens=False)
        if text.endswith("</answer>"):
            ids = ids + [self.tok.eos_token_id]
        n = len(prompts)
        return GenOutput(ids=[ids] * n, logp=[[-0.5] * len(ids)] * n, trunc_logp=[[-0.5] * len(ids)] * n,
                         stopped=[True] * n, stop_reason=["eos" if text.endswith("</answer>") else "string"] * n)


def test_collect_records_one_state_per_policy_turn(task):
    tok = char_tokenizer()
    q = task.splits()["test"][0]
    a, b, c = follow(task.world, q.start, 2)
    turns = [f"<search>{a}</search>", f"<search>{b}</search>", f"<answer>{c}</answer>"]
    rec, _ = collect(Scripted(tok, turns), tok, [tok.encode(task.prompt(q))] * 2,
                     SamplingParams(max_new_tokens=200, stop_ids=(tok.eos_token_id,)), None,
                     envs=[task.make_env(q) for _ in range(2)], max_turns=10)
    o1 = f"\n<information>hop 1: {b}</information>\n"
    o2 = f"\n<information>hop 2: {c}</information>\n"
    assert rec.turn_states == (((0, ""), (1, o1), (2, o2)),) * 2
    assert int(rec.turn_id[0].max()) == 2
    sel = rec.select(torch.tensor([1]))
    assert sel.turn_states == (((0, ""), (1, o1), (2, o2)),)
