"""``search_toy``: the synthetic world and its splits, teacher episodes, the SFT loss mask
(observation tokens carry no gradient), and — slow — the cached warm start plus two GRPO/PPO
updates through the real trainer, with multi-turn episodes that search and then answer.

Run: ``python -m pytest -q tests/tasks/test_search_toy.py`` (fast part ≈ 5 s; the slow test
builds the cached warm start once, ≈ 35 s of one core, then ≈ 4 s per algorithm).
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from rlsuite.suite.cli import main
from rlsuite.suite.models import char_tokenizer
from rlsuite.suite.runfolder import read_jsonl
from rlsuite.tasks.search_toy import SearchToy, SearchToyConfig, make_world, render, sft_loss


@pytest.fixture(scope="module")
def task():
    return SearchToy(SearchToyConfig(name="search_toy"))


def test_world_is_fixed_and_searchable(task):
    passages, facts = make_world(600)
    assert (passages, facts) == make_world(600) and len(passages) == 1200 and len(facts) == 600
    assert len(set(facts)) == 600 and all(len(n) == 5 for n in facts)
    name = next(iter(facts))
    city, food = f"{name} city: {facts[name]['city']}.", f"{name} food: {facts[name]['food']}."
    top = {q: [h["document"]["contents"] for h in task.index.search([q], 2)[0]]
           for q in (name, f"{name} city", f"{name} food")}
    # the relation word decides the top passage; the name alone ties (city first)
    assert top == {name: [city, food], f"{name} city": [city, food], f"{name} food": [food, city]}
    assert render(task.index.search([name], 2)[0]) == city + "\n" + food + "\n"


def test_splits_hold_out_whole_entities(task):
    s = task.splits()
    names = {k: {q.name for q in v} for k, v in s.items()}
    assert not (names["train"] & names["val"] or names["train"] & names["test"] or names["val"] & names["test"])
    assert 80 <= len(s["val"]) <= 160 and 80 <= len(s["test"]) <= 160 and len(s["train"]) > 900
    assert all(q.answer == task.facts[q.name][q.relation] for v in s.values() for q in v)


def test_teacher_episode_and_observation_mask(task):
    tok = char_tokenizer()
    q = task.splits()["train"][0]
    rng = random.Random(0)
    texts = [tok.decode(task.episode(q, tok, rng)[0]) for _ in range(40)]
    queries = {t.split("<search>")[1].split("</search>")[0] for t in texts}
    assert queries == {f"{q.name} city", f"{q.name} food"}  # the teacher picks the relation at random
    for t in texts:  # ... and answers from the top passage
        rel = t.split("<search>")[1].split("</search>")[0].split()[1]
        assert t.endswith(f"<answer>{task.facts[q.name][rel]}</answer><eos>")
    ids, mask = task.episode(q, tok, random.Random(0))
    text = tok.decode(ids)
    t1 = text[len(task.prompt(q)):text.index("</search>") + len("</search>")]
    obs = task.make_env(q).step(t1)
    assert text.startswith(task.prompt(q) + t1 + obs + "<answer>")
    # mask: prompt 0, first turn 1, observation 0, second turn + EOS 1
    n_p, n_1, n_o = len(task.prompt(q)), len(t1), len(obs)
    assert mask == [0.0] * n_p + [1.0] * n_1 + [0.0] * n_o + [1.0] * (len(ids) - n_p - n_1 - n_o)
    assert task.grade(q, task.reference_completion(q)).correct
    assert not task.grade(q, f"<answer>{'x' + q.answer}</answer>").correct


def test_sft_loss_gives_no_gradient_through_observation_targets(task):
    tok = char_tokenizer()
    batch = [task.episode(q, tok, random.Random(1)) for q in task.splits()["train"][:3]]
    width = max(len(ids) for ids, _ in batch)
    logits = torch.zeros(3, width, len(tok), requires_grad=True)

    class Model:
        def __call__(self, input_ids, attention_mask, position_ids):
            return type("Out", (), {"logits": logits})()

    sft_loss(Model(), tok, batch).backward()
    for b, (ids, m) in enumerate(batch):
        off = width - len(ids)
        for t in range(len(ids) - 1):  # logits at t predict token t + 1
            has_grad = bool(logits.grad[b, off + t].abs().sum() > 0)
            assert has_grad == (m[t + 1] == 1.0), (b, t)


def test_config_validation():
    with pytest.raises(ValueError, match="top_k must be 1 or 2"):
        SearchToyConfig(top_k=3)
    with pytest.raises(ValueError, match="n_entities"):
        SearchToyConfig(n_entities=10)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_trainer_runs_search_then_answer_episodes(algo, tmp_path, capsys):
    """Two updates with the cached warm start: the episodes search, get passages, answer."""
    code = main(["run", "--task", "search_toy", "--algo", algo, "--seed", "0", "--budget", "updates=2",
                 "--set", "eval.max_prompts=16",
                 "--set", "eval.test_prompts=16", "--set", "eval.save_samples=16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    warm = json.load(open(f"{run_dir}/env.json"))["warm_start"]
    assert warm["warm_check_grounded"] >= 0.9 and 0.2 <= warm["warm_check_acc"] <= 0.7, warm
    samples = [s for s in read_jsonl(f"{run_dir}/samples.jsonl") if s["step"] == 0]
    searched = [s for s in samples if "<search>" in s["completion"] and "</information>" in s["completion"]]
    assert len(searched) >= len(samples) // 2, samples[:3]
    assert any(s["completion"].rstrip().endswith("</answer>") and s["reward"] == 1.0 for s in searched)
    rows = read_jsonl(f"{run_dir}/metrics.jsonl")
    assert len(rows) == 2 and all(r["loss/total"] == r["loss/total"] for r in rows)  # finite, not NaN
