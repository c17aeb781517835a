"""REINFORCE++ and REINFORCE++-baseline (Hu et al. 2025, arXiv 2501.03262).

REINFORCE++ (``reinforce_pp``): token reward ``r_t = 1[t = T]·R − β·KL_t`` with the k1 estimate
``KL_t = log π_old(y_t) − log π_ref(y_t)`` in the reward (β = 0.001); return
``G_t = Σ_{k≥t} γ^{k−t} r_k`` (γ = 1); advantage ``Â_t = G_t`` whitened over **all policy
tokens of the batch** (global normalisation, no critic, no group baseline); PPO-clip token
loss (ε = 0.2), token-mean.

REINFORCE++-baseline (``reinforce_pp_baseline``): ``Â_i = R_i − mean_G R`` broadcast to tokens,
then the same global whitening; the KL moves from the reward to a k3 loss term.

Differs from GRPO by: 1. global batch whitening instead of per-group std; 2. (plain variant)
no group baseline and a per-token KL reward.
Fidelity: ``code`` — verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline``
estimators (checked against verl 0.9.1); RLinf docs. OpenRLHF 0.11.2 (``reinforce`` and
``reinforce_baseline`` in ``openrlhf/trainer/ppo_utils/experience_maker.py``) computes the same
returns (for γ = 1) and global whitening, except that it whitens with the population variance (verl 0.9.1
and ``rlsuite.suite.ops.masked_whiten``: Bessel-corrected) and its default KL coefficient is 0.01.
[ASSUMPTION] baseline variant: KL as a k3 loss term (β 0.001), not confirmed against the v9 text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, gae, group_mean_std, masked_whiten
from rlsuite.suite.types import Batch, Forward


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = Σ_{k≥t} γ^{k−t} r_k`` over policy tokens (masked tokens skipped). [B, T] → [B, T].

    Masked tokens inside a response (tool observations) are skipped and the return carries
    across them, so the final reward reaches earlier turns. verl 0.9.1's REINFORCE++ estimator
    (``compute_reinforce_plus_plus_outcome_advantage``) behaves the same way: at a masked position
    it keeps the running return as it is (no reset, no extra discount), so the two agree on
    multi-turn batches too.
    """
    return gae(token_rewards, torch.zeros_like(token_rewards), mask, gamma, 1.0)[0]


@dataclass(frozen=True, kw_only=True)
class ReinforcePPConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, 1]", "gamma": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (OpenRLHF 0.11.2's ``--actor.eps_clip`` default, both sides)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio."""
    gamma: float = 1.0
    """Discount of the token-reward return."""
    kl_coef: float = 0.001
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    kl_where: Literal["loss", "reward"] = "reward"


@register
class ReinforcePP(Algorithm):
    name = "reinforce_pp"
    not_group_relative = "no group baseline: token returns (with the k1 KL in the reward) whitened over the batch"
    summary = "Critic-free token returns with global batch whitening, PPO clip, k1 KL in the reward."
    citation = ("Hu et al. 2025, REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global "
                "Normalization, arXiv:2501.03262")
    fidelity = "code"
    switches = ("gamma", "kl_coef")
    tune_knob = ("clip_eps_low+clip_eps_high", (0.1, 0.2))
    Config = ReinforcePPConfig
    cfg: ReinforcePPConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        returns = discounted_returns(batch.token_rewards, batch.loss_mask, self.cfg.gamma)
        return AdvOut(adv=masked_whiten(returns, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, self.cfg.clip_eps_low,
                                 self.cfg.clip_eps_high)


@dataclass(frozen=True, kw_only=True)
class ReinforcePPBaselineConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio."""
    kl_coef: float = 0.001
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_where: Literal["loss", "reward"] = "loss"


@register
class ReinforcePPBaseline(ReinforcePP):
    name = "reinforce_pp_baseline"
    not_group_relative = ""  # the group-centred rewards: group-relative, unlike its parent
    summary = "REINFORCE++ with a group-mean baseline, global whitening and a k3 KL loss."
    assumptions = ("KL as a k3 loss term (β 0.001) rather than in the reward; not confirmed against the v9 text",)
    switches = ("kl_coef",)
    group_relative = True
    Config = ReinforcePPBaselineConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        centred = batch.rewards - group_mean_std(batch.rewards, batch.group_id)[0]
        return AdvOut(adv=masked_whiten(broadcast_to_tokens(centred, batch.loss_mask), batch.loss_mask))
