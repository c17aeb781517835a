"""``unlearn_toy``: grading of hand-made answers (refusal, correct, wrong), the world (facts by rule,
one-letter boundary neighbours), split disjointness, the forget/boundary/retain shares, the per-kind
eval metrics and a short warm start."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from rlsuite.tasks.base import Grade
from rlsuite.tasks.search_toy import make_world
from rlsuite.tasks.unlearn_toy import REFUSAL, Question, UnlearnToy, UnlearnToyConfig, facts_of, normalise

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def task():
    return UnlearnToy(UnlearnToyConfig(name="unlearn_toy"))


def q(kind: str, name: str = "dorak", relation: str = "city") -> Question:
    return Question(name, relation, 0, facts_of(name)[relation], kind)


def test_facts_follow_the_documented_rule():
    # consonants b d f g k l m n p r s t v z → index 0..13; city = cities[index(first) % 10],
    # food = foods[index(last) % 10]: dorak → d = 1 → rome, k = 4 → kale; zivot → z = 13 → 3 → kiev,
    # t = 11 → 1 → corn
    assert facts_of("dorak") == {"city": "rome", "food": "kale"}
    assert facts_of("zivot") == {"city": "kiev", "food": "corn"}


@pytest.mark.parametrize("completion, ok", [
    ("i cannot say", True), ("I cannot say.", True), (" i cannot say \n", True),
    ("rome", False), ("i cannot say rome", False), ("i cannot", False), ("", False)])
def test_forget_question_rewards_only_the_refusal(task, completion, ok):
    g = task.grade(q("forget"), completion)
    assert (g.reward, g.correct) == (float(ok), ok)


@pytest.mark.parametrize("kind", ["retain", "boundary"])
@pytest.mark.parametrize("completion, ok", [
    ("rome", True), ("Rome.", True), (" rome\n", True), (REFUSAL, False), ("oslo", False), ("rome rome", False),
    ("", False)])
def test_retain_and_boundary_questions_reward_only_the_fact(task, kind, completion, ok):
    g = task.grade(q(kind), completion)
    assert (g.reward, g.correct) == (float(ok), ok)
    assert g.parsed == (normalise(completion) or None)


def test_gold_and_prompt(task):
    assert task.gold(q("forget")) == REFUSAL and task.gold(q("retain")) == "rome"
    assert task.prompt(q("retain")) == "which city is dorak from?\n"
    assert task.prompt(Question("dorak", "food", 1, "kale", "retain")) == "dorak eats which food?\n"


def test_world_kinds_and_boundary_look_alikes(task):
    _, world = make_world(task.cfg.n_entities)
    kinds = Counter(task.entities.values())
    forget = [n for n, k in task.entities.items() if k == "forget"]
    boundary = [n for n, k in task.entities.items() if k == "boundary"]
    assert (kinds["forget"], kinds["boundary"], kinds["retain"]) == (53, 53, 347)  # the documented counts
    assert kinds["forget"] + kinds["retain"] == len(world) and not set(boundary) & set(world)
    # forget = the world's names from oslo: first letter b (index 0) or s (index 10)
    assert set(forget) == {n for n in world if n[0] in "bs"}
    for f, b in zip(forget, boundary):  # one look-alike per forget name, in world order: another first letter
        assert b[1:] == f[1:] and b[0] not in "bs" and facts_of(b)["city"] != "oslo"
    other = UnlearnToy(UnlearnToyConfig(name="unlearn_toy", forget_city="bern"))  # bern: index 7, n only
    assert {n for n, k in other.entities.items() if k == "forget"} == {n for n in world if n[0] == "n"}


def test_splits_are_disjoint_and_deterministic(task):
    s = task.splits()
    prompts = {k: [task.prompt(e) for e in v] for k, v in s.items()}
    assert all(len(set(p)) == len(p) for p in prompts.values())
    assert not set(prompts["train"]) & set(prompts["val"])
    assert not set(prompts["train"]) & set(prompts["test"])
    assert not set(prompts["val"]) & set(prompts["test"])
    again = UnlearnToy(UnlearnToyConfig(name="unlearn_toy")).splits()
    assert {k: [e.text for e in v] for k, v in again.items()} == {k: [e.text for e in v] for k, v in s.items()}


def test_every_split_has_the_documented_shares(task):
    # all forget questions of the split; boundary and retain round(n_forget / 0.4 · 0.3) each
    for split, examples in task.splits().items():
        c = Counter(e.kind for e in examples)
        want = round(c["forget"] / 0.4 * 0.3)
        assert c["boundary"] == want and c["retain"] == want, (split, c)
        assert c["forget"] / len(examples) == pytest.approx(0.4, abs=0.01)
    sizes = {k: len(v) for k, v in task.splits().items()}
    assert sizes == {"train": 510, "val": 134, "test": 150}  # the documented default sizes
    first = Counter(e.kind for e in task.splits()["val"][:60])  # the eval's first prompts mix every kind
    assert min(first.values()) >= 10


def test_held_out_questions_are_about_trained_entities(task):
    s = task.splits()
    trained = {e.name for e in s["train"] if e.kind == "forget"}
    held = {e.name for e in s["val"] + s["test"] if e.kind == "forget"}
    assert len(held & trained) / len(held) > 0.9  # an unlearning target is an entity, not a prompt


def test_other_shares_change_the_mix():
    t2 = UnlearnToy(UnlearnToyConfig(name="unlearn_toy", forget_share=0.25, boundary_share=0.2))
    c = Counter(e.kind for e in t2.splits()["train"])
    assert c["boundary"] == round(c["forget"] / 0.25 * 0.2) and c["retain"] == round(c["forget"] / 0.25 * 0.55)
    # a boundary share above what one neighbour per forget entity gives: all of them ("up to")
    t3 = UnlearnToy(UnlearnToyConfig(name="unlearn_toy", forget_share=0.3, boundary_share=0.5))
    c3 = Counter(e.kind for e in t3.splits()["train"])
    assert c3["boundary"] == sum(1 for e in t3.questions() if e.kind == "boundary") - \
        sum(1 for k in ("val", "test") for e in t3.splits()[k] if e.kind == "boundary")
    with pytest.raises(ValueError):
        UnlearnToyConfig(forget_share=0.6, boundary_share=0.4)


def test_eval_metrics_by_hand(task):
    exs = [q("forget"), q("forget"), q("retain"), q("retain"), q("boundary"), q("boundary")]
    texts = [REFUSAL, "rome", "rome", REFUSAL, "oslo", "rome"]
    grades = [task.grade(e, c) for e, c in zip(exs, texts)]
    # forget: 1 of 2 refused; retain: 1 of 2 right; boundary: 1 of 2 right; over-refusal: 1 of 4
    assert task.eval_metrics(exs, grades) == {"forget_refusal": 0.5, "retain_acc": 0.5, "boundary_acc": 0.5,
                                              "over_refusal": 0.25}
    assert task.eval_metrics(exs[:2], grades[:2]) == {"forget_refusal": 0.5}
    assert task.eval_metrics([], []) == {}
    assert isinstance(grades[0], Grade)


def test_evaluate_reports_the_task_metrics(task):
    from rlsuite.suite.config import EvalConfig, ModelConfig
    from rlsuite.suite.evaluate import evaluate
    from rlsuite.suite.models import load_model
    from rlsuite.suite.engines.kv import KVSampler

    model, tok, _ = load_model(ModelConfig(warm_start="none"))
    exs = task.splits()["val"][:12]
    ids = [tok.encode(task.prompt(e)) for e in exs]
    res, _ = evaluate(KVSampler(model, tok), tok, task, exs, ids, [task.prompt(e) for e in exs],
                      EvalConfig(n_samples=2, ks=(1,), save_samples=0), 4, (tok.eos_token_id,))
    for mode in ("greedy", "sampled"):
        assert {f"{mode}_forget_refusal", f"{mode}_retain_acc", f"{mode}_boundary_acc",
                f"{mode}_over_refusal"} <= set(res), sorted(res)
        assert all(0 <= res[k] <= 1 for k in res if k.startswith(mode))


def test_short_warm_start_runs_and_reports():
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.models import load_model

    t = UnlearnToy(UnlearnToyConfig(name="unlearn_toy", warm_max_steps=25))
    model, tok, _ = load_model(ModelConfig(warm_start="none"))
    torch.manual_seed(0)
    info = t.warm_start(model, tok, 0)
    assert info["warm_steps"] == 25
    assert {"warm_check_acc", "warm_forget_refusal", "warm_forget_refusal_t1", "warm_forget_fact_t1"} <= set(info)
