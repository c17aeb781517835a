"""LUSPO — Length-Unbiased Sequence Policy Optimization (Liu et al. 2026, arXiv 2602.05261), as TRL
1.16.0's ``loss_type="luspo"``.

GSPO's clipped sequence objective with each sequence's loss scaled by its length, which removes
GSPO's bias toward short responses:

    s_i = exp((1/|y_i|) Σ_t log r_it),   ℓ_i = −min(s_i·Â_i, clip(s_i, 1−ε, 1+ε_high)·Â_i)
    L = (1/N) Σ_i |y_i|·ℓ_i

Every token of y_i carries ℓ_i, so the suite's ``seq-mean-token-sum`` aggregation gives exactly
TRL's ``(per_token_loss·mask).sum(-1).mean()`` (TRL: per micro-batch, divided by the accumulation
steps; the same when an optimizer step is one micro-batch or the micro-batches are equal-sized).

Differs from GSPO (``gspo.py``) by:
  1. The sequence loss is multiplied by |y_i| (aggregation ``seq-mean-token-sum``).
  2. TRL's defaults: ε = ε_high = 0.2 (TRL's ``epsilon`` default for every loss type), no KL,
     TRL's group advantage (std offset 1e-4, ``bnpo.py``); no clamp of the sequence log-ratio
     (verl's GSPO clamps it at 10).
  3. ``importance_sampling_level``: ``sequence`` (default) is the paper's setup, which TRL requires
     for luspo in a warning; ``token`` (TRL's config default) takes the per-token ratio and clip
     (then the loss is GRPO's token surrogate summed per sequence).

Metrics: ``stats/clip_frac*`` count the tokens of clipped sequences (low: s < 1−ε with Â < 0;
high: s > 1+ε_high with Â > 0; TRL's ``clip_ratio/*`` count sequences), ``stats/approx_kl``,
``stats/ratio_*`` the sequence ratios.

Fidelity: ``code`` — TRL 1.16.0 ``GRPOTrainer._compute_loss`` (``luspo``); loss and gradient checked
on the same inputs (``tests/algorithms/test_luspo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.bnpo import trl_group_advantage
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.algorithms.gspo import sequence_log_ratio
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, clipped_surrogate, masked_mean
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class LUSPOConfig(GRPOConfig):
    clip_eps_low: float = 0.2
    """ε of the clipped ratio (TRL ``epsilon``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (TRL ``epsilon_high``; None there means ε)."""
    importance_sampling_level: Literal["sequence", "token"] = "sequence"
    """Ratio per sequence (length-normalised geometric mean, the paper's) or per token (TRL's default)."""
    aggregation: AggMode = "seq-mean-token-sum"
    kl_coef: float = 0.0


@register
class LUSPO(GRPO):
    name = "luspo"
    summary = "GSPO's clipped sequence ratio with each sequence's loss scaled by its length (TRL luspo)."
    citation = ("Liu et al. 2026, Length-Unbiased Sequence Policy Optimization: Revealing and Controlling "
                "Response Length Variation in RLVR, arXiv:2602.05261; TRL 1.16.0 GRPOTrainer (loss_type luspo)")
    fidelity = "code"
    switches = ("clip_eps_low", "clip_eps_high", "importance_sampling_level")
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    Config = LUSPOConfig
    cfg: LUSPOConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        return trl_group_advantage(batch, self.cfg.scale_by_std)

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask, c = batch.loss_mask, self.cfg
        if c.importance_sampling_level == "token":
            return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, mask, c.clip_eps_low, c.clip_eps_high)
        s = torch.exp(sequence_log_ratio(fwd.logp, batch.old_logp, mask))  # [B]
        adv = (batch.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # Â_i
        l1, l2 = -adv * s, -adv * s.clamp(1 - c.clip_eps_low, 1 + c.clip_eps_high)
        with torch.no_grad():
            seq = lambda x: x.float()[:, None].expand_as(mask)  # noqa: E731  (a sequence flag on its tokens)
            metrics = {"stats/clip_frac": masked_mean(seq(l2 > l1), mask),
                       "stats/clip_frac_low": masked_mean(seq((s < 1 - c.clip_eps_low) & (adv < 0)), mask),
                       "stats/clip_frac_high": masked_mean(seq((s > 1 + c.clip_eps_high) & (adv > 0)), mask),
                       "stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "stats/ratio_mean": s.mean(), "stats/ratio_min": s.min(), "stats/ratio_max": s.max()}
        return torch.maximum(l1, l2)[:, None] * mask, metrics
