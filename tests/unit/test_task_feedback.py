"""The tasks' verifier feedback that FBOS-RL's second round shows the policy: arith's and the code
tasks' texts, a chat task's revision prompt, and the math and GSM8K templates (never the gold
answer). The entry's tests: ``tests/algorithms/test_fbos_rl.py``."""

from __future__ import annotations

from rlsuite.tasks.base import Grade, Task


def test_task_feedback_texts():
    from rlsuite.tasks.arith import Arith, ArithConfig, Problem
    from rlsuite.tasks.code import code_feedback

    task, p = Arith(ArithConfig(name="arith")), Problem(47, 38, "+")
    fb = lambda c, detail="full": task.feedback(p, c, task.grade(p, c), detail)
    assert fb("84") == "84 is wrong. It is too low." and fb("90") == "90 is wrong. It is too high."
    assert fb("85") == "85 is correct." and fb("85 apples") == "85 is correct. Answer with the number only."
    assert fb("x") == "No number found. Answer with the number only."
    assert fb("84", "binary") == "Your answer is incorrect."
    assert task.revision_prompt(p, "84", fb("84")) == "47+38=84\n84 is wrong. It is too low.\n47+38="
    assert "85" not in fb("84") and "85" not in fb("x")  # never the gold answer
    assert code_feedback(Grade(0.0, False, "x", "timeout")).startswith("Your code timed out")
    assert code_feedback(Grade(1 / 3, False, "x", "AssertionError")) == \
        "Your code runs but returns wrong results on the tests. It passes 33% of the tests."
    assert code_feedback(Grade(0.0, False, "x", "KeyError")) == "Your code raised KeyError when tested."
    assert code_feedback(Grade(0.0, False, None, "no_code"), "binary") == "Your code fails the tests."

    class Chat(Task):
        def prompt(self, example):
            return [{"role": "user", "content": "q?"}]

    msgs = Chat(None).revision_prompt(None, "a", "Your answer a is incorrect.")
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"] and msgs[1]["content"] == "a"
    assert Chat(None).feedback(None, "a", Grade(0.0, False, None)) == \
        "No final answer could be extracted from your response."


def test_math_and_gsm8k_feedback_templates():
    from rlsuite.tasks.gsm8k import GSM8K, GSM8KConfig
    from rlsuite.tasks.math import Math, MathConfig

    g = GSM8K.__new__(GSM8K)  # the feedback needs neither data nor the grader pool
    g.cfg = GSM8KConfig(name="gsm8k")
    ex = {"question": "q", "answer": "so #### 12"}
    assert g.feedback(ex, "it is 10", Grade(0.0, False, "10")) == \
        "Your final answer 10 is incorrect. It is too low. Put the final answer in \\boxed{}."
    assert g.feedback(ex, "no idea", Grade(0.0, False, None)).startswith("No final answer found")
    m = Math.__new__(Math)
    m.cfg = MathConfig(name="math")
    assert m.feedback({}, "so \\boxed{3/4}", Grade(0.0, False, None)) == \
        "Your final answer 3/4 is not equivalent to the correct answer."
    assert m.feedback({}, "so 3/4", Grade(0.0, False, None)).startswith("No final answer found")
