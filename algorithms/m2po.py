"""M2PO — Second-Moment Trust Policy Optimization (Zheng, Zhao, Chen 2025, "Prosperity before
Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", arXiv 2510.01161), as AReaL
implements it for asynchronous (stale) rollouts.

Per response token, the log-ratio of the proximal policy π_old (recomputed at the weights that
start the step) to the behaviour policy μ that sampled it (stale under ``rollout.sync=lag``) gives
the second moment ``M2_t = (log π_old(y_t) − log μ(y_t))²``. Over all response tokens of the batch,
sorted by M2 from the largest, the fewest largest are masked so that the mean M2 of the remaining
tokens falls below ``τ_M2`` (``m2_threshold``; if no suffix qualifies, all but one are masked):

    M = m2_mask(log π_old − log μ, loss mask, τ_M2)                       (batch level, once per step)
    ℓ_t = −M_t · w_t · (π_θ(y_t)/π_old(y_t)) · Â_i,   Â_i = (R_i − mean_G R)/(std_G R + 1e-6)

with ``w_t = sg(π_old/μ)`` the decoupled behaviour weight, 0 on tokens where it exceeds
``behaviour_cap`` (AReaL's token-level ``rejection_sampling``: ratio, mask, upper 5); the masked
tokens stay in the ``token-mean`` normaliser (the paper's ``1/Σ|o_i|``; ``normaliser = kept``
divides by the kept tokens instead, as AReaL's loss does). ``clip_eps`` adds PPO's clip on
``π_θ/π_old`` (off by default: the paper's objective replaces the trust region by the mask).
On policy (μ = π_old) M2 = 0, nothing is masked, w = 1, and it is GRPO's token-mean policy gradient.

Differs from GRPO (``algorithms/grpo.py``) by: 1. the batch-level M2 mask; 2. the decoupled
behaviour weight π_old/μ with its cap; 3. no ratio clip by default; 4. ``token-mean``, no KL.
Metrics ``algo/m2po/{m2, m2_kept, masked_frac, behaviour_masked_frac, weight_mean}``
(``masked_frac`` is the paper's "clipped tokens" fraction). Run it with ``rollout.sync=lag`` and
``rollout.staleness=k`` (the paper trains at s = 256 updates of staleness).

Fidelity: ``code`` — the mask is AReaL's ``_apply_m2po_masking`` / ``_get_m2po_loss_mask`` and the
loss its decoupled ``ppo_actor_loss_fn`` (``areal/trainer/ppo/actor.py``,
``areal/utils/functional/functional.py``, ``docs/en/algorithms/m2po.md``, inclusionAI/AReaL commit
4aef98d, 2026-05-21); the hand test uses the inputs checked against those functions. τ_M2 = 0.04 is
the paper's single setting (its project page: "not a sensitive hyperparameter") and AReaL's
``examples/math/gsm8k_m2po.yaml`` (AReaL's own default is None = off).
Differences from the peers, by choice: AReaL builds the mask per micro-batch and divides by the
micro-batch's kept tokens; here the mask is computed once over the whole step batch (the paper's
"batch-level M2"; micro-batching then changes nothing) and the normaliser is the paper's (switch
``normaliser``). AReaL's example also whitens advantages over the batch and sets ``eps_clip: 0.0``
(a clip that binds at r = 1); neither is taken. The authors' verl fork (Infini-AI-Lab/M2PO commit
af54a3e, ``compute_m2po_policy_loss``) differs more: per micro-batch it measures M2 of π_θ against
the stale log-probs over the "harmful" tokens only (A > 0 with r > 1, A < 0 with r < 1) and turns
the budget into a clip range exp(±τ) with τ chosen so that Σ min(Δ², τ²) meets it; that
reading is not implemented (the paper's and AReaL's mask is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
from torch import Tensor

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward


def m2_mask(log_ratio: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """The M2PO keep-mask: over the tokens with ``mask = 1`` (all rows together), sort
    ``M2 = log_ratio²`` from the largest (stable) and mask the first ``k`` of them, ``k`` the
    smallest index whose suffix mean ``mean(M2_sorted[k:])`` is below ``threshold`` (all but the
    last one when none is). Shapes: log_ratio, mask [B, T] → keep [B, T] (0/1 in mask's dtype, 0 off
    the mask). Reference: AReaL ``_apply_m2po_masking`` / ``_get_m2po_loss_mask``."""
    sel = mask > 0
    m2 = log_ratio.detach().to(torch.float64).square()[sel]
    keep = torch.zeros_like(mask)
    n = m2.numel()
    if n == 0:
        return keep
    order = torch.sort(m2, descending=True, stable=True).indices
    s = m2[order]
    suffix_mean = s.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=s.dtype, device=s.device)
    below = torch.nonzero(suffix_mean < threshold).flatten()
    k = int(below[0]) if below.numel() else n - 1
    kept_sorted = torch.ones(n, dtype=mask.dtype, device=mask.device)
    kept_sorted[:k] = 0
    kept = torch.empty_like(kept_sorted)
    kept[order] = kept_sorted
    keep[sel] = kept
    return keep


def behaviour_weight(prox_logp: Tensor, behav_logp: Tensor, mask: Tensor,
                     cap: Optional[float]) -> tuple[Tensor, Tensor]:
    """Decoupled PPO's behaviour weight ``w = sg(π_prox/μ)`` with AReaL's token-level rejection:
    ``w = 0`` where it exceeds ``cap`` (``cap = None``: no weight, w = 1). Returns (w [B, T], the
    rejected tokens [B, T] as 0/1), both 0 off the mask. Shapes: [B, T] each.
    Reference: AReaL ``apply_rejection_sampling`` (level token, action mask, metric ratio)."""
    if cap is None:
        return mask.clone(), torch.zeros_like(mask)
    w = torch.exp((prox_logp.detach() - behav_logp).clamp(-20.0, 20.0))
    rejected = (w > cap).to(mask.dtype) * mask
    return w * (mask - rejected), rejected


@dataclass(frozen=True, kw_only=True)
class M2POConfig(AlgoConfig):
    ranges = {"m2_threshold": "(0, inf)", "clip_eps": "[0, 1]", "behaviour_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    m2_threshold: float = 0.04
    """τ_M2: the mean second moment of log(π_old/μ) the kept tokens must stay below (paper: 0.04 everywhere)."""
    clip_eps: Optional[float] = None
    """PPO clip ε on π_θ/π_old (both sides); None = the paper's unclipped surrogate."""
    behaviour_cap: Optional[float] = 5.0
    """Weight by π_old/μ and drop tokens where it exceeds this (AReaL's example: 5); None = no weight."""
    normaliser: Literal["all", "kept"] = "all"
    """``all``: masked tokens stay in the aggregation normaliser (the paper's 1/Σ|o_i|); ``kept``: the
    M2 mask replaces the loss mask, so only kept tokens count (AReaL's loss)."""
    aggregation: AggMode = "token-mean"


@register
class M2PO(Algorithm):
    name = "m2po"
    summary = "Stale-data PPO: mask the largest (log π_old/μ)² tokens until the batch's second moment is below τ."
    citation = ("Zheng, Zhao, Chen 2025, Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale "
                "Data on LLMs?, arXiv:2510.01161")
    fidelity = "code"
    own_mismatch_weight = "it masks tokens by the second moment of log(π_old/μ) and weights by π_old/μ (capped)"
    old_logp_before_update = True  # the M2 mask is computed from π_old before the update
    assumptions = (
        "the M2 mask is computed once over the step's whole batch (AReaL: per micro-batch)",
        "masked tokens stay in the normaliser by default (the paper's 1/Σ|o_i|; AReaL divides by the kept tokens: "
        "normaliser = kept)",
        "no ratio clip by default (the paper's objective; AReaL's example sets eps_clip 0.0)",
    )
    switches = ("m2_threshold", "clip_eps", "behaviour_cap", "normaliser")
    group_relative = True
    inert = {"normaliser": "changes only the loss mask the trainer's aggregation divides by (AdvOut.loss_mask), "
                           "not the per-token loss; hand-tested in tests/algorithms/test_m2po.py"}
    Config = M2POConfig
    cfg: M2POConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, m = self.cfg, batch.loss_mask
        adv = group_normalised_advantage(batch.rewards, batch.group_id)  # [B]
        log_ratio = batch.old_logp - batch.behav_logp  # log π_old/μ  [B, T]
        keep = m2_mask(log_ratio, m, c.m2_threshold)  # [B, T]
        w, rejected = behaviour_weight(batch.old_logp, batch.behav_logp, m, c.behaviour_cap)
        m2 = log_ratio.detach().square()
        metrics = {"algo/m2po/m2": masked_mean(m2, m), "algo/m2po/m2_kept": masked_mean(m2, keep),
                   "algo/m2po/masked_frac": masked_mean(1 - keep, m),
                   "algo/m2po/behaviour_masked_frac": masked_mean(rejected, m),
                   "algo/m2po/weight_mean": masked_mean(w * keep, keep)}
        return AdvOut(adv=broadcast_to_tokens(adv, m), metrics=metrics, extras={"m2po_weight": keep * w},
                      loss_mask=keep if c.normaliser == "kept" else None)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, mask = self.cfg, batch.loss_mask
        weight = batch.extras["m2po_weight"]
        if c.clip_eps is not None:
            loss, metrics = clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, mask, c.clip_eps, c.clip_eps)
            return loss * weight, metrics
        ratio = torch.exp((fwd.logp - batch.old_logp).clamp(-20.0, 20.0))
        loss = -batch.adv * ratio * weight * mask
        with torch.no_grad():
            metrics = {"stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "stats/ratio_mean": masked_mean(ratio, mask)}
        return loss, metrics
