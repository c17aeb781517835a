"""GPG — Group Policy Gradient (Chu et al. 2025, arXiv 2504.02546).

Objective: the plain policy gradient, no surrogate ratio, no clip, no critic, no reference:

    ℓ_t = −Â_i · log π_θ(y_t|s_t),      Â_i = α·(R_i − mean_G R) / F_norm,

with ``F_norm = 1`` and the batch-level correction ``α = B / max(1, #{i : R_i ≠ 0})`` (B rows of
the rollout batch), token-mean aggregation, no KL. A singleton group's mean is 0 (verl).

Differs from GRPO by: 1. no importance ratio or clip (the loss is REINFORCE's, off-policy
without correction when ``train.epochs``/``train.minibatches`` make it stale); 2. no std scaling
but the factor α; 3. token-mean, no KL.

Fidelity: ``code`` — verl 0.9.1's ``adv_estimator=gpg`` (``compute_gpg_outcome_advantage``, whose
``f_norm`` is fixed at 1) with its paired ``policy_loss.loss_mode=gpg`` (``compute_policy_loss_gpg``)
and verl's default ``loss_agg_mode=token-mean``; checked against it in
``tests/algorithms/test_gpg.py``. Note that verl's α counts the samples whose *reward*
is non-zero (with 0/1 rewards: the correct ones), while the paper's accurate-gradient-estimation
factor is meant to rescale by the share of samples that carry a gradient (those outside groups
of equal rewards); this entry follows verl's code. Statistics in float64 (verl: the rewards'
dtype); an all-equal group gets exactly 0. Metric: ``algo/gpg/alpha`` (the step's α).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.reinforce import policy_gradient_loss
from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage
from rlsuite.suite.types import Batch, Forward


def gpg_advantage(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, float]:
    """``α·(R_i − mean_G R)`` with ``α = B / max(1, #{R ≠ 0})`` (verl's count). [B], [B] → ([B], α)."""
    alpha = rewards.shape[0] / max(1, int(torch.count_nonzero(rewards)))
    return group_normalised_advantage(rewards, group_ids, scale_by_std=False) * alpha, alpha


@dataclass(frozen=True, kw_only=True)
class GPGConfig(AlgoConfig):
    pass


@register
class GPG(Algorithm):
    name = "gpg"
    summary = "Group-centred reward × batch factor B/#(R≠0), plain −Â·log π loss (no ratio, clip or KL), token-mean."
    citation = ("Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning, "
                "arXiv:2504.02546")
    fidelity = "code"
    group_relative = True
    Config = GPGConfig
    cfg: GPGConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv, alpha = gpg_advantage(batch.rewards, batch.group_id)
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask), metrics={"algo/gpg/alpha": alpha})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return policy_gradient_loss(fwd.logp, batch.adv, batch.loss_mask), {}
