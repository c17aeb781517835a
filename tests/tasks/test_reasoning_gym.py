"""``reasoning_gym``: the adapter's splits (deduplicated, hash-selected, no overlap, independent of
the pool's order), binary grading on score == 1.0 with partial credit as a switch, a scorer that
raises as a grade error, the battery's per-dataset metrics, the space estimate by hand, and the
errors a user meets (unknown dataset, bad parameters, too few distinct problems, wrong version)."""

from __future__ import annotations

import math

import pytest

from rlsuite.suite.errors import BadInput
from rlsuite.suite.spec import resolve
from rlsuite.tasks import reasoning_gym as rgt
from rlsuite.tasks.reasoning_gym import Item, ReasoningGym, ReasoningGymConfig, parse_dataset_spec, space_estimate

# sums of two numbers 0..10: 121 problems
ARITH = ("basic_arithmetic:min_terms=2,max_terms=2,max_digits=1,operators=[+],"
         "allow_parentheses=false,allow_negation=false")
LEGS = "leg_counting:max_animals=3"


def task(**kw) -> ReasoningGym:
    kw.setdefault("pool", 2000)
    kw.setdefault("n_test", 30)
    kw.setdefault("n_val", 10)
    return ReasoningGym(ReasoningGymConfig(name="reasoning_gym", **kw))


def test_dataset_spec_parses_scalars_and_lists():
    assert parse_dataset_spec("gcd") == ("gcd", {})
    assert parse_dataset_spec("basic_arithmetic:min_terms=2,operators=[+,-],allow_parentheses=false") == (
        "basic_arithmetic", {"min_terms": 2, "operators": ["+", "-"], "allow_parentheses": False})
    with pytest.raises(ValueError, match="not key=value"):
        parse_dataset_spec("gcd:max_value")


def test_splits_are_deduplicated_disjoint_and_hash_selected():
    t = task(datasets=(ARITH,))
    s = t.splits()
    qs = {k: [it.question for it in v] for k, v in s.items()}
    # the sums hold 121 distinct questions (0 + 0 .. 10 + 10); a pool of 2000 repeats each ~16 times
    space = t.problem_space()[0]
    assert space["distinct"] == 121 and space["generated"] == 2000
    assert len(qs["test"]) == 30 and len(qs["val"]) == 10
    assert len(qs["train"]) == space["distinct"] - 40
    for k, v in qs.items():
        assert len(v) == len(set(v)), f"{k} holds a question twice"
    assert not set(qs["train"]) & set(qs["test"]) and not set(qs["train"]) & set(qs["val"])
    assert not set(qs["val"]) & set(qs["test"])
    # test is the 30 distinct questions first in sha256("test:" + q) order: recomputed by hand
    everything = sorted(set(qs["train"]) | set(qs["val"]) | set(qs["test"]), key=lambda q: rgt._hash("test", q))
    assert set(qs["test"]) == set(everything[:30])


def test_splits_do_not_depend_on_the_pool_size_beyond_the_questions_it_holds():
    # a pool of 2000 and one of 3000 hold the same 121 sums: the same splits (selection is by question, not index)
    a, b = task(datasets=(ARITH,)).splits(), task(datasets=(ARITH,), pool=3000).splits()
    for k in ("val", "test"):
        assert [it.question for it in a[k]] == [it.question for it in b[k]]
    assert sorted(it.question for it in a["train"]) == sorted(it.question for it in b["train"])


def test_too_few_distinct_problems_is_refused_with_the_count():
    with pytest.raises(BadInput, match=r"only \d+ distinct questions in a pool of 2000"):
        task(datasets=(ARITH,), n_test=100, n_val=30).splits()


def test_the_answer_cap_by_hand():
    items = [Item("x", i, f"q{i}", a) for i, a in enumerate("1111111123")]
    kept = rgt.cap_answer_share(items, 0.5)
    # N: 10 -> 5+1+1 = 7 -> 3+1+1 = 5 -> 2+1+1 = 4 (fixed): two 1s by the balance hash, the 2 and the 3
    assert sorted(it.answer for it in kept) == ["1", "1", "2", "3"]
    ones = sorted((it for it in items if it.answer == "1"), key=lambda it: rgt._hash("balance", it.question))
    assert {it.question for it in kept if it.answer == "1"} == {it.question for it in ones[:2]}
    assert [it.idx for it in kept] == sorted(it.idx for it in kept)  # the input's order
    assert rgt.cap_answer_share(items, 1.0) == items
    none = [Item("x", 10 + i, f"n{i}", None) for i in range(3)]
    assert len([it for it in rgt.cap_answer_share(items + none, 0.5) if it.answer is None]) == 3


def test_the_answer_cap_bounds_every_answer_and_a_constant_answer_in_the_splits():
    from collections import Counter

    gcd = "gcd:max_value=150"  # the answer 1 is ~30% of the problems
    plain, capped = task(datasets=(gcd,)), task(datasets=(gcd,), max_answer_share=0.2)
    share = lambda t: Counter(it.answer for k in ("train", "val", "test")  # noqa: E731
                              for it in t.splits()[k]).most_common(1)[0][1] / sum(len(v) for v in t.splits().values())
    assert share(plain) > 0.25
    assert share(capped) <= 0.2 + 1e-9
    space = capped.problem_space()[0]
    assert sum(len(v) for v in capped.splits().values()) == space["kept_by_answer_cap"] < space["distinct"]
    assert not {it.question for it in capped.splits()["test"]} & {it.question for it in capped.splits()["train"]}
    assert "kept_by_answer_cap" not in plain.problem_space()[0]


def test_an_answer_cap_that_leaves_too_few_questions_is_refused_with_its_counts():
    with pytest.raises(BadInput, match=r"max_answer_share=0.01 kept \d+ of \d+ .*raise task.max_answer_share"):
        task(datasets=(ARITH,), n_test=10, n_val=5, max_answer_share=0.01).splits()


def test_unknown_dataset_and_bad_parameters_are_clear_errors():
    with pytest.raises(BadInput, match="unknown dataset 'no_such'.*valid: .*basic_arithmetic"):
        task(datasets=("no_such",)).splits()
    with pytest.raises(BadInput, match="refuses parameters"):
        task(datasets=("basic_arithmetic:min_terms=5,max_terms=2",)).splits()


def test_enum_parameters_are_named_by_their_value_in_a_spec():
    """``aiw``'s ``task_types`` takes ``TaskType`` members; the spec's strings become members (by
    value or name), and a string that is neither is one clear error with the valid values."""
    only = task(datasets=("aiw:task_types=[siblings],task_type_weights=[1.0],max_entities=4",), pool=300,
                n_test=20, n_val=5)
    qs = [it.question for k in ("train", "val", "test") for it in only.splits()[k]]
    assert qs and all("sisters" in q or "brothers" in q for q in qs)
    assert not any("colleague" in q or "friend" in q for q in qs)
    with pytest.raises(BadInput, match=r"refuses parameters.*task_types='cousins' is not one of siblings, friends, "
                                       r"colleagues"):
        task(datasets=("aiw:task_types=[cousins],task_type_weights=[1.0]",)).splits()


SPLITS_DIGEST = ("import hashlib, sys\n"
                 "from rlsuite.tasks.reasoning_gym import ReasoningGym, ReasoningGymConfig\n"
                 "t = ReasoningGym(ReasoningGymConfig(datasets=(sys.argv[1],), pool=300, n_test=20, n_val=5))\n"
                 "s = t.splits()\n"
                 "text = '|'.join(f'{it.question}={it.answer}' for k in ('train', 'val', 'test') for it in s[k])\n"
                 "print(hashlib.sha256(text.encode()).hexdigest())\n")


def test_a_dataset_whose_problems_follow_the_string_hash_seed_is_generated_at_a_pinned_one(tmp_path, monkeypatch):
    """``ransom_note`` (0.1.25) draws letters from ``list(a set)``: its problems change with
    PYTHONHASHSEED, so every process would get others. The probe (this process and one with another
    hash seed) finds it and caches the answer (a deterministic dataset passes); such a dataset is then
    generated in a child at the pinned hash seed, so processes with different hash seeds get the same
    splits, and the grader reads the same entries (a gold answer grades correct)."""
    import hashlib
    import os
    import subprocess
    import sys

    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path))
    spec = "ransom_note:max_note_length=3,max_magazine_length=8"
    assert "set" in rgt.hash_seed_dependence(spec, 0)
    assert rgt.hash_seed_dependence("gcd:max_value=150", 0) is None
    cached = sorted((tmp_path / "reasoning_gym" / "hash_seed").glob("*.json"))
    assert len(cached) == 2
    monkeypatch.setattr(rgt.subprocess if hasattr(rgt, "subprocess") else __import__("subprocess"), "Popen",
                        lambda *a, **k: pytest.fail("a cached answer started a probe"))
    assert rgt.hash_seed_dependence("gcd:max_value=150", 0) is None and "set" in rgt.hash_seed_dependence(spec, 0)
    monkeypatch.undo()
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path))
    digests = {subprocess.run([sys.executable, "-c", SPLITS_DIGEST, spec], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("5", "6")}
    t = task(datasets=(spec,), pool=300, n_test=20, n_val=5)
    s = t.splits()
    text = "|".join(f"{it.question}={it.answer}" for k in ("train", "val", "test") for it in s[k])
    assert digests == {hashlib.sha256(text.encode()).hexdigest()}
    assert all(t.grade(it, t.reference_completion(it)).correct for it in s["test"])
    assert {it.answer for it in s["test"]} == {"True", "False"}


def test_a_wrong_package_version_is_refused(monkeypatch):
    monkeypatch.setattr(rgt, "PINNED", "0.0.1")
    with pytest.raises(BadInput, match="pinned to 0.0.1"):
        task(datasets=(ARITH,)).splits()


def test_correct_means_a_score_of_one_and_partial_credit_is_a_switch():
    t = task(datasets=(ARITH,))
    ex = t.splits()["test"][0]
    right = t.grade(ex, f"I think <answer>{ex.answer}</answer>")
    assert right.correct and right.reward == 1.0 and right.parsed == ex.answer
    # the scorer's partial credit for an answer that contains the gold: len(gold) / len(answer)
    hedge = f"{ex.answer} or so"
    partial = t.grade(ex, f"<answer>{hedge}</answer>")
    assert not partial.correct and partial.reward == 0.0 and partial.parsed == hedge
    t2 = task(datasets=(ARITH,), partial_credit=True)
    g = t2.grade(ex, f"<answer>{hedge}</answer>")
    assert not g.correct and g.reward == pytest.approx(len(ex.answer) / len(hedge))
    # no tag: nothing extractable, no vote
    none = t.grade(ex, ex.answer)
    assert none.parsed is None and none.reward == 0.0 and none.error is None
    # the last complete tag wins; extract=plain grades the whole reply
    assert t.grade(ex, f"<answer>0</answer> no, <answer>{ex.answer}</answer>").correct
    assert task(datasets=(ARITH,), extract="plain").grade(ex, f"  {ex.answer}\n").correct


def test_a_scorer_that_raises_is_a_grade_error_not_a_zero(monkeypatch):
    t = task(datasets=(ARITH,))
    ex = t.splits()["test"][0]
    ds = t._dataset(ex.label)

    def boom(answer, entry):
        raise KeyError("metadata")

    monkeypatch.setattr(ds, "score_answer", boom)
    g = t.grade(ex, f"<answer>{ex.answer}</answer>")
    assert g.error is not None and "KeyError" in g.error and not g.correct and g.parsed is None
    monkeypatch.setattr(ds, "score_answer", lambda a, e: float("nan"))
    assert t.grade(ex, f"<answer>{ex.answer}</answer>").error is not None


def test_a_battery_trains_on_every_dataset_and_scores_each():
    t = task(datasets=(ARITH, LEGS, ARITH.replace("operators=[+]", "operators=[-]")))
    assert t.labels == ["basic_arithmetic", "leg_counting", "basic_arithmetic_2"]
    s = t.splits()
    for k, n in (("test", 30), ("val", 10)):
        assert sorted({it.label for it in s[k]}) == sorted(t.labels)
        assert all(sum(it.label == lab for it in s[k]) == n for lab in t.labels)
    # val and test are ordered by a hash of the question, so their first prompts mix the datasets
    assert len({it.label for it in s["test"][:20]}) == 3
    exs = s["test"][:60]
    grades = [t.grade(e, t.reference_completion(e) if e.label == "leg_counting" else "<answer>x</answer>")
              for e in exs]
    m = t.eval_metrics(exs, grades)
    assert m["acc_leg_counting"] == 1.0 and m["acc_basic_arithmetic"] == 0.0 and m["acc_basic_arithmetic_2"] == 0.0
    assert task(datasets=(ARITH,)).eval_metrics(exs[:3], grades[:3]) == {}


def test_a_battery_never_trains_on_a_question_another_dataset_holds_out():
    """Two datasets whose spaces overlap (sums 0..10, and sums and differences 0..10): each selects its
    own test and val by the question's hash, so a sum in the first one's test can rank past the
    second one's cut; it must not reach the second one's train. Every question held out anywhere is
    out of every train split."""
    both = ARITH.replace("operators=[+]", "operators=[+,-]")
    t = task(datasets=(ARITH, both))
    s = t.splits()
    held = {it.question for k in ("test", "val") for it in s[k]}
    train = {it.question for it in s["train"]}
    sums = {it.question for it in s["test"] if it.label == "basic_arithmetic"}
    shared = sums & {it.question for it in s["test"] if it.label == "basic_arithmetic_2"}
    assert 0 < len(shared) < len(sums)  # the overlap this test is about: some of the sums are tested twice
    assert not train & held
    # each dataset still tests and validates on its own hash-selected questions, as alone
    alone = task(datasets=(ARITH,)).splits()
    for k in ("test", "val"):
        assert sorted(it.question for it in s[k] if it.label == "basic_arithmetic") == sorted(
            it.question for it in alone[k])


def test_space_estimate_by_hand():
    # 3 draws, 2 distinct: N(1 - (1 - 1/N)^3) = 2  ->  N^2 - 3N + 1 = 0 ... solved: N = (3 + sqrt 5) / 2
    n, lower = space_estimate(3, 2)
    assert not lower and n == pytest.approx((3 + math.sqrt(5)) / 2, rel=1e-9)
    # no repeat in 100 draws: the birthday bound 100^2 / (2 ln 20)
    n, lower = space_estimate(100, 100)
    assert lower and n == pytest.approx(1e4 / (2 * math.log(20)))
    assert space_estimate(50, 1) == (1.0, False)


def test_the_pool_reports_the_space_it_draws_from():
    t = task(datasets=(ARITH,))
    sp = t.problem_space()[0]
    assert sp["label"] == "basic_arithmetic" and not sp["space_is_lower_bound"]
    assert 115 <= sp["space_estimate"] <= 127 and sp["used"] == sp["distinct"]


def test_presets_resolve_and_the_prompt_is_a_chat_turn():
    for model in ("tiny", "org/some-model"):
        spec = resolve("reasoning_gym", "grpo", model, 0)
        assert spec.task.datasets
    t = task(datasets=(LEGS,))
    ex = t.splits()["test"][0]
    p = t.prompt(ex)
    assert p[0]["role"] == "user" and p[0]["content"].endswith("inside <answer></answer> tags.")
    assert isinstance(ex, Item) and ex.answer == t.gold(ex)


@pytest.mark.parametrize("reply, numeric, want", [
    ("2 + 9 = 11", True, "11"),  # a numeric gold: the last number
    ("The answer is 4.", True, "4"),
    ("1,000 apples", True, "1000"),
    ("no digits here", True, None),
    ('The answer is "dunt".', False, "dunt"),  # text: after the last "answer is", quotes and period removed
    ("The final answer is: **ratti**", False, "ratti"),
    ("let me think\nnials", False, "nials"),  # else the last line
    ("<answer>x</answer> then 5", True, "x"),  # a tag always wins
    ("   ", False, None),
])
def test_auto_extraction_reads_what_a_small_chat_model_writes(reply, numeric, want):
    assert rgt.extract_answer(reply, "auto", numeric=numeric) == want


def test_auto_extraction_reads_the_first_word_for_one_word_golds():
    assert rgt.extract_answer("Yes, it logically follows.", "auto", word=True) == "Yes"
    assert rgt.extract_answer("The answer is **No** because ...", "auto", word=True) == "No"
    assert rgt.extract_answer("Yes, it logically follows.", "auto") == "Yes, it logically follows"


def test_auto_extraction_grades_numbers_by_the_gold():
    t = task(datasets=(ARITH,), extract="auto")
    ex = t.splits()["test"][0]
    assert t.grade(ex, f"So the sum is {ex.answer}.").correct
    assert not t.grade(ex, f"{ex.answer} + 1 = {int(ex.answer) + 1}").correct
