"""GDPO — Group reward-Decoupled normalization Policy Optimization (Liu et al. 2026, arXiv 2601.05242).

GDPO z-scores each of K reward components separately within the group, sums them with weights,
and whitens the sum over all policy tokens of the batch:

    A_k,i = (r_k,i − mean_G r_k) / (std_G r_k + 1e-6),   Â_it = whiten_batch(Σ_k w_k·A_k,i)_t,

``whiten_batch(x) = (x − mean)/sqrt(var + 1e-8)`` over the batch's policy tokens (token-weighted
mean, Bessel-corrected variance: ``rlsuite.suite.ops.masked_whiten``). The suite's tasks give one scalar
reward, so here K = 1 (w = 1): GDPO reduces to **GRPO's z-score followed by batch whitening** —
not GRPO itself: the whitening shifts every advantage by the token-weighted batch mean of the
z-scores (longer responses weigh more) and rescales by their token std, so a group of equal
rewards gets ``−mean/std`` of the batch (the same value on all its tokens) instead of 0, and
exactly 0 only when every group of the batch is equal. Loss: PPO clipped surrogate (ε 0.2 both
sides, dual clip c = 3 for Â < 0: verl's ``clip_ratio_c``), token-mean, no KL (verl 0.9.1
defaults; its GDPO example launcher sets no KL either).

Differs from GRPO by: 1. batch whitening of the z-scores; 2. token-mean, no KL.

Fidelity: ``code`` — verl 0.9.1 ``compute_gdpo_outcome_advantage`` with one reward component
(its ``score_list = [token_level_rewards]`` path, the same numbers as one ``gdpo_reward_keys``
entry holding the task score); values in ``tests/algorithms/test_gdpo.py``. The
decoupled per-component normalisation, GDPO's point, needs several reward components, which the
suite's tasks do not report. [ASSUMPTION] the one component is the suite's shaped reward
(``batch.rewards``, which holds the in-reward KL when ``kl_where = reward``); verl reads each
named component's raw score, so there an in-reward KL never reaches a GDPO advantage (the two
agree at the default, no KL). Statistics in float64; an all-equal batch gets exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_whiten
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class GDPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip bound c for Â < 0 (verl ``clip_ratio_c``, always on in its vanilla policy loss); None = off."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std before the whitening (verl ``norm_adv_by_std_in_grpo``)."""


    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")


@register
class GDPO(Algorithm):
    name = "gdpo"
    summary = "One-component GDPO: GRPO z-score, then whitened over the batch's tokens; PPO clip, token-mean, no KL."
    citation = ("Liu et al. 2026, GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward "
                "RL Optimization, arXiv:2601.05242")
    fidelity = "code"
    assumptions = (
        "One reward component (the suite's shaped reward, in-reward KL included when configured); verl reads "
        "each component's raw score",
    )
    switches = ("scale_by_std",)
    group_relative = True
    Config = GDPOConfig
    cfg: GDPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        z = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)  # [B]
        return AdvOut(adv=masked_whiten(broadcast_to_tokens(z, batch.loss_mask), batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)
