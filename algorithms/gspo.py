"""GSPO — Group Sequence Policy Optimization (Zheng et al. 2025, Qwen, arXiv 2507.18071).

Sequence ratio (length-normalised geometric mean, Eq. 7):
``s_i = (π_θ(y_i|x)/π_old(y_i|x))^{1/|y_i|} = exp((1/|y_i|) Σ_t log r_it)``.
Objective: ``J = (1/G) Σ_i min(s_i·Â_i, clip(s_i, 1−ε_l, 1+ε_r)·Â_i)`` with Â the GRPO
z-score: clipping, rewarding and optimisation are all sequence-level. Every token of y_i
carries the same per-token loss, so ``seq-mean-token-mean`` aggregation yields exactly J.

GSPO-token (``gspo_token``, Eq. 13): ``s_it = sg[s_i]·π_θ(y_it)/sg[π_θ(y_it)]`` — the log-ratio is
``sg(mean_t log r) + log π − sg(log π)`` (clamped at ≤ 10, as verl 0.9.1), clipped per token; equal
to GSPO in value and gradient when Â_it = Â_i, and allows token-level advantages.

Differs from GRPO by: 1. the sequence-level ratio and clip; 2. ε_l = 3e-4, ε_r = 4e-4;
3. no KL. ``stats/clip_frac`` is the fraction of tokens in clipped sequences (the paper's
"fraction of clipped tokens", ~100× GRPO's).
Fidelity: ``code`` — verl 0.9.1 ``compute_policy_loss_gspo``; numbers from the HF rl-llm-wiki review.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.ops import approx_kl, clipped_surrogate, masked_mean
from rlsuite.suite.types import Batch, Forward


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(1/|y_i|) Σ_t (log π − log π_old)`` per sequence. Shapes: [B, T] → [B]."""
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


@dataclass(frozen=True, kw_only=True)
class GSPOConfig(GRPOConfig):
    clip_eps_low: float = 3e-4
    clip_eps_high: float = 4e-4
    kl_coef: float = 0.0


@register
class GSPO(GRPO):
    name = "gspo"
    summary = "Sequence-level length-normalised importance ratio with sequence-level clipping."
    citation = "Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071"
    fidelity = "code"
    switches = ("clip_eps_low", "clip_eps_high")
    tune_knob = ("clip_eps_high", (3e-4, 4e-4, 1e-3))
    Config = GSPOConfig
    cfg: GSPOConfig

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask = batch.loss_mask
        log_s = sequence_log_ratio(fwd.logp, batch.old_logp, mask).clamp(max=10.0)  # [B]
        s = torch.exp(log_s)
        adv = (batch.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # Â_i (constant over tokens)
        l1, l2 = -adv * s, -adv * s.clamp(1 - self.cfg.clip_eps_low, 1 + self.cfg.clip_eps_high)
        seq_loss = torch.maximum(l1, l2)  # [B]
        with torch.no_grad():
            clipped = (l2 > l1).float()[:, None].expand_as(mask)
            lo = ((s < 1 - self.cfg.clip_eps_low) & (adv < 0)).float()[:, None].expand_as(mask)
            hi = ((s > 1 + self.cfg.clip_eps_high) & (adv > 0)).float()[:, None].expand_as(mask)
            metrics = {"stats/clip_frac": masked_mean(clipped, mask),
                       "algo/gspo/seq_clip_frac": (l2 > l1).float().mean(),
                       "stats/clip_frac_low": masked_mean(lo, mask), "stats/clip_frac_high": masked_mean(hi, mask),
                       "stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "stats/ratio_mean": s.mean(), "stats/ratio_min": s.min(), "stats/ratio_max": s.max()}
        return seq_loss[:, None] * mask, metrics


@register
class GSPOToken(GSPO):
    name = "gspo_token"
    summary = "GSPO-token: the sequence ratio with a per-token gradient path, clipped per token."
    switches = ("clip_eps_low", "clip_eps_high")

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask = batch.loss_mask
        seq = sequence_log_ratio(fwd.logp, batch.old_logp, mask).detach()[:, None]
        log_ratio = (seq + fwd.logp - fwd.logp.detach()).clamp(max=10.0)
        # clipped_surrogate takes (logp, old_logp): pass the combined log-ratio against 0
        loss, metrics = clipped_surrogate(log_ratio, torch.zeros_like(log_ratio), batch.adv, mask,
                                          self.cfg.clip_eps_low, self.cfg.clip_eps_high)
        metrics["stats/approx_kl"] = approx_kl(fwd.logp, batch.old_logp, mask)  # per token, not of the combined ratio
        return loss, metrics
