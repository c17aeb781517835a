"""VESPO — Variational Sequence-Level Soft Policy Optimization (Shen et al. 2026, arXiv 2602.10693), as
TRL 1.16.0's ``loss_type="vespo"``.

A smooth, asymmetric Gamma-shaped weight of the *unnormalised* sequence importance ratio replaces
the clip; the weight is detached and multiplies REINFORCE:

    log w_i = clip(Σ_t clip(log r_it, −20, 20), log 1e-8, 20)        (no length normalisation)
    φ(w_i)  = exp(λ + k·log w_i − λ·w_i) = e^λ·w^k·e^{−λw}   (φ(1) = 1),  (k, λ) = (k_pos, λ_pos) if Â_i ≥ 0
    ℓ_it    = −sg[φ(w_i)]·Â_i·log π_θ(y_it)

with λ clamped at ≥ 1e-4 and a non-finite φ set to 0, as TRL. At π_θ = π_old, w = φ = 1: the plain
policy gradient. φ peaks at w = k/λ and decays for ratios far from it on either side.

Differs from GRPO (``grpo.py``) by:
  1. The detached sequence weight φ on ``log π`` instead of the clipped token ratio (no clip).
  2. TRL's defaults: k_pos = 2, λ_pos = 3, k_neg = 3, λ_neg = 2; no KL; TRL's group advantage
     (std offset 1e-4, ``bnpo.py``); token-mean aggregation (TRL normalises vespo by the tokens of
     the generation batch rescaled to one accumulation window: the suite's token-mean when an
     optimizer step is one generation batch).
  3. TRL folds its vLLM importance-sampling correction (π_old/π_sampler per token) into log w; the
     suite's weight is π_θ/π_old only (``loss.is_correction`` multiplies the loss instead).

Metrics: ``algo/vespo/phi_seq_mean`` (TRL's ``vespo/phi_seq_mean``: the mean φ over sequences),
``stats/approx_kl``.

Fidelity: ``code`` — TRL 1.16.0 ``GRPOTrainer.get_gamma_weights`` and ``_compute_loss`` (``vespo``);
loss and gradient checked on the same inputs (``tests/algorithms/test_vespo.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Context, register
from rlsuite.algorithms.bnpo import trl_group_advantage
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl
from rlsuite.suite.types import Batch, Forward


@torch.no_grad()
def gamma_weight(logp, old_logp, adv_seq, mask, k_pos: float, lam_pos: float, k_neg: float, lam_neg: float):
    """VESPO's detached ``φ(w_i)`` per sequence. Shapes: logp, old_logp, mask [B, T]; adv_seq [B] → [B]."""
    seq = ((logp - old_logp).clamp(-20.0, 20.0) * mask).sum(-1)
    log_w = seq.clamp(math.log(1e-8), 20.0)
    pos = adv_seq >= 0
    k = torch.where(pos, torch.full_like(log_w, k_pos), torch.full_like(log_w, k_neg))
    lam = torch.where(pos, torch.full_like(log_w, lam_pos), torch.full_like(log_w, lam_neg)).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@dataclass(frozen=True, kw_only=True)
class VESPOConfig(AlgoConfig):
    ranges = {"k_pos": "[0, inf)", "lambda_pos": "[0, inf)", "k_neg": "[0, inf)", "lambda_neg": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    k_pos: float = 2.0
    """Power k of φ for Â ≥ 0: down-weights sequences with w < 1 (TRL ``vespo_k_pos``)."""
    lambda_pos: float = 3.0
    """Decay λ of φ for Â ≥ 0: down-weights sequences with w > 1 (TRL ``vespo_lambda_pos``)."""
    k_neg: float = 3.0
    """Power k of φ for Â < 0 (TRL ``vespo_k_neg``)."""
    lambda_neg: float = 2.0
    """Decay λ of φ for Â < 0 (TRL ``vespo_lambda_neg``)."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std (TRL ``scale_rewards="group"``)."""
    aggregation: AggMode = "token-mean"


@register
class VESPO(GRPO):
    name = "vespo"
    summary = "Detached Gamma-kernel weight of the unnormalised sequence ratio on REINFORCE, no clip (TRL vespo)."
    citation = ("Shen et al. 2026, VESPO: Variational Sequence-Level Soft Policy Optimization for Stable "
                "Off-Policy LLM Training, arXiv:2602.10693; TRL 1.16.0 GRPOTrainer (loss_type vespo)")
    fidelity = "code"
    switches = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")
    tune_knob = None
    Config = VESPOConfig
    cfg: VESPOConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        return trl_group_advantage(batch, self.cfg.scale_by_std)

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask, c = batch.loss_mask, self.cfg
        adv_seq = (batch.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # Â_i (constant over tokens)
        phi = gamma_weight(fwd.logp, batch.old_logp, adv_seq, mask, c.k_pos, c.lambda_pos, c.k_neg, c.lambda_neg)
        metrics = {"algo/vespo/phi_seq_mean": phi.mean(), "stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask)}
        return -phi[:, None] * batch.adv * fwd.logp * mask, metrics
