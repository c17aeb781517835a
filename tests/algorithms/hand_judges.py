"""Setup shared by the hand tests of RRC and its two variants (``test_rrc.py``, ``test_rrc_self.py``,
``test_rrc_anchor.py``) and by the judges' tests (``tests/unit/test_judges.py``): a fake judge
from a table of preferences, the hook context, a group of texts, and the entry with a fake judge.
"""

from __future__ import annotations

import dataclasses

import torch

from rlsuite import algorithms  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS, Context, Group
from rlsuite.suite.judges import Judge
from tests.fakes import hook_ctx


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


def ctx(charges: list | None = None) -> Context:
    return hook_ctx(gen_seed=0, group_size=3, prompts_per_step=1, n_train=1,
                    charge=(lambda *a: charges.append(a)) if charges is not None else (lambda *a: None))


def group(texts, scores=None, anchors=(), grade=None) -> Group:
    scores = torch.zeros(len(texts)) if scores is None else torch.tensor(scores, dtype=torch.float)
    return Group(prompt="p", example=None, completions=tuple(texts), parsed=(None,) * len(texts), scores=scores,
                 grade=grade, anchors=tuple(anchors))


def make(name: str = "rrc", fake: Judge | None = None, **changes):
    """The entry with the soft variant (rule = soft, the policy's greedy anchor) unless ``changes`` say
    otherwise: the tests of the paper's vote rule pass ``rule="votes"``."""
    cls = ALGORITHMS.get(name)
    changes = {"rule": "soft", "anchor_source": "policy", **changes}
    algo = cls(dataclasses.replace(cls.Config(name=name), **changes))
    if fake is not None:
        algo._judge = fake  # bypass the registry: a fake judge
    return algo


# P(a ≻ b) = .8, P(a ≻ c) = .6, P(b ≻ c) = .3 (consistent in both orders, so debiasing changes nothing)
ABC = {("a", "b"): 0.8, ("a", "c"): 0.6, ("b", "c"): 0.3}
