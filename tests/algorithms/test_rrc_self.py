"""Self-competitive RRC (``rrc_self``): the vote rule on a unanimous cycle worked by hand (resolved in
pair order: R = α·[1, 0, 2]), and the defaults of the three RRC entries."""

from __future__ import annotations

import pytest
import torch

from rlsuite.algorithms.base import ALGORITHMS
from tests.algorithms.hand_judges import TableJudge, ctx, group, make


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
