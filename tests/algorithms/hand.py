"""Builders shared by the hand-computed tests in this folder (``test_<entry>.py``, one file per
registered entry): float64 tensors, the hook :class:`Context`, a :class:`Batch` from a loss mask,
an entry from the registry by name, a :class:`Group`, and the gradient of an entry's aggregated
loss. A new entry's hand test (step 2 of adding an algorithm) can start from these.

The ``hand_*.py`` modules beside this one hold the setup that several entries' tests share: the
same inputs, a context of another shape, or numbers recorded from verl and TRL.
"""

from __future__ import annotations

import math

import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.algorithms.base import Group
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Batch, Forward
from tests.fakes import hand_batch, hook_ctx

D = torch.float64
LN = math.log


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


CTX = hook_ctx(gen_seed=0, max_new_tokens=3, group_size=3, prompts_per_step=2)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(**cfg))


def make_batch(loss_mask, group_id, rewards, prompt_width=1, scores=None, truncated=None, **kw) -> Batch:
    extra = {} if scores is None else {"scores": scores}
    if truncated is not None:
        extra["truncated"] = torch.tensor(truncated)
    return hand_batch(loss_mask, group_id, rewards, prompt_width=prompt_width, dtype=D, **extra, **kw)


def group(scores, lengths=None, truncated=None) -> Group:
    g = len(scores)
    return Group(prompt="p", example=None, completions=("c",) * g, parsed=(None,) * g,
                 scores=torch.tensor(scores, dtype=torch.float),
                 lengths=None if lengths is None else torch.tensor(lengths),
                 truncated=None if truncated is None else torch.tensor(truncated))


def grad_of_agg(alg, logp_value, batch, ctx=CTX, fwd_kw=None):
    """(per-token loss, metrics, ∂ aggregate/∂ logp) with the entry's own aggregation mode."""
    logp = logp_value.clone().requires_grad_(True)
    loss, metrics = alg.loss(Forward(logp=logp, **(fwd_kw or {})), batch, ctx)
    aggregate(loss, batch.loss_mask, alg.aggregation, ctx.max_new_tokens).backward()
    return loss.detach(), metrics, logp.grad
