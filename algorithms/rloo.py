"""RLOO — REINFORCE Leave-One-Out (Ahmadian et al. 2024; estimator: Kool et al. 2019).

Advantage: ``Â_i = R_i − (1/(G−1)) Σ_{j≠i} R_j = G/(G−1)·(R_i − mean_G R)``, broadcast to every
token of y_i (needs G ≥ 2). ``R_i`` includes the KL penalty when ``kl_where = reward``.

Two modes (switch ``mode``):
  * ``verl`` (default): RLOO advantage + PPO-clip token loss, token-mean, k1 KL in the reward
    with β = 0.001. The advantage matches verl 0.9.1's ``compute_rloo_outcome_advantage`` (which,
    unlike ours, leaves a singleton group's reward as its advantage); k1 (``kl_penalty: kl``)
    and β = 0.001 (``kl_ctrl.kl_coef``) are verl 0.9.1's defaults for the in-reward KL, which
    verl switches on with ``use_kl_in_reward``.
  * ``paper``: the completion is one action — on-policy REINFORCE ``−Â_i·log π(y_i|x)``, no
    ratio or clip, the token log-probs summed per sequence (aggregation ``seq-mean-token-sum``),
    and the sequence-level KL penalty ``β·Σ_t log(π/π_ref)`` in the reward.

Differs from GRPO by: 1. leave-one-out mean instead of the z-score; 2. KL in the reward.
Fidelity: ``code``. Citation: Ahmadian et al. 2024, arXiv 2402.14740.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.reinforce import policy_gradient_loss
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_mean_std
from rlsuite.suite.types import Batch, Forward


def leave_one_out_advantage(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``R_i − mean_{j≠i} R_j`` per sample; 0 for a singleton group. Shapes: [B], [B] → [B]."""
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    r = rewards.to(torch.float64)  # float64 like group_mean_std; an all-equal group gives exactly 0
    n = counts[inv].to(r.dtype)
    mean = group_mean_std(r, group_ids)[0]
    return torch.where(n > 1, n / (n - 1).clamp(min=1) * (r - mean), torch.zeros_like(r)).to(rewards.dtype)


@dataclass(frozen=True, kw_only=True)
class RLOOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    mode: Literal["verl", "paper"] = "verl"
    """``verl``: PPO-clip token loss; ``paper``: sequence-level REINFORCE without clipping."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio, 1 − ε_low (verl mode)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio, 1 + ε_high (verl mode)."""
    kl_coef: float = 0.001
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    kl_where: Literal["loss", "reward"] = "reward"


@register
class RLOO(Algorithm):
    name = "rloo"
    summary = "Leave-one-out group baseline; PPO-clip token loss (verl) or sequence REINFORCE (paper)."
    citation = ("Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization for "
                "Learning from Human Feedback in LLMs, arXiv:2402.14740")
    fidelity = "code"
    switches = ("mode", "kl_coef")
    group_relative = True
    tune_knob = ("clip_eps_low+clip_eps_high", (0.1, 0.2))
    Config = RLOOConfig
    cfg: RLOOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | ({"old_logp"} if self.cfg.mode == "verl" else frozenset())

    @property
    def aggregation(self) -> AggMode:
        return "seq-mean-token-sum" if self.cfg.mode == "paper" else self.cfg.aggregation

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        return AdvOut(adv=broadcast_to_tokens(leave_one_out_advantage(batch.rewards, batch.group_id), batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        if self.cfg.mode == "paper":
            return policy_gradient_loss(fwd.logp, batch.adv, batch.loss_mask), {}
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, self.cfg.clip_eps_low,
                                 self.cfg.clip_eps_high)
