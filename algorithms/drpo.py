"""DRPO — Divergence Regularized Policy Optimization (a reconstruction from the abstract).

Yao, Zhou, Qi, Lee, Bo, Pang 2026, "Rethinking the Divergence Regularization in LLM RL", arXiv
2606.09821. DRPO keeps DPPO's Binary-TV geometry (the sampled token's shift Δ = p − q, p = π_θ(y_t),
q = μ(y_t)) but replaces the hard mask by a smooth advantage-weighted quadratic regulariser: SPO's
construction (arXiv 2401.16025, ``rA − |A|(r−1)²/(2ε)``) moved from ratio space to Δp space,

    J_t = A_t·p/q − (|A_t|/(2δ))·(p − q)²/q,      ∇J_t = A_t·ρ_t·w_t·∇log p,
    w_t = 1 − sign(A_t)·(p − q)/δ_±               (δ_high for A > 0, δ_low for A < 0)

w is 1 at p = q, 0 exactly on DPPO's boundary sign(A)(p − q) = δ, negative beyond it (a
corrective, sign-reversed signal), bounded in [1 − 1/δ, 1 + 1/δ] and continuous. Practical loss
(DPPO-style): ``ℓ_t = −A_t·sg(min(ρ_t, C))·sg(w_t)·log π_θ(y_t)``.

Differs from DPPO (``algorithms/dppo.py``) by:
  1. The smooth weight w instead of the 0/1 mask (switch ``weight``: ``smooth`` / ``hard`` = DPPO's
     Binary-TV mask with the direction criterion).
  2. Corrective negative weights (``corrective = False`` clamps w at 0).
  3. Switch ``space``: Δp space (``prob``) or SPO's ratio space (``ratio``: Δ = ρ − 1).
Same as DPPO: anchor μ (``anchor``), mean-only GRPO advantage, seq-mean-token-sum-norm, TIS cap C.

Fidelity: ``abstract`` (plus secondary summaries; no code). [ASSUMPTION]s: the weight is SPO's
quadratic penalty in Δp space with tolerance δ/q; the DPPO-style practical loss with sg(w) and
truncated IS; C = 10 (as the suite's DPPO; the reference asks for a large C);
GRPO mean-only advantage and seq-mean-token-sum-norm as DPPO.

Source of the defaults (search tools, 2026-12-01): the abstract (arXiv 2606.09821) and the official
port by the authors' group, github.com/Tencent-Hunyuan/UniRL (snapshot 1a7b501, 2026-06-13):
DRPO/README.md, DRPO/config.yaml, examples/ar/qwen3_drpo_4b_base_dapo_sglang.yaml and
unirl/algorithms/drpo.py (it says it mirrors verl's ``spo_adaptive_eps``, the loss of the authors'
released run); the paper's text was not read. Its loss −A·r + |A|·μ·(r − 1)²/(2ε) has the gradient
−A·r·w·∇log π with w = 1 − sign(A)(π − μ)/ε, i.e. this entry's weight with δ = ε: the construction
agrees (the earlier [ASSUMPTION] on it is confirmed by that code). Agree: anchor μ (the rollout
log-probs), mean-only group advantage, seq-mean-token-sum-norm with the horizon = max response,
no KL. The default δ_low = δ_high = 12.5 is the port's ε ("paper §4: regularization threshold
12.5", one symmetric value; until the fidelity issue the entry had DPPO's 0.15): with it the
weight stays in [0.92, 1.08], a far weaker regulariser than at 0.15 (kept as a setting). Differs:
(2) no IS truncation (r stays differentiable) vs C = 10 here (same gradient while
r ≤ 10). Launch: Qwen3-4B-Base, DAPO-Math-17k, 64 prompts × 8, 4 mini-batch updates per rollout,
LR 1e-6, temperature 1.0, top-p 1.0, max response 8192.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AlgoConfig, register
from rlsuite.algorithms.dppo import DPPO
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, masked_mean
from rlsuite.suite.types import Batch, Forward


def drpo_weight(logp: torch.Tensor, anchor_logp: torch.Tensor, adv: torch.Tensor, delta_low: float,
                delta_high: float, space: str) -> torch.Tensor:
    """``w = 1 − sign(A)·Δ/δ_±`` with Δ = p − q (``prob``) or ρ − 1 (``ratio``). [B, T] → [B, T] (detached)."""
    logp, anchor_logp = logp.detach(), anchor_logp.detach()
    shift = logp.exp() - anchor_logp.exp() if space == "prob" else (logp - anchor_logp).clamp(-20, 20).exp() - 1
    delta = torch.where(adv > 0, delta_high, delta_low)
    return 1 - torch.sign(adv) * shift / delta


@dataclass(frozen=True, kw_only=True)
class DRPOConfig(AlgoConfig):
    ranges = {"delta_low": "(0, inf)", "delta_high": "(0, inf)", "tis_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    delta_low: float = 12.5
    """Tolerance δ for A < 0 (w = 0 at p − q = −δ_low); 12.5, the authors' port's ε (0.15: DPPO's δ_TV)."""
    delta_high: float = 12.5
    """Tolerance δ for A > 0 (w = 0 at p − q = δ_high); 12.5, the authors' port's ε."""
    weight: Literal["smooth", "hard"] = "smooth"
    """Smooth quadratic-regulariser weight, or DPPO's hard mask (w ∈ {0, 1})."""
    corrective: bool = True
    """Allow negative (corrective) weights beyond the boundary; False clamps w at 0."""
    space: Literal["prob", "ratio"] = "prob"
    """Shift in probability space (Δ = p − q) or SPO's ratio space (Δ = ρ − 1)."""
    tis_cap: float = 10.0
    """Truncated-IS cap C on ρ = p/q."""
    anchor: Literal["behaviour", "old"] = "behaviour"
    """q from the rollout policy μ, or from a recomputed π_old."""
    scale_by_std: bool = False
    """Divide the group-centred reward by the group std (off, as DPPO)."""
    aggregation: AggMode = "seq-mean-token-sum-norm"


@register
class DRPO(DPPO):
    name = "drpo"
    summary = "DPPO's Δp geometry with a smooth advantage-weighted quadratic regulariser (corrective beyond δ)."
    citation = ("Yao, Zhou, Qi, Lee, Bo, Pang 2026, Rethinking the Divergence Regularization in LLM RL, "
                "arXiv:2606.09821")
    fidelity = "abstract"
    assumptions = ("weight = SPO's quadratic penalty moved to Δp space: w = 1 − sign(A)(p − q)/δ (tolerance δ/q)",
                   "practical DPPO-style loss −A·sg(min(ρ, C))·sg(w)·log π",
                   "δ_low = δ_high = 12.5, the authors' port's ε (Tencent-Hunyuan/UniRL); 0.15 = DPPO's δ_TV",
                   "TIS cap C = 10 as the suite's DPPO (reference: 'large C')",
                   "GRPO mean-only advantage and seq-mean-token-sum-norm, as DPPO")
    switches = ("weight", "corrective", "space", "delta_low", "delta_high", "tis_cap", "anchor")
    inert = {"corrective": "binds only where |p − q| > δ; at the default δ = 12.5 no probability shift reaches it "
                           "(covered at δ = 0.15 by the hand test in tests/unit/)"}
    tune_knob = ("delta_high", (0.15, 1.0, 12.5))
    Config = DRPOConfig
    cfg: DRPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super(DPPO, self).needs | ({"old_logp"} if self.cfg.anchor == "old" else set())

    def loss(self, fwd: Forward, batch: Batch, ctx):
        c, mask, adv = self.cfg, batch.loss_mask, batch.adv
        anchor = batch.behav_logp if c.anchor == "behaviour" else batch.old_logp
        w = drpo_weight(fwd.logp, anchor, adv, c.delta_low, c.delta_high, c.space)
        if c.weight == "hard":
            w = (w >= 0).float()  # sign(A)·Δ ≤ δ: DPPO's Binary-TV mask with the direction criterion
        elif not c.corrective:
            w = w.clamp(min=0)
        ratio = torch.exp((fwd.logp.detach() - anchor).clamp(-20, 20))
        loss = -adv * ratio.clamp(max=c.tis_cap) * w * fwd.logp * mask
        with torch.no_grad():
            active = mask * (adv != 0).float()
            off = (w <= 0).float() * active  # at or beyond the boundary
            metrics = {"stats/clip_frac": masked_mean((w <= 0).float(), active),
                       "stats/ratio_mean": masked_mean(ratio, mask),
                       "stats/clip_frac_high": masked_mean(off * (adv > 0).float(), active),
                       "stats/clip_frac_low": masked_mean(off * (adv < 0).float(), active),
                       "stats/approx_kl": approx_kl(fwd.logp, anchor if batch.old_logp is None else batch.old_logp,
                                                    mask),
                       "algo/drpo/beyond_pos_frac": masked_mean(off * (adv > 0).float(), active),
                       "algo/drpo/beyond_neg_frac": masked_mean(off * (adv < 0).float(), active),
                       "algo/drpo/abs_dp_mean": masked_mean((fwd.logp.detach().exp() - anchor.exp()).abs(), mask),
                       "algo/drpo/tis_clip_frac": masked_mean((ratio > c.tis_cap).float(), mask)}
            if active.any():  # the distribution of w over tokens with A ≠ 0
                wa = w[active > 0]
                metrics.update({"algo/drpo/w_mean": wa.mean(), "algo/drpo/w_min": wa.min(), "algo/drpo/w_max": wa.max(),
                                "algo/drpo/w_neg_frac": (wa < 0).float().mean()})
        return loss, metrics
