"""RGRA — REINFORCE with Group Relative Advantage: GRPO without the ratio and the clip.

Carrino, Sassella, Brunello, Toschi, Carman 2026, "Are complicated loss functions necessary for
teaching LLMs to reason?", arXiv 2603.18756. Per token (minimised):

    ℓ_it = −Â_i · log π_θ(y_it|s_it) + β·k3_it,      Â_i = (R_i − mean_G R) / (std_G R + 1e-6),

aggregated like GRPO (1/|y_i| per sequence, then the mean over sequences). A cheap ablation arm
of GRPO: the same advantage and KL term, the plain policy gradient in place of the clipped
surrogate, so it needs no π_old scoring pass and with several epochs or stale samples the update
is simply off-policy (no correction).

Differs from GRPO (``algorithms/grpo.py``) by: 1. no importance ratio π_θ/π_old; 2. no clip.
Everything else — the group z-score (switch ``scale_by_std``), β = 0.04 k3 KL loss,
seq-mean-token-mean — is GRPO's. On-policy with one update per batch its gradient equals GRPO's.

Fidelity: ``abstract``. [ASSUMPTION]s: the KL term and its β, the std scaling and the aggregation
are taken over from GRPO (the abstract says RGRA "retains group-relative advantage estimation but
removes PPO-style clipping and policy ratio terms"; summaries say it keeps the KL regularisation);
the paper's own β, learning rate and group size were not read.

Source of the defaults (search tools, 2026-12-06): the arXiv abstract (2603.18756v1, 19 Mar 2026;
also the ICLR 2026 submission on OpenReview) and third-party summaries were read; the full text and
any code were not reachable. Agree: group-relative advantage kept, ratio and clip removed, KL
regularisation kept (summaries); the paper's ablation that trains on above-baseline samples only
limits learning (this suite's ``raft_pp`` with ``advantage = grpo`` is that arm). Unverified: β,
aggregation and std scaling (GRPO's here).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.reinforce import policy_gradient_loss
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class RGRAConfig(AlgoConfig):
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std (GRPO's advantage)."""
    aggregation: AggMode = "seq-mean-token-mean"
    kl_coef: float = 0.04


@register
class RGRA(Algorithm):
    name = "rgra"
    summary = "GRPO's group z-score with the plain policy gradient −Â·log π: no ratio, no clip (ablation arm)."
    citation = ("Carrino, Sassella, Brunello, Toschi, Carman 2026, Are complicated loss functions necessary for "
                "teaching LLMs to reason?, arXiv:2603.18756")
    fidelity = "abstract"
    assumptions = ("KL term (k3 loss, β = 0.04), std scaling and seq-mean-token-mean taken from GRPO; the paper's "
                   "own values were not read",)
    switches = ("scale_by_std", "kl_coef")
    group_relative = True
    Config = RGRAConfig
    cfg: RGRAConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)  # [B]
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return policy_gradient_loss(fwd.logp, batch.adv, batch.loss_mask), {}
