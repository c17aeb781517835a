"""GGPO — Gibbs-Gap Policy Optimization (paper not found; a reconstruction from a description).

Setup: the KL-regularised objective ``max_π E[R] − β·KL(π‖π_ref)`` has the optimum
``π* ∝ π_ref·exp(R/β)``; with the sequence KL-adjusted reward
``U_i = R_i − β·Σ_t (log π_θ − log π_ref)(y_it)`` (log π_θ from the π_old scoring pass) the
optimum makes ``U = β·log Z(x)`` equal for every y (AGRO's generation consistency).
GGPO contrasts U inside each group with a log-mean-exp (free-energy) baseline:

    Φ(x) = β·log((1/G)·Σ_j exp(U_j/β)),    Â_i = U_i − Φ(x)     (the "Gibbs gap", ≤ max U)

    loss (reinforce):  ℓ_it = −sg(Â_i)·log π_θ(y_it)   with 1/|y_i| per sequence (seq-mean-token-mean)

and refreshes the reference every T optimizer updates (``π_ref ← π_θ``), so each phase is a
KL-proximal (mirror-descent) step. ``contrast: mean`` gives AGRO's arithmetic mean
(``algorithms/agro.py``).

Differs from GRPO by: 1. the advantage is a group contrast of the KL-adjusted *sequence*
reward, not a z-score of R (so equal R in a group still gives Â ≠ 0: not ``group_relative``);
2. the contrast is log-mean-exp; 3. β lives in U (the generic ``kl_coef`` stays 0); 4. the
reference is refreshed in ``after_update`` through ``ctx.refresh_reference``; 5. REINFORCE by
default (``loss_type``: ``ppo_clip`` token surrogate, or ``squared_gap``: the gradient of
``½·Σ_i (U_i(θ) − sg Φ)²/β``, i.e. REINFORCE with the gap re-evaluated at the current θ).

Metrics: ``algo/ggpo/kl_ref`` and ``kl_init`` (sequence k1 KL of π_old to the current π_ref and to
the initial policy — a frozen copy scored every step when the reference refreshes; the pass is
charged as ``score_init``). Refresh events are logged by the next ``advantages`` call (its ref_logp comes from the fresh
reference): ``algo/ggpo/refreshed`` (since the last batch), ``algo/ggpo/refreshes`` (total).

Source of the defaults (search tools, 2026-12-01): none found: no paper, arXiv id or code for GGPO
(exact-string searches for "Gibbs-Gap Policy Optimization" and "Gibbs gap", page searches). β 0.05,
T = 100, the REINFORCE loss and seq-mean-token-mean all remain reconstructions; AGRO's sources are
listed in ``agro.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.reinforce import policy_gradient_loss
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_all_equal, masked_sum
from rlsuite.suite.types import Batch, Forward

STATE = ("updates", "refreshes", "logged", "seen")


def group_contrast(u: torch.Tensor, group_ids: torch.Tensor, beta: float, kind: str) -> torch.Tensor:
    """Per-sample group baseline of U: ``β·log mean_G exp(U/β)`` (``log_mean_exp``) or ``mean_G U``.

    A singleton group's baseline is its own U (zero gap under either contrast); so is the
    baseline of any group whose U are all equal, exactly (computed in float64, returned in u's dtype).
    Shapes: u [B], group_ids [B] → [B]. Reference: the module docstring (GGPO) and ``algorithms/agro.py`` (AGRO).
    """
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    u64 = u.to(torch.float64)
    n = counts.to(u64.dtype)
    if kind == "mean":
        base = (torch.zeros_like(n).index_add_(0, inv, u64) / n)[inv]
    else:
        x = u64 / beta
        top = torch.full_like(n, -torch.inf).scatter_reduce_(0, inv, x, "amax")  # stabilised logsumexp
        s = torch.zeros_like(n).index_add_(0, inv, torch.exp(x - top[inv]))
        base = (beta * (top + s.log() - n.log()))[inv]
    return torch.where(group_all_equal(u, group_ids), u64, base).to(u.dtype)


@dataclass(frozen=True, kw_only=True)
class GGPOConfig(AlgoConfig):
    ranges = {"beta": "(0, inf)", "refresh_every": "[1, inf)", "clip_eps_low": "[0, 1]",
              "clip_eps_high": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    beta: float = 0.05
    """β of the KL-regularised objective: temperature of U and of the log-mean-exp contrast."""
    contrast: Literal["log_mean_exp", "mean"] = "log_mean_exp"
    """Group baseline of U: Gibbs free energy (GGPO) or arithmetic mean (AGRO)."""
    refresh_every: Optional[int] = 100
    """T: copy π_θ into π_ref every T optimizer updates (null = never)."""
    loss_type: Literal["reinforce", "ppo_clip", "squared_gap"] = "reinforce"
    """REINFORCE −sg(Â)·log π, PPO-clip token surrogate, or squared-gap regression."""
    clip_eps_low: float = 0.2
    """ε_low of the PPO clip (loss_type = ppo_clip only)."""
    clip_eps_high: float = 0.2
    """ε_high of the PPO clip (loss_type = ppo_clip only)."""
    aggregation: AggMode = "seq-mean-token-mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta <= 0 or (self.refresh_every is not None and self.refresh_every < 1):
            raise ValueError(f"beta must be > 0 and refresh_every ≥ 1 or null (got {self.beta}, {self.refresh_every})")


@register
class GGPO(Algorithm):
    name = "ggpo"
    not_group_relative = "contrast of the KL-adjusted U = R − β·Σ log(π_old/π_ref) (zero when π_ref = π_old, checked)"
    old_logp_before_update = True  # its advantages read the KL of π_old to the reference
    summary = "Log-mean-exp (Gibbs) contrast of the KL-adjusted sequence reward; reference refreshed every T updates."
    citation = "Gibbs-Gap Policy Optimization (paper not found; built from a description; see algorithms/README.md)"
    fidelity = "description"
    assumptions = (
        "U_i = R_i − β·Σ_t(log π_old − log π_ref): the sequence log-ratio uses π_old (the policy at rollout).",
        "Φ = β·log mean_G exp(U/β) replaces AGRO's arithmetic mean (switch contrast).",
        "β = 0.05 from the range 0.01–0.1; the generic kl_coef stays 0 (β acts only through U).",
        "Reference refresh every T = 100 optimizer updates (range 50–100; counted in after_update).",
        "Loss REINFORCE −sg(Â_i)·log π with 1/|y_i| (seq-mean-token-mean); ppo_clip and squared_gap are options.",
        "squared_gap regresses U_i(θ) on sg(Φ) with the gradient scaled by 1/β (per-row, so accumulation-safe).",
        "A singleton group has zero gap (its baseline is its own U).",
    )
    switches = ("contrast", "refresh_every", "loss_type", "beta")
    inert = {"refresh_every": "acts only in after_update (reference refresh), not in the per-batch hooks",
             "clip_eps_low": "used only with loss_type = ppo_clip (default reinforce)",
             "clip_eps_high": "used only with loss_type = ppo_clip (default reinforce)"}
    tune_knob = ("beta", (0.01, 0.05, 0.1))
    Config = GGPOConfig
    cfg: GGPOConfig

    def __init__(self, cfg: GGPOConfig) -> None:
        super().__init__(cfg)
        self.updates = self.refreshes = self.logged = self.seen = 0  # logged/seen: refreshes already reported

    @property
    def needs(self) -> frozenset[str]:
        # the initial policy only when π_ref moves away from it (otherwise KL to π_ref is KL to the initial)
        init = {"init_logp"} if self.cfg.refresh_every is not None else set()
        return super().needs | {"old_logp", "ref_logp"} | init

    def _u(self, rewards, logp, ref_logp, mask):
        """Sequence KL-adjusted reward ``U = R − β·Σ_t (log π − log π_ref)``. [B, T] → [B]."""
        return rewards - self.cfg.beta * masked_sum(logp - ref_logp, mask, -1)

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, mask = self.cfg, batch.loss_mask
        u = self._u(batch.rewards, batch.old_logp, batch.ref_logp, mask)
        base = group_contrast(u, batch.group_id, c.beta, c.contrast)
        gap, mean_u, phi = u - base, *(group_contrast(u, batch.group_id, c.beta, x) for x in ("mean", "log_mean_exp"))
        k = f"algo/{self.name}"
        metrics = {f"{k}/gibbs_gap_mean": gap.mean(), f"{k}/gibbs_gap_abs_mean": gap.abs().mean(),
                   f"{k}/phi_minus_ubar": (phi - mean_u).mean(), f"{k}/u_mean": u.mean(),
                   f"{k}/kl_ref": masked_sum(batch.old_logp - batch.ref_logp, mask, -1).mean(),  # sequence k1 KL
                   f"{k}/kl_init": masked_sum(batch.old_logp - (batch.ref_logp if batch.init_logp is None
                                                                 else batch.init_logp), mask, -1).mean(),
                   f"{k}/refreshed": float(self.refreshes - self.logged), f"{k}/refreshes": float(self.refreshes)}
        self.seen = self.refreshes  # committed as logged by the next after_update (idempotent per step)
        return AdvOut(adv=broadcast_to_tokens(gap, mask), metrics=metrics, extras={"ggpo_baseline": base})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, mask = self.cfg, batch.loss_mask
        if c.loss_type == "ppo_clip":
            return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, mask, c.clip_eps_low, c.clip_eps_high)
        adv = batch.adv
        if c.loss_type == "squared_gap":  # ∂/∂log π_t of ½(U(θ) − Φ)²/β = −(U(θ) − Φ), U(θ) at the current θ
            live = self._u(batch.rewards, fwd.logp.detach(), batch.ref_logp, mask) - batch.extras["ggpo_baseline"]
            adv = broadcast_to_tokens(live, mask)
        return policy_gradient_loss(fwd.logp, adv.detach(), mask), {}

    def after_update(self, ctx: Context) -> None:
        """Count updates; every T of them copy π_θ into π_ref (when the trainer offers it)."""
        self.updates += 1
        self.logged = self.seen
        refresh: Any = getattr(ctx, "refresh_reference", None)
        if self.cfg.refresh_every is not None and self.updates % self.cfg.refresh_every == 0 and refresh:
            refresh()
            self.refreshes += 1

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates, self.refreshes, self.logged, self.seen = (state[k] for k in STATE)
