"""REINFORCE on the outcome reward (Williams 1992), the plainest policy gradient.

Per token: ``ℓ_t = −Â_i · log π_θ(y_t|s_t)`` with ``Â_i = R_i − b``, where the baseline ``b`` is
0 (``baseline: none``) or the group mean of the rewards (``group_mean`` — the unnormalised arm
of studies of GRPO's std normalisation). No ratio, no clipping, no critic: with several epochs
or staleness the update is simply off-policy (no correction).

Differs from GRPO by: 1. no importance ratio or clip; 2. no std scaling; 3. no KL (β = 0).

Fidelity: ``paper`` — the standard estimator (Williams 1992, "Simple statistical
gradient-following algorithms for connectionist reinforcement learning", Machine Learning 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, group_mean_std
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class ReinforceConfig(AlgoConfig):
    baseline: Literal["none", "group_mean"] = "group_mean"
    """Subtract nothing, or the group mean of the rewards."""


def policy_gradient_loss(logp, adv, mask):
    """``−Â·log π`` per token (0 off the mask). Shapes: [B, T] → [B, T]."""
    return -adv * logp * mask


@register
class Reinforce(Algorithm):
    name = "reinforce"
    summary = "Plain REINFORCE on the outcome reward, optional group-mean baseline."
    citation = "Williams 1992, Simple statistical gradient-following algorithms for connectionist RL, Mach. Learn. 8"
    fidelity = "paper"
    switches = ("baseline",)
    tune_knob = ("baseline", ("none", "group_mean"))
    Config = ReinforceConfig
    cfg: ReinforceConfig

    @property
    def group_relative(self) -> bool:  # type: ignore[override]
        return self.cfg.baseline == "group_mean"

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = batch.rewards
        if self.cfg.baseline == "group_mean":
            adv = adv - group_mean_std(batch.rewards, batch.group_id)[0]
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return policy_gradient_loss(fwd.logp, batch.adv, batch.loss_mask), {}
