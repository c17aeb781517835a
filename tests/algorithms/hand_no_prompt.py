"""Setup shared by the hand tests of IS-GRPO, PNPO, the predictive divergence mask, DRPO,
Entrocraft and EDAS (``test_is_grpo.py``, ``test_pnpo.py``, ``test_dppo_pdm.py``,
``test_drpo.py``, ``test_entrocraft.py``, ``test_edas.py``): batches without a prompt column
(every column a response token unless masked), a context with the step, the training progress
and the policy entropy as arguments, a per-sequence advantage broadcast on the loss mask, and the
6-decimal comparison of the hand numbers.
"""

from __future__ import annotations

import dataclasses

import torch

from rlsuite.algorithms.base import Context
from rlsuite.suite.types import Batch
from tests.algorithms.hand import D, t
from tests.fakes import hand_batch, hook_ctx


def ctx(step=1, progress=0.0, entropy=None, n_train=4, prompts_per_step=2, group_size=2, seed=0) -> Context:
    return hook_ctx(gen_seed=seed * 1000 + step, step=step, progress=progress, entropy=entropy, n_train=n_train,
                    prompts_per_step=prompts_per_step, group_size=group_size, seed=seed)


def make_batch(mask, group_id, rewards, scores=None, example_idx=None, logp=None, behav=None, old=None, **kw) -> Batch:
    B, T = t(mask).shape
    z = torch.zeros(B, T, dtype=D)
    return hand_batch(mask, group_id, rewards, prompt_width=0, prompt_turns=False, dtype=D,
                      behav_logp=behav if behav is not None else z, example_idx=torch.tensor(example_idx or group_id),
                      scores=t(scores if scores is not None else rewards), old_logp=old if old is not None else z, **kw)


def close(actual, expected):
    """Hand numbers are written with 6 decimals."""
    torch.testing.assert_close(actual, expected, atol=2e-6, rtol=0)


def with_adv(batch: Batch, adv) -> Batch:
    """Set a per-sequence advantage [B] (broadcast on the loss mask)."""
    a = adv if isinstance(adv, torch.Tensor) else t(adv)
    return dataclasses.replace(batch, adv=a[:, None] * batch.loss_mask)
