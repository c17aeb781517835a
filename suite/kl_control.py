"""The KL term to the reference and its coefficient β (the algorithm's ``kl_coef``, ``kl_where``,
``kl_estimator``, ``kl_target``, ``kl_horizon``).

* ``kl_where=reward``: −β·k(π_old, π_ref) on every policy token, computed once in the scoring pass
  (:func:`reward_kl`; the trainer folds it into the token rewards);
* ``kl_where=loss``: β·Σ w·k(π, π_ref)·mask added to the aggregated loss of each micro-batch
  (:func:`loss_term`), each token's k weighted by ``π_θ/π_old`` with ``loss.kl_is_weight``;
* adaptive β (``kl_target``): after each step, the proportional controller of Ziegler et al.
  (2019, arXiv 1909.08593) moves β toward the target, ``β ← β·(1 + clip(KL/target − 1, ±0.2)·B/horizon)``
  with KL the step's mean per-sequence KL at π_old (the reading :func:`reward_kl` returns) and B
  the batch's rows (:func:`adapt`). β lives in :attr:`rlsuite.suite.train_state.TrainState.kl_coef`
  (checkpointed).

k is the configured estimator (:func:`rlsuite.suite.step_metrics.s_kl`: k1, k2 or k3).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from rlsuite.suite.step_metrics import s_kl


def reward_kl(cfg, old_logp: Optional[Tensor], ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, Optional[float]]:
    """The KL at π_old, computed once where the reward or the controller reads it (``old_logp`` may
    be None where neither does: π_old then comes from the update's own forward).

    Shapes: old_logp, ref_logp, mask [B, T] → (the per-token KL the reward subtracts [B, T]:
    zeros unless ``kl_where=reward``; the controller's reading, the mean over rows of the
    per-token mean KL, or None without ``kl_target``)."""
    kl_tok = torch.zeros_like(mask)
    reading = None
    if cfg.kl_where == "reward" or cfg.kl_target is not None:
        kl_old = s_kl(cfg, old_logp, ref_logp) * mask
        if cfg.kl_where == "reward":
            kl_tok = kl_old
        if cfg.kl_target is not None:
            reading = float((kl_old.sum(-1) / mask.sum(-1).clamp(min=1)).mean())
    return kl_tok, reading


def loss_term(cfg, beta: float, w: Tensor, logp: Tensor, ref_logp: Optional[Tensor],
              loss_mask: Tensor, old_logp: Optional[Tensor] = None) -> Optional[Tensor]:
    """β·Σ w·k(π, π_ref)·mask, the loss's KL term (a scalar), or None (no reference, or the KL is in
    the reward). With ``old_logp`` (``loss.kl_is_weight``) each token's k is multiplied by the ratio
    ``π_θ/π_old = exp(logp − old_logp)``, differentiable through ``logp`` (DeepSeek-V3.2's unbiased
    KL estimate; TRL 1.16.0 ``use_bias_correction_kl``: ``per_token_kl * coef_1`` with its
    token-level ``coef_1``). Shapes: w (the aggregation weights), logp, ref_logp, loss_mask,
    old_logp [B, T]."""
    if ref_logp is None or cfg.kl_where != "loss":
        return None
    k = s_kl(cfg, logp, ref_logp)
    if old_logp is not None:
        k = k * torch.exp((logp - old_logp.detach()) * loss_mask)
    return beta * (w * k * loss_mask).sum()


def adapt(beta: float, reading: Optional[float], cfg, batch_size: int) -> float:
    """β for the next step: moved toward ``cfg.kl_target`` by the step's ``reading`` (unchanged
    without a target or a reading)."""
    if cfg.kl_target is None or reading is None:
        return beta
    err = min(max(reading / cfg.kl_target - 1.0, -0.2), 0.2)
    return beta * (1.0 + err * batch_size / cfg.kl_horizon)


__all__ = ["reward_kl", "loss_term", "adapt"]
