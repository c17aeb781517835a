"""COPC — Coupled Off-Policy Correction for asynchronous LLM RL (Hu, Zhou, Zhang, Liu, Chen,
Li et al., arXiv 2610.09597); a reconstruction (fidelity labels: algorithms/README.md).

PPO with a critic on rollouts from a stale behaviour policy μ = π_{θ−k}. The ratio splits as
``π_θ/μ = (π_old/μ)·(π_θ/π_old)``; the staleness/mismatch part ``ρ_t = π_old(y_t)/μ(y_t)``
drives two coupled corrections:

  (i)  token mask (actor):  ``M_t = 1[c_min ≤ ρ_t ≤ c_max]``; the PPO clip then acts on
       ``π_θ/π_old`` of the kept tokens:  ``ℓ_t = M_t · max(−Â r, −Â clip(r, 1±ε))`` (dual clip as PPO);
  (ii) weighted TD residuals (advantage and critic), V-trace-like but two-sided:
       ``w_t = clip(ρ_t, 1/c̄, c̄)``,  ``δ_t = r_t + γV_{t+1} − V_t``,
       ``Â_t = w_t·δ_t + γλ·w_t·Â_{t+1}``,  value target ``Â_t + V_t``.

"Coupled": the same ρ and mask feed both channels — a masked token gets ``w_t = 0`` (its
residual and the trace through it are cut) and is left out of the value loss.
Implemented with the shared ``gae`` twice: ``δ = gae(r, V, λ=0)``, then
``Â = gae(w·δ, 0, λ_t = λ·w_t)``. With ``μ = π_old`` (ρ = 1) it is exactly PPO with GAE.

Differs from PPO (``algorithms/ppo.py``) by: 1. the mask M on the policy loss; 2. the weighted
GAE; 3. λ = 0.95. Metrics: ``algo/copc/{masked_frac, clipped_frac, w_mean, w_min, w_max, ess,
ess_frac}`` and the staleness histogram ``algo/copc/staleness_frac_{0,1,2to3,4to7,8plus}``
(updates counted in ``after_update``). Run it with ``rollout.staleness: k``, ``rollout.sync: lag``.
Fidelity: ``abstract``; thresholds and the coupling rule are reconstructions (``assumptions``).

Source of the defaults (search tools, 2026-12-01): Hu, Zhou, Zhang, Liu, Chen, Li, Gu, Feng, Hao,
Qu (Fudan / Meituan / ECNU), arXiv 2610.09597 (v1, Oct 2026): only the abstract and third-party
summaries were read; no code found. Agrees in structure: token-level ratio masking on the actor
plus two-sided clipped-ratio weighting of the TD residuals in the return/advantage estimate
(``mask`` and ``weighted_gae``), actor–critic. No threshold, λ or staleness value is stated in
what was read: the mask [0.5, 2], c̄ = 2 and λ = 0.95 stay assumptions. The summaries add that the
two clip parameters interact (the best value of one depends on, and can reverse with, the other),
so they should be swept jointly, and that the gains hold at 64-step staleness (staleness is a
trainer setting here); tasks there: tool-integrated math reasoning and search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.ppo import PPO, PPOConfig
from rlsuite.suite.ops import clipped_value_loss, explained_variance, gae, masked_mean, masked_whiten
from rlsuite.suite.types import Batch, Forward

STALENESS_BUCKETS = (("0", 0, 0), ("1", 1, 1), ("2to3", 2, 3), ("4to7", 4, 7), ("8plus", 8, 1 << 62))


@dataclass(frozen=True, kw_only=True)
class COPCConfig(PPOConfig):
    ranges = {"mask_high": "(1, inf)", "mask_low": "[0, 1]", "weight_clip": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    lam: float = 0.95
    """λ of the (weighted) GAE."""
    mask: bool = True
    """(i) Drop tokens with ρ = π_old/μ outside [c_min, c_max] from the policy loss."""
    mask_high: float = 2.0
    """c_max of the token mask."""
    mask_low: Optional[float] = 0.5
    """c_min of the token mask (null = 1/mask_high, a band symmetric in log ρ)."""
    weighted_gae: bool = True
    """(ii) Weight the TD residuals and traces of GAE by w = clip(ρ)."""
    weight_clip: float = 2.0
    """c̄: w = clip(ρ, 1/c̄, c̄) (two-sided) or min(ρ, c̄) (one-sided)."""
    weight_clip_mode: Literal["two_sided", "one_sided"] = "two_sided"
    """Two-sided clip (COPC) or V-trace's one-sided truncation."""
    coupled: bool = True
    """Masked tokens also get w = 0 and leave the value loss (False: the critic ignores M)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mask_high <= 1 or not 0 <= self.mask_low_value <= 1 or self.weight_clip < 1:
            raise ValueError("need mask_high > 1, 0 ≤ mask_low ≤ 1 and weight_clip ≥ 1 "
                             f"(got {self.mask_high}, {self.mask_low}, {self.weight_clip})")

    @property
    def mask_low_value(self) -> float:
        return 1 / self.mask_high if self.mask_low is None else self.mask_low


@register
class COPC(PPO):
    name = "copc"
    not_group_relative = "critic baseline: ρ-weighted GAE against the learned V_t, then batch whitening"
    old_logp_before_update = True  # its advantages weight by π_old/μ
    summary = "Async PPO: token mask on π_old/μ plus two-sided clipped-ratio weights on GAE's TD residuals."
    citation = ("Hu, Zhou, Zhang, Liu, Chen, Li et al. 2026, COPC: Coupled Off-Policy Correction for "
                "Asynchronous LLM Reinforcement Learning, arXiv:2610.09597")
    fidelity = "abstract"
    own_mismatch_weight = "it masks tokens by π_old/μ and clips ratio weights on the TD residuals"
    assumptions = (
        "PPO with a critic; the staleness/mismatch ratio is ρ = π_old/μ (μ: behav_logp, π_old: recomputed).",
        "Token mask M = 1[c_min ≤ ρ ≤ c_max], c_min = 0.5, c_max = 2 (IcePop-style); kept in the normaliser.",
        "Weighted GAE Â_t = w_t·δ_t + γλ·w_t·Â_{t+1}, w = clip(ρ, 1/c̄, c̄), c̄ = 2; value target Â + V.",
        "Coupling: masked tokens get w = 0 (trace cut) and are excluded from the value loss (switch coupled).",
        "λ = 0.95, γ = 1; advantages whitened as PPO; staleness k ∈ {1, 2, 4, 8} is a trainer setting.",
    )
    switches = ("mask", "weighted_gae", "coupled", "weight_clip_mode", "weight_clip", "mask_high", "mask_low")
    inert = {"weight_clip_mode": "with coupling, kept tokens have ρ ∈ [c_min, c_max] = [1/c̄, c̄] by default, so the "
                                 "lower clip binds only when c̄ < 1/c_min or coupled = false (unit-tested)"}
    tune_knob = ("weight_clip", (1.5, 2.0, 4.0))
    Config = COPCConfig
    cfg: COPCConfig

    def __init__(self, cfg: COPCConfig) -> None:
        super().__init__(cfg)
        self.updates = 0  # optimizer updates so far, for the staleness histogram

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, m = self.cfg, batch.loss_mask
        rho = torch.exp((batch.old_logp - batch.behav_logp).clamp(-20.0, 20.0)) * m
        keep = ((rho >= c.mask_low_value) & (rho <= c.mask_high)).to(m.dtype) * m if c.mask else m
        two = c.weight_clip_mode == "two_sided"
        clipped = rho.clamp(1 / c.weight_clip, c.weight_clip) if two else rho.clamp(max=c.weight_clip)
        w = (clipped * keep if c.coupled else clipped) if c.weighted_gae else torch.ones_like(m)
        delta, _ = gae(batch.token_rewards, batch.values, m, c.gamma, 0.0)  # δ_t with masked carry
        adv, _ = gae(w * delta, torch.zeros_like(delta), m, c.gamma, c.lam * w)
        returns = (adv + batch.values) * m
        adv = masked_whiten(adv, m) if c.whiten_adv else adv
        stale = (self.updates - batch.policy_version).float()
        wm, k = w[m > 0], "algo/copc"
        ess = wm.sum() ** 2 / wm.square().sum().clamp(min=1e-12)  # (Σw)²/Σw² over response tokens
        metrics = {f"{k}/masked_frac": masked_mean(1 - keep, m),
                   f"{k}/clipped_frac": masked_mean((clipped != rho).float(), m),
                   f"{k}/w_mean": masked_mean(w, m), f"{k}/w_min": wm.min() if wm.numel() else 1.0,
                   f"{k}/w_max": wm.max() if wm.numel() else 1.0,
                   f"{k}/ess": ess, f"{k}/ess_frac": ess / max(1, wm.numel()),
                   **{f"{k}/staleness_frac_{n}": ((stale >= lo) & (stale <= hi)).float().mean()
                      for n, lo, hi in STALENESS_BUCKETS},
                   "value/returns_mean": masked_mean(returns, m),
                   "value/explained_var": explained_variance(batch.values, returns, m)}
        return AdvOut(adv=adv, returns=returns, metrics=metrics, extras={"copc_keep": keep})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        loss, metrics = super().loss(fwd, batch, ctx)
        return loss * batch.extras["copc_keep"], metrics

    def value_loss(self, fwd: Forward, batch: Batch, ctx: Context):
        mask = batch.extras["copc_keep"] if self.cfg.coupled else batch.loss_mask
        loss, metrics = clipped_value_loss(fwd.values, batch.values, batch.returns, mask, self.cfg.value_clip)
        return self.cfg.vf_coef * loss, metrics

    def after_update(self, ctx: Context) -> None:
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = state["updates"]
