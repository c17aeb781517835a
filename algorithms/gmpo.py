"""GMPO — Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv 2507.20673), as verl 0.9.1's
policy loss ``geo_mean``.

Objective (maximised): per sequence, the *geometric* mean of the token ratios, each clipped in log
space on the side the advantage sign makes binding, before the mean is taken:

    δ_it = log π_θ(y_it) − log π_old(y_it),   σ_i = sgn(Â_i)
    δ̃_it = σ_i · min(σ_i·δ_it, σ_i·clip(δ_it, −ε_low, ε_high))
    s_i  = exp( Σ_t m_it δ̃_it / (|y_i| + 1e-8) ),   J = (1/N) Σ_i s_i · Â_i

with ``Â_i = Σ_t m_it Â_it / (|y_i| + 1e-8)`` the GRPO z-score (verl supports sequence-level
advantages only). Every token of y_i carries the sequence loss ``−s_i·Â_i``, so the
``seq-mean-token-mean`` aggregation gives verl's plain mean over the sequences (verl ignores
``loss_agg_mode`` here; the suite's other modes weight the sequence loss by its length).

Differs from GRPO (``grpo.py``) by:
  1. The geometric mean of the clipped token ratios instead of the arithmetic mean of the token
     surrogates; the clip range is in log space: ratios clipped to ``(e^−ε_low, e^ε_high)``.
  2. No KL (verl's ``use_kl_loss`` default false), ε_low = ε_high = 0.2 (verl's
     ``actor.clip_ratio*`` defaults). The paper recommends the wider (e^−0.4, e^0.4): the tune grid.
  3. As verl, the log-ratio is not clamped to ±20 before ``exp``.

Metrics: ``stats/clip_frac_low`` / ``stats/clip_frac_high`` count the tokens whose clipped
log-ratio binds (δ < −ε_low with Â < 0; δ > ε_high with Â > 0), as ``rlsuite.suite.ops.clipped_surrogate``;
``stats/clip_frac`` their union; ``stats/approx_kl`` = verl's ``ppo_kl``; ``algo/gmpo/seq_ratio_*``
the sequence ratios s_i. verl's own definitions are logged beside them under its names:
``algo/gmpo/pg_clipfrac`` / ``algo/gmpo/pg_clipfrac_lower`` count every token outside the range
with Â > 0 / Â < 0, binding or not (verl 0.9.1 ``actor/pg_clipfrac`` / ``pg_clipfrac_lower``).

Fidelity: ``code`` — verl 0.9.1 ``compute_policy_loss_geo_mean``; loss and gradient checked on
the same inputs (``tests/algorithms/test_gmpo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, masked_mean
from rlsuite.suite.types import Batch, Forward


def geo_mean_ratio(logp, old_logp, adv, mask, eps_low: float, eps_high: float):
    """``(s [B], Â_i [B], δ [B, T])``: the clipped geometric-mean sequence ratio of verl's ``geo_mean``."""
    delta = logp - old_logp  # no ±20 clamp, as verl
    sgn = torch.sign(adv)
    # the clip binds only on the side the sign of Â makes binding
    clipped = sgn * torch.minimum(sgn * delta, sgn * delta.clamp(-eps_low, eps_high))
    n = mask.sum(-1) + 1e-8
    s = torch.exp((clipped * mask).sum(-1) / n)
    return s, (adv * mask).sum(-1) / n, delta


@dataclass(frozen=True, kw_only=True)
class GMPOConfig(GRPOConfig):
    ranges = {"clip_eps_low": "[0, inf)"}
    """ε_low is a log-space bound here (ratios ≥ e^−ε_low), so any ε_low ≥ 0 is valid."""
    clip_eps_low: float = 0.2
    """Lower log-space clip: δ ≥ −ε_low (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """Upper log-space clip: δ ≤ ε_high (verl ``clip_ratio_high``)."""
    aggregation: AggMode = "seq-mean-token-mean"
    kl_coef: float = 0.0


@register
class GMPO(GRPO):
    name = "gmpo"
    summary = "Geometric mean of the sign-aware, log-space clipped token ratios per sequence (verl geo_mean)."
    citation = ("Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv:2507.20673; "
                "verl 0.9.1 compute_policy_loss_geo_mean")
    fidelity = "code"
    switches = ("clip_eps_low", "clip_eps_high")
    tune_knob = ("clip_eps_low+clip_eps_high", (0.2, 0.4))
    Config = GMPOConfig
    cfg: GMPOConfig

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask, c = batch.loss_mask, self.cfg
        s, adv, delta = geo_mean_ratio(fwd.logp, batch.old_logp, batch.adv, mask, c.clip_eps_low, c.clip_eps_high)
        seq_loss = -adv * s  # [B]
        with torch.no_grad():
            low = ((delta < -c.clip_eps_low) & (batch.adv < 0)).float()
            high = ((delta > c.clip_eps_high) & (batch.adv > 0)).float()
            out_of_range = ((delta < -c.clip_eps_low) | (delta > c.clip_eps_high)).float()
            metrics = {"stats/clip_frac": masked_mean(torch.maximum(low, high), mask),
                       "stats/clip_frac_low": masked_mean(low, mask), "stats/clip_frac_high": masked_mean(high, mask),
                       "stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       # verl 0.9.1's definitions under its names: every token outside the range, by Â's sign
                       "algo/gmpo/pg_clipfrac": masked_mean(out_of_range * (batch.adv > 0).float(), mask),
                       "algo/gmpo/pg_clipfrac_lower": masked_mean(out_of_range * (batch.adv < 0).float(), mask),
                       "algo/gmpo/seq_ratio_mean": s.mean(), "algo/gmpo/seq_ratio_min": s.min(),
                       "algo/gmpo/seq_ratio_max": s.max()}
        return seq_loss[:, None] * mask, metrics
