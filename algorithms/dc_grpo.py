"""DC-GRPO — discrepancy-constrained GRPO (Liu, Liu, Wan, Liang, Tang, Pan, "Reformulate LLM
Reinforcement Learning for Efficient Training under Black-box Discrepancy", arXiv 2606.08779);
a reconstruction (fidelity labels: algorithms/README.md).

A constrained MDP over the training–inference gap. Per response token, the probability gap
between the trainer's π_old and the sampler's μ (bounded, ratio-free):

    δ_t = |π_old(y_t) − μ(y_t)|,    constraint  E[δ] ≤ c,   Lagrange multiplier λ ≥ 0

    dual step (once per trainer step):  λ ← clip(λ + η·(mean δ − c), 0, λ_max)
    shaping:                            Â_t = Â_i^GRPO − λ·δ_t     (hinge: λ·max(0, δ_t − c))

then GRPO's clipped surrogate on Â_t. λ is algorithm state (``state_dict``): ``advantages``
computes the step's λ from the committed one, ``after_update`` commits it (idempotent, so
several updates per step make one dual step).

Differs from GRPO (``algorithms/grpo.py``) by: 1. the per-token shaping −λ·δ_t (so equal
rewards no longer give Â = 0: not ``group_relative``); 2. the dual-ascent controller on λ;
3. ε_high 0.24. Meaningful only when μ ≠ π_old: run with ``rollout.mismatch: bf16|noise``
(the trainer logs the mismatch KL as ``mismatch/kl``).
Metrics: ``algo/dc_grpo/{lambda, delta_mean, delta_above_c_frac, violation, shaping_mean}``.
Fidelity: ``abstract`` (mechanism from public summaries and a third-party port).

Source of the defaults (search tools, 2026-12-01): Liu, Liu, Wan, Liang, Tang, Pan (HKUST / ZJU /
Tianjin U.), arXiv 2606.08779 (v1 7 Jun, v2 9 Jun 2026): the abstract and summaries were read; no
official code. A third-party verl fork (an exact-string hit; the tool does not name the
repository) implements "DC-GRPO (arXiv 2606.08779)" as A_t ← A_t − λ·|exp(old_logp) −
exp(rollout_logp)| with λ ← clip(λ + η(δ̄ − target), 0, λ_max) once per step: the unhinged shaping
and the dual step agree with this entry. Its defaults: η = 1.0 (agrees), λ0 = 0.05 (this entry's
MoE value; 0.1 here), λ_max = 1.0 (10 here, flagged), and no default target: it must be measured
(the step-1 static discrepancy floor plus slack) where this entry fixes c = 0.0037. The abstract
names Qwen3-8B and Qwen3-30B-A3B and a tolerance region but gives no number; the text stating
c = 0.0037 / 0.005, λ0 = 0.1 / 0.05 and ε_high 0.24 was not found again by the search tools
(unverified). Since c is a property of the engines' mismatch, it should be set from the suite's
measured δ̄ (``algo/dc_grpo/delta_mean``) at the chosen ``rollout.mismatch`` level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.ops import masked_mean
from rlsuite.suite.types import Batch


@dataclass(frozen=True, kw_only=True)
class DCGRPOConfig(GRPOConfig):
    ranges = {"eta": "[0, inf)", "lambda_init": "[0, inf)", "delta_budget": "[0, 1]", "lambda_max": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_high: float = 0.24
    """ε_high of the clipped ratio (the paper's GRPO setting, clip 0.24)."""
    eta: float = 1.0
    """η, step size of the dual ascent on λ."""
    lambda_init: float = 0.1
    """λ0, the initial Lagrange multiplier (Qwen3-8B; 0.05 for MoE)."""
    delta_budget: float = 0.0037
    """c, the budget on the mean probability gap E[δ] (Qwen3-8B; 0.005 for MoE)."""
    lambda_max: float = 10.0
    """Upper clip of λ."""
    hinge: bool = False
    """Penalise only the excess per token, λ·max(0, δ_t − c), instead of λ·δ_t."""
    dual_order: Literal["update_then_shape", "shape_then_update"] = "update_then_shape"
    """Shape with the λ after this step's dual step, or with the λ it started from."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.eta, self.lambda_init, self.delta_budget) < 0 or self.lambda_max < self.lambda_init:
            raise ValueError("need eta, lambda_init, delta_budget ≥ 0 and lambda_max ≥ lambda_init")


def probability_gap(old_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``δ_t = |π_old(y_t) − μ(y_t)|`` on the mask (0 elsewhere). Shapes: [B, T] → [B, T]."""
    return (old_logp.exp() - behav_logp.exp()).abs() * mask


@register
class DCGRPO(GRPO):
    name = "dc_grpo"
    not_group_relative = ("per-token −λ·δ_t shaping by the trainer–sampler probability gap "
                          "(zero when μ = π_old, checked)")
    old_logp_before_update = True  # its advantages subtract the gap |π_old − μ|
    summary = "GRPO with a Lagrangian penalty on the per-token trainer–sampler probability gap."
    citation = ("Liu, Liu, Wan, Liang, Tang, Pan 2026, Reformulate LLM Reinforcement Learning for Efficient "
                "Training under Black-box Discrepancy, arXiv:2606.08779")
    fidelity = "abstract"
    assumptions = (
        "Penalty λ·δ_t on every response token; a per-token hinge λ·max(0, δ_t − c) is not confirmed (switch hinge).",
        "mean δ is the token mean over the batch's response tokens.",
        "Dual order: λ_k = clip(λ_{k−1} + η(mean δ_k − c)) first, then shaping with λ_k (switch dual_order).",
        "λ_max = 10 (not given; a safety cap).",
        "ε_high = 0.24 reads the paper's 'clip 0.24' as clip-higher; ε_low and the k3 KL (β 0.04) as GRPO.",
    )
    switches = ("hinge", "lambda_init", "delta_budget", "eta", "dual_order")
    group_relative = False  # the −λ·δ_t shaping is per token, not a function of the group's rewards
    inert = {"lambda_max": "a cap: binds only once λ reaches λ_max (λ moves by η·(mean δ − c) per step)"}
    tune_knob = ("delta_budget", (0.001, 0.0037, 0.01))
    Config = DCGRPOConfig
    cfg: DCGRPOConfig

    def __init__(self, cfg: DCGRPOConfig) -> None:
        super().__init__(cfg)
        self.lam = self.lam_next = cfg.lambda_init  # committed λ, and this step's λ after the dual step

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, m = self.cfg, batch.loss_mask
        out = super().advantages(batch, ctx)
        delta = probability_gap(batch.old_logp, batch.behav_logp, m)
        mean_delta = masked_mean(delta, m)
        self.lam_next = float((self.lam + c.eta * (mean_delta - c.delta_budget)).clamp(0.0, c.lambda_max))
        lam = self.lam_next if c.dual_order == "update_then_shape" else self.lam
        penalty = (delta - c.delta_budget).clamp(min=0) * m if c.hinge else delta
        k = "algo/dc_grpo"
        metrics = {f"{k}/lambda": lam, f"{k}/delta_mean": mean_delta, f"{k}/violation": mean_delta - c.delta_budget,
                   f"{k}/delta_above_c_frac": masked_mean((delta > c.delta_budget).float(), m),
                   f"{k}/shaping_mean": masked_mean(lam * penalty, m)}
        return AdvOut(adv=out.adv - lam * penalty, metrics={**out.metrics, **metrics})

    def after_update(self, ctx: Context) -> None:
        self.lam = self.lam_next  # commit this step's dual step (idempotent within a step)

    def state_dict(self) -> dict[str, Any]:
        return {"lambda": self.lam, "lambda_next": self.lam_next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam, self.lam_next = state["lambda"], state["lambda_next"]
