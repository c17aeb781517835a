"""GRPO pass@k — a pass@G advantage in GRPO form (Tang et al. 2025, arXiv 2503.19595).

Objective: maximise the group's best reward ``max_i R_i`` (pass@k with k = G for 0/1 rewards)
rather than the mean. The leave-one-out k-sample estimator of that objective's gradient credits
sample i with ``max_j R_j − max_{j≠i} R_j``, which is non-zero only for the best sample:

    Â_{i*} = (R_(1) − R_(2)) / (std_G R + 1e-6),    Â_i = 0 for i ≠ i*,

with ``i*`` the group's best sample, ``R_(1) ≥ R_(2)`` the two largest rewards of the group
(a tie at the top gives 0), ``std_G`` the unbiased group std (switch ``scale_by_std``; off:
``R_(1) − R_(2)``), broadcast to every token of ``y_{i*}``. Groups need G ≥ 2 (a singleton
group is an error, as in verl). Loss: PPO clipped surrogate (ε 0.2 both sides), token-mean, no
KL — verl 0.9.1's defaults (``adv_estimator=grpo_passk`` with the default actor: vanilla policy
loss, ``loss_agg_mode=token-mean``, ``use_kl_loss=False``). verl's vanilla loss also dual-clips
Â < 0 at ``clip_ratio_c = 3``; pass@k advantages are never negative, so that clip cannot bind
and the entry has no ``dual_clip``.

Differs from GRPO by: 1. only the group's best sample gets a (positive) advantage, its margin
over the runner-up; the others get 0, so wrong answers are never pushed down; 2. token-mean, no KL.

Fidelity: ``code`` — checked against verl 0.9.1 ``compute_grpo_passk_outcome_advantage`` (the
reference in its docstring is arXiv 2503.19595; values in ``tests/algorithms/test_grpo_passk.py``).
Statistics in float64 (verl: the rewards' dtype). Which of several tied best samples is i*
does not matter (its advantage is 0); here it is the first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate
from rlsuite.suite.types import Batch, Forward


def passk_advantage(rewards: torch.Tensor, group_ids: torch.Tensor, scale_by_std: bool = True,
                    eps: float = 1e-6) -> torch.Tensor:
    """``(R_(1) − R_(2)) / (std_G + eps)`` on each group's best sample, 0 elsewhere. [B], [B] → [B].

    Raises ValueError for a group of fewer than 2 samples."""
    r = rewards.to(torch.float64)
    adv = torch.zeros_like(r)
    for g in torch.unique(group_ids).tolist():
        rows = torch.nonzero(group_ids == g).flatten()
        if rows.numel() < 2:
            raise ValueError(f"grpo_passk needs at least 2 samples per group, got {rows.numel()} in group {g}")
        vals = r[rows]
        best = int(torch.argmax(vals))
        runner_up = torch.cat([vals[:best], vals[best + 1:]]).max()
        a = vals[best] - runner_up
        if scale_by_std:
            a = a / (vals.std() + eps)
        adv[rows[best]] = a
    return adv.to(rewards.dtype)


@dataclass(frozen=True, kw_only=True)
class GRPOPassKConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    scale_by_std: bool = True
    """Divide the margin by the group std (verl ``norm_adv_by_std_in_grpo``)."""


@register
class GRPOPassK(Algorithm):
    name = "grpo_passk"
    summary = "Only each group's best sample gets an advantage, (R_max − R_second)/std; PPO clip, token-mean, no KL."
    citation = ("Tang et al. 2025, Optimizing Language Models for Inference Time Objectives using Reinforcement "
                "Learning, arXiv:2503.19595")
    fidelity = "code"
    switches = ("scale_by_std",)
    group_relative = True
    _ZERO = ("live, but on the contract tests' batch every group has two or more top rewards, so every pass@k "
             "advantage (and the loss) is 0 there; checked in tests/algorithms/test_grpo_passk.py")
    inert = {"clip_eps_low": _ZERO, "clip_eps_high": _ZERO, "scale_by_std": _ZERO}
    Config = GRPOPassKConfig
    cfg: GRPOPassKConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = passk_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high)
