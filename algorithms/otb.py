"""OTB — Optimal Token Baseline: a per-token group baseline weighted by the path's realized energy.

Li, Xu et al. 2026, arXiv 2602.07078 (verl's ``adv_estimator=optimal_token_baseline``). Per prompt
group and token position t (verl ``docs/algo/otb.md``):

    Â_it = G_it − B_t,      B_t = Σ_j G_jt·W_jt / (Σ_j W_jt + ε),      W_it = Σ_{s ≤ t} w_is,
    w_is = ‖e_{y_s} − π_s‖² = 1 − 2·π_s(y_s) + Σ_v π_s(v)²    (the logit-gradient proxy),

π = π_old over the whole vocabulary at the rollout temperature, from π_old's scoring pass (the entry
needs ``old_sum_pi_sq``; verl's actor computes Σπ² in its old-log-prob pass). ``is_scaling``: where the
trainer's ``loss.is_correction`` gives an importance weight ρ̄_t (μ → π_old), w_t is scaled by
ρ̄_t² (verl's ``rollout_is_weights``: the baseline that minimises the MSE under truncated IS). The
``token_*`` and ``seq_*`` weights are verl's (TIS: truncated above at ``is_high``; MIS: 0 outside the
band, as verl's masked weights); the ``geo_*`` weights have no verl counterpart, squared the same way.

G_it the return-to-go (the outcome reward on every policy token, plus the in-reward KL when
``kl_where = reward``), the sums over the group's samples that have a token at t. Trajectories with
more accumulated uncertainty weigh more in the baseline, so the baseline tracks what each position
predicts. ``handle_zero_tail``: a group's unique longest response gets B = 0 beyond the second
longest (else its tail would be its own baseline, Â ≈ 0). A singleton group keeps Â = G.
``variant``: ``otb`` aligns t by response column (verl ``optimal_token_baseline``); ``tir`` (the
tool-integrated form, verl ``tir_optimal_token_baseline``) by the index of the policy token, so
tool observations inside a response do not shift the positions that are compared.

Differs from GRPO (``algorithms/grpo.py``) by: 1. a per-token baseline (the group mean weighted by
W_t) instead of the per-sequence z-score: no std scaling, and equal rewards give Â ≈ 0 but not
exactly (ε; and the zero tail), so not ``group_relative``; 2. verl's defaults: PPO clip 0.2 with dual
clip 3, token-mean, no KL.

Fidelity: ``code`` — verl 0.9.1 ``verl/trainer/ppo/core_algos.py``
(``compute_optimal_token_baseline_advantage``, ``compute_multi_turn_optimal_token_baseline_advantage``:
ε = 1e-8, ``handle_zero_tail = True``, W scaled by ``rollout_is_weights``²),
``verl/trainer/ppo/ray_trainer.py`` (π from ``old_log_probs``, Σπ² from the actor's old-log-prob
pass), ``verl/workers/engine/fsdp/transformer_impl.py`` (Σπ² from the temperature-scaled logits),
``verl/utils/torch_functional.py`` (``calculate_sum_pi_squared_from_logits``); ``docs/algo/otb.md``
and ``examples/otb_trainer/run_qwen2_5-7b.sh`` of volcengine/verl at b178a3c (2026-01-29; no KL loss,
entropy 0, the vanilla policy loss). Checked against verl 0.9.1's two functions on the inputs of
``tests/algorithms/test_otb.py``. ``energy = behaviour_topk`` with ``is_scaling = false`` is this
suite's earlier reading (before 2026-12-07): π_t = μ(y_t) and Σπ² over the behaviour's top-K
(``rollout.topk``; a lower bound short by at most (1 − Σ_K μ)·μ_(K)) — no Σπ² field, a departure
from verl.
Metrics: ``algo/otb/{baseline_mean, energy_mean}`` (mean B_t and W_t over policy tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.algorithms.remax import returns_to_go
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, masked_mean
from rlsuite.suite.types import Batch, Forward


def token_energy(logp: torch.Tensor, sum_sq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The logit-gradient proxy ``w_t = 1 − 2·π(y_t) + Σ_v π(v)²`` per policy token.
    Shapes: logp (log π(y_t)), sum_sq (Σ_v π(v)²), mask [B, T] → [B, T] (0 off the mask)."""
    return (1 - 2 * torch.exp(logp) + sum_sq) * mask


def optimal_token_baseline(returns: torch.Tensor, energy: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                           start: int = 0, align: Literal["column", "token"] = "column", zero_tail: bool = True,
                           eps: float = 1e-8) -> torch.Tensor:
    """OTB advantage ``(G_t − B_t)·mask`` with ``B_t = Σ_j G_jt·W_jt / (Σ_j W_jt + eps)`` over the
    group, ``W`` the cumulative sum of ``energy`` along the row. ``align``: t is the column (from
    ``start``, the first response column: verl's non-TIR form) or the index of the policy token (verl's
    TIR form, which also leaves rows without a policy token out of their group). ``zero_tail``: the
    group's unique longest row gets B = 0 from the second-longest length on. Singleton: B = 0.
    Shapes: returns, energy, mask [B, T]; group_ids [B] → [B, T]."""
    B, T = mask.shape
    W = torch.cumsum(energy * mask, -1)
    lengths = mask.sum(-1).long()
    if align == "column":
        G_c, W_c, M_c = returns[:, start:] * mask[:, start:], W[:, start:], mask[:, start:]
        rows_in = torch.ones(B, dtype=torch.bool, device=mask.device)
    else:  # compact each row to its policy tokens, in order
        L = int(lengths.max()) if B else 0
        G_c, W_c = returns.new_zeros(B, L), W.new_zeros(B, L)
        r, c = torch.nonzero(mask > 0, as_tuple=True)
        k = (torch.cumsum(mask, -1) - 1)[r, c].long()
        G_c[r, k], W_c[r, k] = returns[r, c], W[r, c]
        M_c = (torch.arange(L, device=mask.device)[None, :] < lengths[:, None]).to(mask.dtype)
        rows_in = lengths > 0
    base = torch.zeros_like(G_c)
    for g in torch.unique(group_ids).tolist():
        idx = torch.nonzero((group_ids == g) & rows_in).flatten()
        if idx.numel() < 2:
            continue
        num = (G_c[idx] * W_c[idx] * M_c[idx]).sum(0)
        den = (W_c[idx] * M_c[idx]).sum(0) + eps
        base[idx] = (num / den)[None, :]
        if zero_tail:
            lens = lengths[idx]
            top, second = torch.sort(lens).values[-2:].tolist()[::-1]
            longest = torch.nonzero(lens == top).flatten()
            if longest.numel() == 1 and top > second:
                base[idx[longest[0]], second:] = 0.0
    if align == "column":
        full = torch.zeros_like(returns)
        full[:, start:] = base
    else:
        full = torch.zeros_like(returns)
        full[r, c] = base[r, k]
    return (returns - full) * mask


@dataclass(frozen=True, kw_only=True)
class OTBConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)", "epsilon": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip bound c for Â < 0 (verl ``clip_ratio_c``, on in its vanilla policy loss); None = off."""
    variant: Literal["otb", "tir"] = "otb"
    """Positions compared across a group: response columns (``otb``) or policy-token indices (``tir``,
    the tool-integrated form: observations inside a response do not shift them)."""
    handle_zero_tail: bool = True
    """B = 0 on a group's unique longest response beyond the second-longest length (verl's default)."""
    epsilon: float = 1e-8
    """ε added to Σ W_t in the baseline's divisor (verl 1e-8)."""
    energy: Literal["pi_old", "behaviour_topk"] = "pi_old"
    """Where w_t's π comes from: ``pi_old`` — π_old(y_t) and Σπ² over the whole vocabulary from π_old's
    scoring pass (verl); ``behaviour_topk`` — μ(y_t) and Σπ² over the behaviour's top-K (``rollout.topk``
    > 0; no Σπ² pass; a lower bound of Σπ²)."""
    is_scaling: bool = True
    """Scale w_t by ρ̄_t², the trainer's importance weight (``loss.is_correction`` ``*_tis`` / ``*_mis``),
    where there is one (verl's ``rollout_is_weights``); either energy."""
    aggregation: AggMode = "token-mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")


@register
class OTB(Algorithm):
    name = "otb"
    summary = "Per-token group baseline weighted by cumulative 1 − 2π + Σπ² (verl's optimal token baseline); PPO clip."
    citation = ("Li, Xu, Li, Liu, Liu, Tong, Zheng, Xue, Zhang, Cai, Zhang, Liu, Wang 2026, The Optimal Token "
                "Baseline: Variance Reduction for Long-Horizon LLM-RL, arXiv:2602.07078")
    fidelity = "code"
    assumptions = ()
    not_group_relative = ("a per-token baseline: equal rewards give Â = G·ε/(ΣW + ε), and a group's unique longest "
                          "response keeps its return beyond the second longest (handle_zero_tail)")
    switches = ("variant", "handle_zero_tail", "energy", "is_scaling")
    inert = {"variant": "the two alignments differ only when observations sit inside a response (multi-turn "
                        "tasks; tests/algorithms/test_otb.py)",
             "is_scaling": "acts only with a trainer-level importance weight (loss.is_correction *_tis or *_mis)"}
    Config = OTBConfig
    cfg: OTBConfig

    @property
    def old_logp_before_update(self) -> bool:  # type: ignore[override]
        """Its advantages read π_old(y_t) and π_old's Σπ² with ``energy = pi_old`` (μ's with ``behaviour_topk``)."""
        return self.cfg.energy == "pi_old"

    @property
    def needs(self) -> frozenset[str]:
        extra = {"old_sum_pi_sq"} if self.cfg.energy == "pi_old" else {"topk"}
        return super().needs | {"old_logp"} | extra

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, mask = self.cfg, batch.loss_mask
        if c.energy == "pi_old":
            if batch.old_sum_pi_sq is None or batch.old_logp is None:
                raise ValueError("otb (energy=pi_old) needs π_old's log-probs and Σπ² from the scoring pass")
            energy = token_energy(batch.old_logp, batch.old_sum_pi_sq, mask)
        else:
            if batch.topk_logp is None:
                raise ValueError("otb (energy=behaviour_topk) needs the behaviour's top-K log-probs for Σπ²: "
                                 "set rollout.topk > 0")
            energy = token_energy(batch.behav_logp, torch.exp(2 * batch.topk_logp).sum(-1), mask)
        if c.is_scaling and "is_weight" in batch.extras:
            energy = energy * batch.extras["is_weight"] ** 2
        returns = (broadcast_to_tokens(batch.rewards, mask) if batch.token_rewards is None
                   else returns_to_go(batch.token_rewards, mask))
        adv = optimal_token_baseline(returns, energy, mask, batch.group_id, batch.prompt_width,
                                     "column" if c.variant == "otb" else "token", c.handle_zero_tail, c.epsilon)
        m = {"algo/otb/baseline_mean": float(masked_mean(returns - adv, mask)),
             "algo/otb/energy_mean": float(masked_mean(torch.cumsum(energy, -1), mask))}
        return AdvOut(adv=adv, returns=returns, metrics=m)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)
