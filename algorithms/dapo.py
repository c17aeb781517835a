"""DAPO — Decoupled clip and Dynamic sAmpling Policy Optimization (Yu et al. 2025, arXiv 2503.14476).

Objective (token-mean, no KL):
``J = (1/Σ_i|y_i|) Σ_i Σ_t min(r_it·Â_i, clip(r_it, 1−ε_low, 1+ε_high)·Â_i)`` s.t. ``0 < #correct < G``,
with Â the GRPO z-score.

Differs from GRPO by:
  1. Clip-higher: ε_low = 0.2, ε_high = 0.28.
  2. Token-mean aggregation (1/Σ|y_i| over the batch), no KL.
  3. Dynamic sampling: groups whose scores are all equal are dropped (``filter``) and the
     trainer's refill loop draws more batches until the step is full (bounded by
     ``rollout.max_refill_tries``; discarded samples are charged to the budget). The trainer
     logs ``filter/kept_frac`` (kept share) and ``filter/rollout_batches`` (refills + 1). Every
     entry can filter so with ``rollout.filter_zero_variance=drop`` (``suite/curriculum.py``; it
     keeps singleton groups, which this filter drops).
  4. Overlong reward shaping with lengths relative to ``max_new_tokens``: with
     ``L_max = max_new_tokens``, ``L_cache = overlong_buffer · L_max`` and
     ``L_exp = L_max − L_cache``, add ``min(−(|y| − L_exp)/L_cache · penalty, 0)`` (the form of
     verl 0.9.1's DAPO reward manager; −1 at L_max). The ablated alternative
     ``overlong = filter`` masks truncated samples out of the loss.

Fidelity: ``code`` — paper; the overlong shaping checked against verl 0.9.1
(``verl/experimental/reward_loop/reward_manager/dapo.py``). Paper defaults: L_max 20480 with
L_cache 4096 (``overlong_buffer`` = 0.2), LR 1e-6 with 20-step warm-up (preset), 512 prompts × 16.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, Group, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import group_all_equal, masked_mean
from rlsuite.suite.types import Batch, Forward


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_frac: float, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment ``min(−(|y| − L_exp)/L_cache·factor, 0)``. [G] → [G]."""
    cache = max(buffer_frac * max_len, 1e-9)
    expected = max_len - cache
    return torch.clamp(-(lengths - expected) / cache * factor, max=0.0)


@dataclass(frozen=True, kw_only=True)
class DAPOConfig(GRPOConfig):
    ranges = {"overlong_buffer": "(0, 1)", "overlong_penalty": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_high: float = 0.28
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.0
    dynamic_sampling: bool = True
    """Drop groups whose scores are all equal and refill the step."""
    overlong: Literal["shaping", "filter", "none"] = "shaping"
    """Soft overlong penalty in the reward, or mask truncated samples out of the loss."""
    overlong_buffer: float = 0.2
    """L_cache as a fraction of max_new_tokens (paper: 4096 / 20480)."""
    overlong_penalty: float = 1.0
    """Penalty factor of the shaping."""


@register
class DAPO(GRPO):
    name = "dapo"
    summary = "GRPO with clip-higher, token-mean loss, dynamic sampling and overlong reward shaping."
    citation = "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale, arXiv:2503.14476"
    fidelity = "code"
    switches = ("clip_eps_high", "dynamic_sampling", "overlong")
    tune_knob = ("clip_eps_high", (0.24, 0.28, 0.32))
    Config = DAPOConfig
    cfg: DAPOConfig

    def rewards(self, group: Group, ctx: Context) -> torch.Tensor:
        if self.cfg.overlong != "shaping" or group.lengths is None:
            return group.scores
        return group.scores + overlong_penalty(group.lengths.float(), ctx.max_new_tokens, self.cfg.overlong_buffer,
                                               self.cfg.overlong_penalty)

    def filter(self, batch: Batch, ctx: Context) -> Optional[torch.Tensor]:
        if not self.cfg.dynamic_sampling:
            return None
        return ~group_all_equal(batch.scores, batch.group_id)  # (a singleton group too: its scores are all equal)

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        out = super().advantages(batch, ctx)
        metrics = {"algo/dapo/overlong_frac": float(batch.truncated.float().mean())}
        if self.cfg.overlong != "filter":
            return dataclasses.replace(out, metrics=metrics)
        keep = (~batch.truncated.to(batch.loss_mask.device)).float()[:, None]  # overlong filtering
        return AdvOut(adv=out.adv * keep, metrics=metrics, loss_mask=batch.loss_mask * keep)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        loss, metrics = super().loss(fwd, batch, ctx)
        metrics["algo/dapo/gen_prob_mean"] = masked_mean(fwd.logp.detach().exp(), batch.loss_mask)
        return loss, metrics
