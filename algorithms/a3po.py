"""A-3PO — decoupled PPO with an approximate proximal policy (AReaL's ``prox_logp_method =
loglinear``: "Proximal Log-Probability Approximation", AReaL ``docs/en/algorithms/prox_approx.md``).

Decoupled PPO (Hilton et al. 2022; AReaL, Fu et al. 2025, arXiv 2505.24298) splits the ratio of the
current policy to the stale behaviour policy μ at a proximal policy π_prox: the clip acts on
``π_θ/π_prox`` and the weight ``w = sg(π_prox/μ)`` corrects the staleness. Instead of recomputing
π_prox by a forward pass, A-3PO interpolates it between μ and π_θ by the policy versions:

    s_i = v_θ − v_i  (staleness of row i: updates at the start of the step − the row's policy version)
    α_i = clip((v_θ − 1 − v_i)/(v_θ − v_i), 0, 1) = (s_i − 1)/s_i   (0 when s_i = 0)
    log π_prox = log μ + α·(sg(log π_θ) − log μ)                       (``loglinear``)
    ℓ_t = w_t · max(−Â r_t, −Â clip(r_t, 1 − ε_low, 1 + ε_high)),  r_t = π_θ/π_prox,
    w_t = sg(π_prox/μ), 0 where it exceeds ``behaviour_cap``;  Â = GRPO's group z-score.

In value ``w·r = π_θ/μ`` (the IS ratio to μ) while the clip acts on ``(π_θ/μ)^(1−α)``: a row one update
stale (α = 0) is PPO with π_old = μ; older rows move toward π_θ. ``prox = linear`` interpolates in
probability space, ``log((1−α)μ + α·π_θ)``; ``prox = recompute`` is decoupled PPO with the
recomputed π_old (the baseline the approximation replaces). Metrics
``algo/a3po/{alpha_mean, staleness_mean, weight_mean, behaviour_masked_frac, prox_abs_err}``
(``prox_abs_err``: mean |log π_prox − log π_old| against the trainer's recomputed π_old, AReaL's
``metrics`` mode). Run it with ``rollout.sync=lag`` and ``rollout.staleness=k``.

Differs from GRPO (``algorithms/grpo.py``) by: 1. the ratio to an interpolated π_prox and the
behaviour weight π_prox/μ with its cap; 2. ``token-mean``, no KL.

Fidelity: ``code`` — ``compute_prox_logp_approximations`` (loglinear, linear),
``_resolve_proximal_logp`` and the decoupled ``ppo_actor_loss_fn`` with ``apply_rejection_sampling``
(``areal/trainer/ppo/actor.py``, ``areal/utils/functional/functional.py``, inclusionAI/AReaL commit
4aef98d, 2026-05-21; defaults from ``PPOActorConfig`` and
``examples/experimental/prox_approx/gsm8k_grpo_prox_approx.yaml``); the hand test uses the inputs of
AReaL's ``tests/test_prox_approx.py`` where they apply.
[ASSUMPTION]s (mapping AReaL's versions onto the suite): a version is an optimizer update here
(``Batch.policy_version``; AReaL counts trainer steps, the same with one update per step), and v_θ is
the update count when the step's batch is scored, fixed through the step's minibatches as AReaL's
``current_version``; like AReaL, π_prox is taken one version behind v_θ. ε = 0.2 is AReaL's default
(its prox_approx example uses 0.4); the cap 5 is that example's ``rejection_sampling.upper``; the
example's batch whitening of advantages is not taken (``reward_scaling``/``reward_bias`` cancel in
the z-score). ``linear`` takes the log exactly where AReaL adds 1e-10 inside it.
[ASSUMPTION] The approximation's point is to skip the π_prox forward pass. At one update a batch
(the suite's default: one epoch, one minibatch) the trainer takes π_old from the update's own forward
(``suite/update_plan.py: old_logp_from_update``), so no scoring pass runs and the saving is realised;
with several updates a batch the trainer's π_old scoring pass runs whatever the entry reads (the
shared π_old metrics read it), so there the saving is not realised in the budget (the entry's
learning dynamics are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch
from torch import Tensor

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.m2po import behaviour_weight
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward


def interpolation_alpha(current_version: int, versions: Tensor) -> Tensor:
    """AReaL's α with v_prox = v_θ − 1: ``clip((v_θ − 1 − v)/(v_θ − v), 0, 1)``, 0 where ``v ≥ v_θ``.
    Shapes: versions [B] (long) → α [B] float64."""
    v = versions.to(torch.float64)
    diff = float(current_version) - v
    gap = float(current_version - 1) - v
    return torch.where(diff > 0, gap / diff.clamp(min=1.0), torch.zeros_like(v)).clamp(0.0, 1.0)


def approximate_prox_logp(behav_logp: Tensor, logp: Tensor, alpha: Tensor, method: str) -> Tensor:
    """log π_prox from μ, π_θ (detached) and per-row ``alpha [B]``: ``loglinear`` = log μ + α(log π_θ −
    log μ); ``linear`` = log((1−α)·μ + α·π_θ). Shapes: [B, T], [B, T], [B] → [B, T]."""
    a = alpha.to(logp.dtype)[:, None]
    lp = logp.detach()
    if method == "loglinear":
        return behav_logp + a * (lp - behav_logp)
    if method == "linear":  # logaddexp of the two weighted terms; log(0) = −inf drops a term exactly
        return torch.logaddexp(torch.log1p(-a) + behav_logp, torch.log(a) + lp)
    raise ValueError(f"unknown approximation '{method}'; valid: loglinear, linear")


@dataclass(frozen=True, kw_only=True)
class A3POConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "behaviour_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    prox: Literal["loglinear", "linear", "recompute"] = "loglinear"
    """π_prox: interpolated in log space (A-3PO), in probability space, or the recomputed π_old (decoupled PPO)."""
    clip_eps_low: float = 0.2
    """ε_low of the clip on π_θ/π_prox (AReaL ``eps_clip``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clip on π_θ/π_prox (AReaL ``eps_clip_higher``, unset = ε_low)."""
    behaviour_cap: Optional[float] = 5.0
    """Weight by π_prox/μ and drop tokens where it exceeds this (AReaL's example: 5); None = no weight."""
    aggregation: AggMode = "token-mean"


@register
class A3PO(Algorithm):
    name = "a3po"
    summary = "Decoupled PPO whose proximal policy is interpolated between μ and π_θ by staleness, not recomputed."
    citation = ("AReaL (inclusionAI), Proximal Log-Probability Approximation (A-3PO), docs/en/algorithms/"
                "prox_approx.md; decoupled PPO: Fu et al. 2025, AReaL, arXiv:2505.24298")
    fidelity = "code"
    own_mismatch_weight = ("it weights by π_prox/μ (π_prox interpolated between μ and π_θ) and drops tokens above "
                           "the cap")
    assumptions = (
        "a version is an optimizer update (Batch.policy_version); v_θ = the update count when the step's batch is "
        "scored, fixed through its minibatches; π_prox one version behind v_θ (AReaL's rule)",
        "ε 0.2 (AReaL's default; its prox_approx example uses 0.4); behaviour cap 5 (the example's rejection_sampling)",
        "GRPO's group z-score without the example's extra batch whitening",
        "with several updates a batch the trainer still runs its π_old scoring pass, so the forward pass A-3PO "
        "saves is saved in the budget only at one update a batch (the default: π_old from the update's forward)",
    )
    switches = ("prox", "behaviour_cap", "clip_eps_high")
    inert = {"behaviour_cap": "π_prox/μ ≠ 1 only on rows two or more updates stale (α > 0; a fresh entry has none) or "
                              "with prox = recompute; hand-tested in tests/algorithms/test_a3po.py"}
    group_relative = True
    Config = A3POConfig
    cfg: A3POConfig

    def __init__(self, cfg: A3POConfig) -> None:
        super().__init__(cfg)
        self.updates = 0  # optimizer updates so far: v_θ of the next batch

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | ({"old_logp"} if self.cfg.prox == "recompute" else set())

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        m = batch.loss_mask
        adv = group_normalised_advantage(batch.rewards, batch.group_id)  # [B]
        alpha = interpolation_alpha(self.updates, batch.policy_version)  # [B]
        stale = (self.updates - batch.policy_version).clamp(min=0).to(torch.float64)
        metrics = {"algo/a3po/alpha_mean": float(alpha.mean()), "algo/a3po/staleness_mean": float(stale.mean())}
        return AdvOut(adv=broadcast_to_tokens(adv, m), metrics=metrics, extras={"a3po_alpha": alpha.to(m.dtype)})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, mask = self.cfg, batch.loss_mask
        if c.prox == "recompute":
            prox = batch.old_logp
        else:
            prox = approximate_prox_logp(batch.behav_logp, fwd.logp, batch.extras["a3po_alpha"], c.prox) * mask
        w, rejected = behaviour_weight(prox, batch.behav_logp, mask, c.behaviour_cap)
        loss, metrics = clipped_surrogate(fwd.logp, prox, batch.adv, mask, c.clip_eps_low, c.clip_eps_high)
        with torch.no_grad():
            metrics = {**metrics, "algo/a3po/weight_mean": masked_mean(w, mask - rejected),
                       "algo/a3po/behaviour_masked_frac": masked_mean(rejected, mask)}
            if batch.old_logp is not None:
                metrics["stats/approx_kl"] = approx_kl(fwd.logp, batch.old_logp, mask)  # to π_old, as the peers
                metrics["algo/a3po/prox_abs_err"] = masked_mean((prox - batch.old_logp).abs(), mask)
        return loss * w, metrics

    def after_update(self, ctx: Context) -> None:
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = state["updates"]
