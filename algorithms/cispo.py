"""CISPO — Clipped IS-weight Policy Optimization (MiniMax 2025, MiniMax-M1, arXiv 2506.13585).

Objective (token-mean over the batch, Eq. 4):
``J = (1/Σ_i|y_i|) Σ_i Σ_t sg(r̂_it)·Â_it·log π_θ(y_it|s_it)``, ``r̂ = clip(r, 1 − ε^IS_low, 1 + ε^IS_high)``.

Differs from GRPO/PPO by: 1. the clip acts on a *stop-gradient* importance weight multiplying
log π, so every token keeps its gradient (no token is dropped by the clip); 2. one-sided in
the paper: no lower bound (``eps_is_low: null``; verl 0.9.1's ``cispo`` loss always clamps to
[1 − clip_ratio_low, 1 + clip_ratio_high], so any clip_ratio_low ≥ 1 removes the lower bound);
3. token-mean, no KL. ``stats/clip_frac`` = share of tokens whose weight was truncated.

Fidelity: ``code`` — verl 0.9.1's ``compute_policy_loss_cispo`` (the same per-token
``−sg(clip(r))·Â·log π``); ms-swift docs. ε^IS_high is tuned in the paper; the default 0.2
(cap 1.2) equals verl 0.9.1's default ``clip_ratio_high``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, broadcast_to_tokens, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward


def cispo_loss(logp, old_logp, adv, mask, eps_low: Optional[float], eps_high: float):
    """``−sg(clip(r, 1−ε_low, 1+ε_high))·Â·log π`` per token. Shapes: [B, T] → ([B, T], metrics)."""
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0)).detach()
    w = ratio.clamp(max=1 + eps_high) if eps_low is None else ratio.clamp(1 - eps_low, 1 + eps_high)
    with torch.no_grad():
        low = (ratio < 1 - eps_low) if eps_low is not None else torch.zeros_like(ratio, dtype=torch.bool)
        metrics = {"stats/clip_frac": masked_mean((w != ratio).float(), mask),
                   "stats/clip_frac_high": masked_mean((ratio > 1 + eps_high).float(), mask),
                   "stats/clip_frac_low": masked_mean(low.float(), mask),
                   "stats/approx_kl": approx_kl(logp, old_logp, mask),
                   "stats/ratio_mean": masked_mean(ratio, mask)}
    return -w * adv * logp * mask, metrics


@dataclass(frozen=True, kw_only=True)
class CISPOConfig(AlgoConfig):
    ranges = {"eps_is_low": "[0, 1]", "eps_is_high": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    eps_is_low: Optional[float] = None
    """Lower IS truncation 1 − ε_low (null = none, the paper's setting)."""
    eps_is_high: float = 0.2
    """Upper IS truncation 1 + ε_high (tuned in the paper; 0.2 = verl 0.9.1's default clip_ratio_high)."""
    scale_by_std: bool = True
    """GRPO z-score advantage (False: mean only)."""
    aggregation: AggMode = "token-mean"


@register
class CISPO(Algorithm):
    name = "cispo"
    summary = "Stop-gradient truncated IS weight on log π: every token keeps its gradient."
    citation = ("MiniMax 2025, MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning "
                "Attention, arXiv:2506.13585")
    fidelity = "code"
    switches = ("eps_is_low", "eps_is_high")
    group_relative = True
    tune_knob = ("eps_is_high", (0.2, 1.0, 4.0))
    Config = CISPOConfig
    cfg: CISPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return cispo_loss(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, self.cfg.eps_is_low,
                          self.cfg.eps_is_high)
