"""DPPO — Divergence Proximal Policy Optimization (Qi et al. 2026, "Rethinking the Trust Region
in LLM Reinforcement Learning", arXiv 2602.04879).

Per token, with ``p = π_θ(y_t|s_t)`` and the anchor ``q = μ(y_t|s_t)`` (the rollout policy's
probability — anchoring to μ rather than a recomputed π_old is the paper's point; switch
``anchor``), a divergence ``D`` is estimated:
  * ``tv`` (binary TV): ``|p − q|``;   ``kl`` (binary KL): ``KL(Bern(q) ‖ Bern(p))``;
  * ``topk_tv`` / ``topk_kl``: over μ's top-K tokens at that position plus one "rest" bucket,
    ``½(Σ_k|μ_k − π_k| + |μ_rest − π_rest|)`` / ``Σ_k μ_k log(μ_k/π_k) + μ_rest log(μ_rest/π_rest)``.
A token is masked (``M = 0``) only if it is outside the trust region **and** has already moved
in the direction its advantage pushes: ``A > 0``: ``D > δ`` and ``p > q``; ``A < 0``: ``D > δ`` and
``p < q`` (``direction = False`` masks whenever ``D > δ``). Loss (REINFORCE with truncated IS,
replacing the clip): ``ℓ_t = −A_t · sg(min(p/q, C)) · M_t · log π_θ(y_t|s_t)``.

Differs from PPO/GRPO by: 1. a divergence mask instead of ratio clipping; 2. truncated IS
weight ``C`` (Stable-RL 10; the paper warns small C biases against rare tokens); 3. GRPO
advantage without std (``scale_by_std = False``); 4. ``seq-mean-token-sum-norm``; no KL.
``stats/clip_frac`` is the masked fraction over tokens with A ≠ 0 (as Stable-RL);
``algo/dppo/tis_clip_frac`` the share of response tokens the loss keeps (M = 1) whose ratio is truncated
at C. Beside them, verl 0.9.1's definitions under its names (``dppo_tv`` / ``dppo_kl``):
``algo/dppo/pg_clipfrac`` = invalid tokens over *all* response tokens, a token with A = 0 taking the
A < 0 rule (verl's ``torch.where(A > 0, ...)``), and ``algo/dppo/pg_clipfrac_lower`` = tokens verl keeps
whose ratio exceeds C, over all response tokens (with ``direction = False`` both count every token
outside the region).

Fidelity: ``code`` — sail-sg/Stable-RL (all variants) and verl 0.9.1 ``dppo_tv``/``dppo_kl``
(the same direction-aware masks and ``−A·sg(min(r, C))·M·log π``; verl reads δ from
``clip_ratio_low``/``clip_ratio_high`` and C from ``clip_ratio_c``, anchored at its old
log-probs). Defaults: δ_TV 0.15, δ_KL 0.05, the same on both sides.

Source of the defaults (search tools, 2026-12-01): the authors' code sail-sg/Stable-RL (snapshot
c6af1d1, 2026-03-02: README, verl/trainer/ppo/core_algos.py) and verl's
examples/dppo_trainer/run_qwen30b_dppo.sh (verl-project/verl, read at 8f11888). Agree: δ_TV 0.15,
δ_KL 0.05, the same on both sides (example); Binary-TV as the default loss (Stable-RL); anchor μ
(``bypass_mode = True``, "recommended"); mean-only advantage (``norm_adv_by_std_in_grpo = False``);
seq-mean-token-sum-norm; no KL; C = 10 = Stable-RL's default ``clip_ratio_c``. Differs: the verl
example sets C = 1e4 ("disable dual-clip PPO and TIS for a fair comparison"); kept at Stable-RL's
10. Launch: Qwen3-30B-A3B-Base, DAPO-Math-17k, 256 prompts × 16, mini-batch 32 (8 updates a step),
LR 1e-6, max response 8192.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, broadcast_to_tokens, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward

Divergence = Literal["tv", "kl", "topk_tv", "topk_kl"]


def binary_divergence(logp: torch.Tensor, anchor_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Binary TV ``|p − q|`` or binary KL ``KL(Bern(q)‖Bern(p))`` per token. [B, T] → [B, T]."""
    p, q = logp.exp(), anchor_logp.exp()
    if kind == "tv":
        return (p - q).abs()
    eps = 1e-7
    p, q = p.clamp(eps, 1 - eps), q.clamp(eps, 1 - eps)
    return q * (q.log() - p.log()) + (1 - q) * ((1 - q).log() - (1 - p).log())


def topk_divergence(policy_topk_logp: torch.Tensor, behav_topk_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Top-K + rest-bucket TV or KL between μ and π_θ. Shapes: [B, T, K] (both) → [B, T]."""
    mu, pi = behav_topk_logp.exp(), policy_topk_logp.exp()
    mu_rest, pi_rest = (1 - mu.sum(-1)).clamp(min=1e-7), (1 - pi.sum(-1)).clamp(min=1e-7)
    if kind == "topk_tv":
        return 0.5 * ((mu - pi).abs().sum(-1) + (mu_rest - pi_rest).abs())
    return (mu * (behav_topk_logp - policy_topk_logp)).sum(-1) + mu_rest * (mu_rest.log() - pi_rest.log())


def trust_region_mask(div: torch.Tensor, logp: torch.Tensor, anchor_logp: torch.Tensor, adv: torch.Tensor,
                      delta: float, direction: bool) -> torch.Tensor:
    """``M = 1 − invalid`` (detached): invalid iff ``D > δ`` and (with ``direction``) the token moved
    the way its advantage pushes (p > q for A > 0, p < q for A < 0). [B, T] → [B, T]."""
    outside = div > delta
    if direction:
        outside = outside & (((adv > 0) & (logp > anchor_logp)) | ((adv < 0) & (logp < anchor_logp)))
    return (~outside).float().detach()


@dataclass(frozen=True, kw_only=True)
class DPPOConfig(AlgoConfig):
    ranges = {"delta_tv": "(0, 1]", "delta_kl": "(0, inf)", "tis_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    divergence: Divergence = "tv"
    """Divergence estimate: binary TV / KL, or top-K TV / KL (needs the behaviour top-K)."""
    delta_tv: float = 0.15
    """Trust-region threshold δ for the TV estimates."""
    delta_kl: float = 0.05
    """Trust-region threshold δ for the KL estimates."""
    direction: bool = True
    """Mask only tokens that already moved in their advantage's direction."""
    tis_cap: float = 10.0
    """Truncated-IS cap C on p/q (Stable-RL 10; large = effectively off)."""
    anchor: Literal["behaviour", "old"] = "behaviour"
    """q from the rollout policy μ, or from a recomputed π_old."""
    scale_by_std: bool = False
    """Divide the group-centred reward by the group std (off in the DPPO example)."""
    aggregation: AggMode = "seq-mean-token-sum-norm"


@register
class DPPO(Algorithm):
    name = "dppo"
    summary = "Divergence-based trust-region mask (binary/top-K TV or KL) with truncated IS, anchored at μ."
    citation = "Qi et al. 2026, Rethinking the Trust Region in LLM Reinforcement Learning, arXiv:2602.04879"
    fidelity = "code"
    own_mismatch_weight = "its loss weights by sg(min(π/μ, tis_cap)) and masks by a divergence from μ"
    switches = ("divergence", "direction", "tis_cap", "anchor")
    group_relative = True
    inert = {"delta_kl": "used only with divergence = kl or topk_kl (default tv)"}
    tune_knob = ("delta_tv", (0.1, 0.15, 0.2))
    Config = DPPOConfig
    cfg: DPPOConfig

    @property
    def needs(self) -> frozenset[str]:
        extra = {"old_logp"} if self.cfg.anchor == "old" else set()
        if self.cfg.divergence.startswith("topk"):
            extra.add("topk")
        return super().needs | extra

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, mask, adv = self.cfg, batch.loss_mask, batch.adv
        anchor = batch.behav_logp if c.anchor == "behaviour" else batch.old_logp
        logp = fwd.logp
        if c.divergence.startswith("topk"):
            div = topk_divergence(fwd.topk_logp.detach(), batch.topk_logp, c.divergence)
        else:
            div = binary_divergence(logp.detach(), anchor, c.divergence)
        delta = c.delta_tv if c.divergence.endswith("tv") else c.delta_kl
        m = trust_region_mask(div, logp.detach(), anchor, adv, delta, c.direction)
        ratio = torch.exp((logp.detach() - anchor).clamp(-20, 20))
        weight = ratio.clamp(max=c.tis_cap)
        loss = -adv * weight * m * logp * mask
        with torch.no_grad():
            active = mask * (adv != 0).float()
            masked = (1 - m) * active
            outside = div > delta
            if c.direction:  # verl: A > 0 takes the upper rule, A <= 0 (zero included) the lower
                outside = outside & torch.where(adv > 0, logp.detach() > anchor, logp.detach() < anchor)
            verl_kept = (~outside).float()
            metrics = {"stats/clip_frac": masked_mean(1 - m, active),
                       "stats/clip_frac_high": masked_mean(masked * (adv > 0).float(), active),
                       "stats/clip_frac_low": masked_mean(masked * (adv < 0).float(), active),
                       "stats/approx_kl": approx_kl(fwd.logp, anchor if batch.old_logp is None else batch.old_logp,
                                                    mask),
                       "algo/dppo/masked_pos_frac": masked_mean(masked * (adv > 0).float(), active),
                       "algo/dppo/masked_neg_frac": masked_mean(masked * (adv < 0).float(), active),
                       "algo/dppo/tis_clip_frac": masked_mean((ratio > c.tis_cap).float() * m, mask),
                       "algo/dppo/pg_clipfrac": masked_mean(1 - verl_kept, mask),
                       "algo/dppo/pg_clipfrac_lower": masked_mean((ratio > c.tis_cap).float() * verl_kept, mask),
                       "algo/dppo/div_mean": masked_mean(div, mask),
                       "stats/ratio_mean": masked_mean(ratio, mask)}
        return loss, metrics
