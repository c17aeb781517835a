"""RRC with anchors (``rrc_anchor``): rewards P(y ≻ anchor) − ½ worked by hand with a fake judge (soft
and hard), the other members as anchors when none is given, and the vote rule, where one anchor
beaten by both responses gives zero advantage."""

from __future__ import annotations

import torch

from tests.algorithms.hand_judges import ABC, TableJudge, ctx, group, make


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
