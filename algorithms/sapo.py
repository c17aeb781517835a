"""SAPO — Soft Adaptive Policy Optimization (Gao et al. 2025, Qwen, arXiv 2511.20347), as verl 0.9.1's
policy loss ``sapo`` (TRL 1.16.0's ``loss_type="sapo"`` computes the same).

Objective (maximised): the hard clip is replaced by a smooth, temperature-controlled gate of the
token ratio ``r_it = π_θ/π_old``:

    f_τ(r) = σ(τ·(r − 1)) · 4/τ,   τ_it = τ_pos if Â_it > 0 else τ_neg
    J = (1/N) Σ_i (1/|y_i|) Σ_t f_{τ_it}(r_it) · Â_it

``f_τ(1) = 2/τ`` and ``f_τ'(1) = 1``, so at π_θ = π_old the gradient is the plain policy gradient;
away from it the gradient weight ``σ'(τ(r−1))·4·r`` decays smoothly instead of dropping to 0.

Differs from GRPO (``grpo.py``) by:
  1. The soft gate instead of ``min(r·Â, clip(r)·Â)``; no clip range (τ_pos = 1.0, τ_neg = 1.05:
     verl's ``actor.tau_pos`` / ``tau_neg`` defaults, TRL's ``sapo_temperature_pos/neg``, the
     paper's Qwen3-30B-A3B values).
  2. No KL (verl's and TRL's defaults). Aggregation ``seq-mean-token-mean``: verl hard-codes it for
     SAPO (whatever ``loss_agg_mode``), TRL uses its ``grpo`` normaliser.
  3. As verl, the log-ratio is clamped to ±20 before ``exp`` (TRL does not clamp).

Metrics: ``stats/approx_kl`` (verl's ``ppo_kl``), ``stats/ratio_mean``, ``algo/sapo/gate_mean``
(the mean f_τ(r)); SAPO clips nothing (verl reports its clip fractions as 0).

Fidelity: ``code`` — verl 0.9.1 ``compute_policy_loss_sapo`` and TRL 1.16.0
``GRPOTrainer._compute_loss`` (``sapo``); loss and gradient checked against both on the same
inputs (``tests/algorithms/test_sapo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AlgoConfig, register
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, masked_mean
from rlsuite.suite.types import Batch, Forward


def sapo_gate(logp, old_logp, adv, tau_pos: float, tau_neg: float):
    """``(f_τ(r) [B, T], r [B, T])``: SAPO's soft gate of the token ratio, τ by the sign of Â."""
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau), ratio


@dataclass(frozen=True, kw_only=True)
class SAPOConfig(AlgoConfig):
    ranges = {"tau_pos": "(0, inf)", "tau_neg": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    tau_pos: float = 1.0
    """Gate temperature τ for tokens with Â > 0 (verl ``actor.tau_pos``)."""
    tau_neg: float = 1.05
    """Gate temperature τ for tokens with Â ≤ 0 (verl ``actor.tau_neg``)."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std (GRPO z-score)."""
    aggregation: AggMode = "seq-mean-token-mean"


@register
class SAPO(GRPO):
    name = "sapo"
    summary = "Smooth sigmoid gate of the token ratio (temperatures by advantage sign) instead of the hard clip."
    citation = ("Gao et al. 2025, Soft Adaptive Policy Optimization, arXiv:2511.20347; "
                "verl 0.9.1 compute_policy_loss_sapo; TRL 1.16.0 GRPOTrainer (loss_type sapo)")
    fidelity = "code"
    switches = ("tau_pos", "tau_neg")
    tune_knob = None
    Config = SAPOConfig
    cfg: SAPOConfig

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask = batch.loss_mask
        gate, ratio = sapo_gate(fwd.logp, batch.old_logp, batch.adv, self.cfg.tau_pos, self.cfg.tau_neg)
        with torch.no_grad():
            metrics = {"stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "stats/ratio_mean": masked_mean(ratio, mask), "algo/sapo/gate_mean": masked_mean(gate, mask)}
        return -gate * batch.adv * mask, metrics
