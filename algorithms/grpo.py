"""GRPO — Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath).

Objective (maximised; Eq. 3 of arXiv 2402.03300):

    J = E[ (1/G) Σ_i (1/|y_i|) Σ_t { min(r_it·Â_i, clip(r_it, 1−ε_low, 1+ε_high)·Â_i) − β·D_it } ]

with ``r_it = π_θ/π_old``, the outcome advantage ``Â_i = (R_i − mean_G R)/(std_G R + 1e-6)``
broadcast to every token of ``y_i`` (§4.1.2), and ``D_it`` the k3 estimator of
KL(π_θ‖π_ref) on the sampled token, applied as a *loss* term by the shared trainer.

Differs from PPO (``algorithms/ppo.py``) by:
  1. No critic: the baseline is the group mean, scaled by the group std (switch
     ``scale_by_std``; off gives the unnormalised arm of std-normalisation studies).
  2. Aggregation ``seq-mean-token-mean`` (the paper's 1/|y_i| then 1/G); verl 0.9.1 defaults to
     ``token-mean`` — switch ``aggregation``.
  3. KL to the reference as a k3 loss term with β = 0.04 instead of a KL penalty in the reward.

Fidelity: ``code`` — checked against verl 0.9.1 ``compute_grpo_outcome_advantage`` (unbiased
std, ε 1e-6, singleton group → mean 0, std 1). Paper defaults: ε 0.2, β 0.04, G 64, LR 1e-6;
G/LR/batch come from the task preset here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class GRPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (DAPO's clip-higher raises it)."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std."""
    aggregation: AggMode = "seq-mean-token-mean"
    kl_coef: float = 0.04


@register
class GRPO(Algorithm):
    name = "grpo"
    summary = "Group-normalised outcome advantage with the PPO clipped surrogate and a k3 KL loss."
    citation = ("Shao et al. 2024, DeepSeekMath: Pushing the Limits of Mathematical Reasoning "
                "in Open Language Models, arXiv:2402.03300")
    fidelity = "code"
    switches = ("scale_by_std", "aggregation", "kl_coef")
    group_relative = True
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    Config = GRPOConfig
    cfg: GRPOConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)  # [B]
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))  # [B, T]

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high)

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}
