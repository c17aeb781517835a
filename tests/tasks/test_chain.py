"""``chain``: the embedded reasoning task — hand-made traces graded, the step rule by hand,
splits disjoint by construction, the same prompts everywhere, and the difficulty knobs."""

from __future__ import annotations

import hashlib

import pytest

from rlsuite.suite.spec import resolve
from rlsuite.tasks.chain import Chain, ChainConfig, ChainTask


def task(**kw) -> ChainTask:
    return ChainTask(ChainConfig(name="chain", **kw))


def test_prompt_and_trace_by_hand():
    p = Chain(7, 13, 5)
    assert p.text == "07^13x05:"
    # digit by digit modulo 10, no carries: 07 ⊕ 13 = 10, 10 ⊕ 13 = 23, 23 ⊕ 13 = 36, 36 ⊕ 13 = 49, 49 ⊕ 13 = 52
    assert p.values() == [10, 23, 36, 49, 52]
    assert p.trace == "01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #52"
    assert Chain(47, 38, 2).values() == [75, 3]  # 4+3=7, 7+8=15→5; then 7+3=10→0, 5+8=13→3
    assert Chain(47, 38, 2).trace == "01:47^38=75 02:75^38=03 #03"


def test_carry_is_ordinary_modular_addition():
    p = Chain(47, 38, 2, carry=True)
    assert p.text == "47+38x02:" and p.values() == [85, 23] and p.answer == 23


@pytest.mark.parametrize("completion, correct, parsed", [
    ("01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #52", True, "52"),
    ("01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #52  ", True, "52"),   # trailing space only
    ("#52", True, "52"),                                    # the scratchpad is not graded
    ("01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #53", False, "53"),
    ("01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52", False, None),         # no final answer
    ("01:07^13=10 #52 03:23^13=36", False, None),                 # text after the answer
    ("#52 #53", False, "53"),                               # the final '#' counts
    ("", False, None),
])
def test_grading_hand_made_answers(completion, correct, parsed):
    g = task().grade(Chain(7, 13, 5), completion)
    assert (g.correct, g.parsed, g.reward) == (correct, parsed, float(correct))


def test_format_component_is_separate_and_off_by_default():
    p = Chain(7, 13, 5)
    t = task(format_weight=0.25)
    assert t.grade(p, p.trace).reward == 1.25
    assert t.grade(p, "01:07^13=10 02:10^13=23 #11").reward == 0.25          # well-formed, wrong
    assert t.grade(p, "#52").reward == 1.0                        # right, no scratchpad
    assert t.grade(p, "banana").reward == 0.0
    assert task().grade(p, "01:07^13=10 02:10^13=23 #11").reward == 0.0
    with pytest.raises(ValueError, match="format_weight"):
        task(format_weight=1.0)


@pytest.mark.parametrize("completion, correct, well_formed", [
    ("01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #52", 1.0, 1.0),  # right trace
    ("01:07^13=10 02:10^13=23 #11", 0.0, 1.0),                 # well-formed, wrong
    ("#52", 1.0, 0.0),                                         # right, no scratchpad: not a trace
    ("banana", 0.0, 0.0),
])
def test_reward_components_are_raw_and_leave_the_reward_alone(completion, correct, well_formed):
    # The two named components whatever format_weight is; the reward is correct + w·format as before.
    assert ChainTask.reward_components == ("correct", "format")
    for w in (0.0, 0.25):
        g = task(format_weight=w).grade(Chain(7, 13, 5), completion)
        assert dict(g.components) == {"correct": correct, "format": well_formed}
        assert g.reward == correct + w * well_formed
        assert (g.component("correct"), g.component("format")) == (correct, well_formed)


def test_first_wrong_step_and_feedback_never_leak_the_answer():
    t, p = task(), Chain(7, 13, 5)
    assert t.first_wrong_step(p, p.trace) is None
    assert t.first_wrong_step(p, "01:07^13=10 02:10^13=23 03:23^13=37 04:36^13=49 05:49^13=52 #52") == 3
    assert t.first_wrong_step(p, "01:07^13=10 02:10^13=23 #23") == 3               # stopped early
    bad = "01:07^13=10 02:10^13=23 03:23^13=37 #37"
    fb = t.feedback(p, bad, t.grade(p, bad))
    assert "Step 3 is wrong." in fb and "52" not in fb


def test_splits_are_disjoint_by_construction_and_cover_every_problem():
    t = task()
    s = t.splits()
    texts = {k: {p.text for p in v} for k, v in s.items()}
    assert not (texts["train"] & texts["val"]) and not (texts["train"] & texts["test"])
    assert not (texts["val"] & texts["test"])
    n = 100 * 99 * (12 - 3 + 1)
    assert sum(len(v) for v in s.values()) == n == len(set().union(*texts.values()))
    assert 0.005 < len(s["test"]) / n < 0.015 and 0.005 < len(s["val"]) / n < 0.015
    assert {p.k for p in s["test"]} == set(range(3, 13))
    assert {p.k for p in s["val"][:200]} == set(range(3, 13))  # evals read the first 200: every k


def test_same_prompts_on_every_machine():
    # hash-selected from the prompt text with sha256: fixed, whatever the CPU or Python hash seed
    test = task().splits()["test"]
    assert [p.text for p in test[:3]] == [p.text for p in task().splits()["test"][:3]]
    assert test[0].text == "79^16x10:" and len(test) == 993
    digest = lambda split: hashlib.sha256("\n".join(p.text for p in split).encode()).hexdigest()
    assert digest(test) == "cf5ebf323dfeade8aea33de0bb3363b7cf9e1fef94f852a9e2f9bc2606ebeb2f"
    assert digest(task().splits()["val"]) == "2998959ceb2b67eafb39ffba0f98ef4707c00a81e6a76c94059f68d02e848e5a"


def test_response_lengths_span_the_documented_range():
    lens = [len(p.trace) + 1 for p in task().splits()["test"]]  # + EOS, one token a character
    assert min(lens) == 40 and max(lens) == 148


def test_difficulty_knobs_change_the_problems():
    hard = task(min_steps=8, max_steps=12, carry=True)
    ks = {p.k for p in hard.splits()["test"]}
    assert ks == set(range(8, 13)) and all(p.carry for p in hard.splits()["test"][:10])
    with pytest.raises(ValueError, match="min_steps"):
        task(min_steps=5, max_steps=4)


def test_embedded_preset_fits_the_longest_response():
    spec = resolve("chain", "grpo", "tiny", 0)
    assert spec.rollout.max_new_tokens >= 148


def test_the_committed_base_is_pinned():
    # the bytes every machine starts RL from (tasks/bases/chain__tiny.*): a rebuild on another CPU
    # model gives other bytes, so a change here must be deliberate (it changes every chain run id)
    from rlsuite.suite import warmstart

    man = warmstart.committed_base("chain", resolve("chain", "grpo", "tiny", 0).task, "tiny")
    assert man is not None and man["sha256"] == "97f8857b9940d261ab941526f8ed4460041d29020afb822243d1ab57ff8298d8"
    assert warmstart.sha256_file(warmstart.BASES / "chain__tiny.safetensors") == man["sha256"]
    assert 0.2 <= man["info"]["warm_check_acc"] <= 0.5  # the pass rate at temperature 1 RL starts from
    assert warmstart.base_identity(resolve("chain", "grpo", "tiny", 0)) == man["sha256"]
