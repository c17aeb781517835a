"""``arith`` prompt styles: ``bare`` (the embedded model's ``47+38=``, leading integer) and
``question`` (a chat model's user turn, graded on the last integer, since a chat model answers
``47 + 38 = 85``); the style is in the run id only when it is not the default."""

from __future__ import annotations

from rlsuite.suite.spec import resolve
from rlsuite.suite.stop import stop_ids
from rlsuite.tasks.arith import Arith, ArithConfig, Problem


def test_bare_style_grades_the_leading_integer():
    t = Arith(ArithConfig(name="arith"))
    p = Problem(47, 38, "+")
    assert t.prompt(p) == "47+38="
    assert t.grade(p, "85").correct and not t.grade(p, "47 + 38 = 85").correct


def test_question_style_prompt_and_last_integer_grading():
    t = Arith(ArithConfig(name="arith", style="question"))
    p, q = Problem(47, 38, "+"), Problem(3, 9, "-")
    assert t.prompt(p) == "What is 47 + 38? Reply with only the number."
    assert t.prompt(Problem(4, 5, "*")) == "What is 4 × 5? Reply with only the number."
    for text, ok in [("85", True), ("47 + 38 = 85", True), ("The answer is 85.", True), ("85 or 84", False),
                     ("47 + 38", False), ("", False), ("1,085", False)]:
        assert t.grade(p, text).correct is ok, text
    assert t.grade(q, "3 - 9 = -6").correct and t.grade(q, "3-9=-6").correct
    assert t.grade(q, "no idea").parsed is None
    assert t.splits()["test"] == Arith(ArithConfig(name="arith")).splits()["test"]  # same problems


def test_style_enters_the_run_id_only_when_changed():
    base = resolve("arith", "grpo", "tiny", 0)
    same = resolve("arith", "grpo", "tiny", 0, sets=[("task.style", "bare")])
    other = resolve("arith", "grpo", "tiny", 0, sets=[("task.style", "question")])
    assert base.run_id == same.run_id != other.run_id


def test_pretrained_models_get_the_question_style():
    # the hf preset: a pretrained chat model is asked a question, not given "47+38="
    spec = resolve("arith", "grpo", "smollm2-135m", 0)
    assert spec.task.style == "question" and spec.rollout.max_new_tokens == 16


class _Tok:
    eos_token_id = 2


class _Gen:
    def __init__(self, eos):
        self.eos_token_id = eos


class _Model:
    def __init__(self, eos):
        self.generation_config = _Gen(eos)


def test_stop_ids_union_tokenizer_and_generation_config():
    assert stop_ids(_Tok()) == (2,)
    assert stop_ids(_Tok(), _Model(2)) == (2,)
    assert stop_ids(_Tok(), _Model([0, 2])) == (2, 0)
    assert stop_ids(_Tok(), _Model(None)) == (2,)
