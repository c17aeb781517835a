"""PNPO — Prefix-Normalized Policy Optimization (a reconstruction from a description).

Per token, the importance ratio is the geometric mean of the token ratios over its causal prefix
(t counts policy tokens of y_i, so tool observations are skipped):

    ρ^PN_it = (Π_{k≤t} r_ik)^{1/t} = exp((1/t) Σ_{k≤t} log r_ik),   r_ik = π_θ(y_ik)/π_old(y_ik)

At t = |y_i| it is GSPO's s_i, at t = 1 the token ratio; unlike GSPO it is causal. Objective:

    J = (1/Σ_i|y_i|) Σ_i Σ_t min(ρ^PN_it·Â_i, clip(ρ^PN_it, 1−ε_l, 1+ε_h)·Â_i),  Â = GRPO z-score

Differs from GRPO (``algorithms/grpo.py``) by:
  1. The prefix geometric-mean ratio (switch ``ratio``: token / prefix / sequence).
  2. Gradient variant 1 (``gradient = full``, default): gradients flow through every prefix
     log-prob; variant 2 (``detached``): GSPO-token style ``sg[ρ^PN]·π_θ(y_t)/sg[π_θ(y_t)]``.
  3. Clip range between GSPO's (3e-4) and GRPO's (0.2), since averaging shrinks the log-ratio by
     1/t: constant ε = 5e-3, or position-scaled ``ε_t = ε_0/√t`` (``clip_schedule = inv_sqrt``).
  4. Token-mean aggregation, no KL.
``on_policy_pg`` is False for the default (prefix, full): at π_θ = π_old token k's log-prob gets
Σ_{t≥k} 1/t of the per-token weight (same total per sequence as plain PG, shifted toward early
tokens); ``gradient = detached`` or ``ratio ∈ {token, sequence}`` give exactly the plain PG.

Fidelity: ``description`` (written before the paper was found, see below; related: MinPRO arXiv
2601.22718, CTPO arXiv 2605.07331). [ASSUMPTION]s: the clipped-surrogate loss form with Â_i;
token-mean aggregation; default ε_l = ε_h = 5e-3; ε_0 = 0.2 for the inv_sqrt schedule; t counts
policy tokens only.

Source of the defaults (search tools, 2026-12-01): the paper is Zhang, Xie, Wang, Yang, Jiang,
Yang, Wang, Xu, jasperawang, Long, Xiong, alantzhao, "Reusing Rollouts under Policy Lag:
Prefix-Normalized Policy Optimization for LLM Reinforcement Learning", arXiv 2608.01418 (v1,
Aug 2026); only its abstract and third-party summaries were read; no code found. Agrees: the ratio
(geometric mean of the likelihood ratios along each causal prefix). Setting (abstract and
summaries): long-context math, 256 prompts × 8 responses a step, 1 or 4 policy-update epochs per
rollout batch, GSPO baseline, Avg@32 on AMC23 / AIME24 / AIME25; with one epoch PNPO does not
consistently beat GSPO, with four it has the highest Avg@32 on each benchmark. Not stated in what
was read: the clip range (ε = 5e-3 stays an assumption) and the loss form; one third-party
comparison says PNPO uses the geometric mean both as the weight and as an acceptance statistic
("hard rejection"), while this entry clips ρ^PN (unverified, flagged). Launch note: the suite's
``train.epochs = 1`` is the regime where the paper reports no consistent gain; an arm in its
favourable regime needs ``train.epochs = 4`` (a trainer setting, not an entry default).
The class attributes ``citation`` and ``fidelity`` predate the find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.algorithms.gspo import sequence_log_ratio
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, clipped_surrogate, masked_mean
from rlsuite.suite.types import Batch, Forward

BUCKETS = ((1, 4), (5, 16), (17, 64), (65, 256), (257, 10**9))


def prefix_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(1/t) Σ_{k≤t} log r_k`` over policy tokens (t = policy-token index). [B, T] → [B, T], 0 off the mask."""
    t = mask.cumsum(-1).clamp(min=1)
    return ((logp - old_logp) * mask).cumsum(-1) / t * mask


@dataclass(frozen=True, kw_only=True)
class PNPOConfig(GRPOConfig):
    ranges = {"clip_eps0": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 5e-3
    clip_eps_high: float = 5e-3
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.0
    ratio: Literal["prefix", "token", "sequence"] = "prefix"
    """Importance ratio: prefix geometric mean, token ratio (PPO/GRPO), sequence (GSPO)."""
    gradient: Literal["full", "detached"] = "full"
    """Variant 1: gradients through all prefix log-probs; variant 2: sg[ρ]·π/sg[π] per token."""
    clip_schedule: Literal["constant", "inv_sqrt"] = "constant"
    """Constant ε_l/ε_h, or ε_t = clip_eps0/√t on both sides."""
    clip_eps0: float = 0.2
    """ε_0 of the inv_sqrt schedule."""


@register
class PNPO(GRPO):
    name = "pnpo"
    summary = "Causal prefix geometric-mean importance ratio, clipped per token (between GRPO and GSPO)."
    citation = ("Zhang et al. 2026, Prefix-Normalized Policy Optimization, arXiv:2608.01418 (abstract; no code); "
                "related arXiv 2601.22718, 2605.07331")
    fidelity = "description"
    assumptions = ("loss = PPO clipped surrogate on ρ^PN with the sequence advantage Â_i (GRPO z-score)",
                   "token-mean aggregation, no KL",
                   "ε_l = ε_h = 5e-3 (description: 2e-3 to 1e-2)",
                   "inv_sqrt schedule: ε_t = ε_0/√t with ε_0 = 0.2 (GRPO's ε at t = 1)",
                   "t counts policy tokens of the response (observations skipped)")
    switches = ("ratio", "gradient", "clip_schedule")
    inert = {"clip_eps0": "used only with clip_schedule = inv_sqrt (default constant)",
             "gradient": "changes the gradient, not the loss value the live-knob harness compares (see its hand "
                         "tests in tests/unit/)"}
    tune_knob = ("clip_eps_high", (2e-3, 5e-3, 1e-2))
    Config = PNPOConfig
    cfg: PNPOConfig

    @property
    def on_policy_pg(self) -> bool:  # type: ignore[override]
        return self.cfg.gradient == "detached" or self.cfg.ratio != "prefix"

    def loss(self, fwd: Forward, batch: Batch, ctx):
        c, mask = self.cfg, batch.loss_mask
        if c.ratio == "prefix":
            log_rho = prefix_log_ratio(fwd.logp, batch.old_logp, mask)
        elif c.ratio == "sequence":
            log_rho = sequence_log_ratio(fwd.logp, batch.old_logp, mask)[:, None] * mask
        else:
            log_rho = (fwd.logp - batch.old_logp) * mask
        if c.gradient == "detached":
            log_rho = log_rho.detach() + (fwd.logp - fwd.logp.detach()) * mask
        pos = mask.cumsum(-1)  # policy-token index t
        if c.clip_schedule == "inv_sqrt":
            eps_l = eps_h = c.clip_eps0 / pos.clamp(min=1).sqrt()
        else:
            eps_l, eps_h = c.clip_eps_low, c.clip_eps_high
        # clipped_surrogate takes (logp, old_logp): pass the ratio's log against 0 (tensor ε broadcast)
        loss, metrics = clipped_surrogate(log_rho, torch.zeros_like(log_rho), batch.adv, mask, eps_l, eps_h)
        metrics["stats/approx_kl"] = approx_kl(fwd.logp, batch.old_logp, mask)  # per token, not of ρ^PN
        with torch.no_grad():
            rho, adv = log_rho.detach().clamp(-20, 20).exp(), batch.adv
            clipped = (((rho > 1 + eps_h) & (adv > 0)) | ((rho < 1 - eps_l) & (adv < 0))).float()
            for lo, hi in BUCKETS:
                b = mask * ((pos >= lo) & (pos <= hi)).float()
                if b.sum() > 0:
                    tag = f"{lo}_{hi}" if hi < 10**9 else f"{lo}_up"
                    metrics[f"algo/pnpo/clip_frac_pos_{tag}"] = masked_mean(clipped, b)
                    metrics[f"algo/pnpo/ratio_mean_pos_{tag}"] = masked_mean(rho, b)
                    metrics[f"algo/pnpo/ratio_absdev_pos_{tag}"] = masked_mean((rho - 1).abs(), b)
        return loss, metrics
