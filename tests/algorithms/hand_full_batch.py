"""Setup shared by the hand tests of GGPO, AGRO, SP3O, COPC and DC-GRPO (``test_ggpo.py``,
``test_agro.py``, ``test_sp3o.py``, ``test_copc.py``, ``test_dc_grpo.py``): one prompt per step,
a batch with every field these entries read (zero log-probs, values and token rewards unless
given), and GGPO's example, which AGRO's test reuses.
"""

from __future__ import annotations

import dataclasses

import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.suite.types import Batch
from tests.algorithms.hand import D, t
from tests.fakes import hand_batch, hook_ctx

CTX = hook_ctx(gen_seed=0, max_new_tokens=3, group_size=3, prompts_per_step=1)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(name=name, **cfg))


def make_batch(loss_mask, group_id, rewards, **kw) -> Batch:
    """Prompt width 1; every field the entries read can be given through ``kw`` (lists become
    float64 tensors)."""
    B, T = t(loss_mask).shape
    zeros = {k: torch.zeros(B, T, dtype=D) for k in ("old_logp", "ref_logp", "values", "token_rewards")}
    return hand_batch(loss_mask, group_id, rewards, prompt_turns=False, dtype=D, **{**zeros, **kw})


def with_adv(alg, batch):
    out = alg.advantages(batch, CTX)
    return out, dataclasses.replace(batch, adv=out.adv, returns=out.returns, extras={**batch.extras, **out.extras})


# ========================================================================================
# GGPO / AGRO — U_i = R_i − β·Σ_t(log π_old − log π_ref); Φ = β·log mean exp(U/β); Â_i = U_i − Φ

GG_MASK = [[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 1, 0], [0, 1, 0]]
GG_LOGR = [[0, 0.2, 0.2], [0, -0.4, 0], [0, 0.4, 0.0], [0, 0, 0], [0, 0, 0]]  # log π_old − log π_ref
GG_R = [1.0, 0.0, 0.0, 1.0, 1.0]
GG_BATCH = make_batch(GG_MASK, [0, 0, 0, 1, 1], GG_R, ref_logp=-t(GG_LOGR))  # old = 0, ref = −(old − ref)
