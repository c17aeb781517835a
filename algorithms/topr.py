"""TOPR — Tapered Off-Policy REINFORCE (Le Roux, Bellemare et al. 2025, arXiv 2503.14286).

REINFORCE that treats positive and negative samples asymmetrically (paper Eq. 8):

    ∇J = Σ_{τ ∈ T+} μ(τ)·Â(τ)·∇log π(τ)  +  Σ_{τ ∈ T−} μ(τ)·[π(τ)/μ(τ)]_0^1·Â(τ)·∇log π(τ)

Per token (minimised): ``ℓ_t = −w+·Â_i·log π_t`` on the positive samples (plain SFT-like update, no
ratio) and ``ℓ_t = −w−·sg(clip(ρ, 0, 1))·Â_i·log π_t`` on the negative ones, with ρ = π_θ/π_old per
token (``ratio = token``, ROLL) or the sequence ratio exp Σ_t (log π_θ − log π_old) (``sequence``,
the paper's π(τ)/μ(τ)). A negative sample whose probability already fell below its sampling
probability is pushed down less and less, so off-policy training with negatives cannot collapse
the log-probs (the paper's Prop. 3.2), while positives always get the full update.

``split``: ``score`` — T+ = samples whose task score is > 0 (ROLL); ``advantage`` — T+ = Â ≥ 0 (the
paper, whose sets are the sign of the baselined reward). ``advantage``: ``grpo`` (group z-score) or
``reward`` (R − ``reward_baseline``, the paper's REINFORCE with a constant baseline c).

Differs from GRPO (``algorithms/grpo.py``) by: 1. no clipped surrogate: REINFORCE with a truncated,
detached ratio on negatives only; 2. no KL (β = 0); 3. the ``score`` split.

Fidelity: ``code`` — ROLL (alibaba/ROLL, snapshot 8eb27cc, 2026-08-19): ``pg_variant: topr`` in
``roll/pipeline/rlvr/actor_pg_worker.py`` and ``roll/pipeline/agentic/agentic_actor_pg_worker.py``
(``_compute_topr_loss``: split by ``scores > 0``, token ratio π/π_old clamped to [0, 1] and
detached, weights ``topr_positive_weight``/``topr_negative_weight`` = 1.0 from
``roll/configs/worker_config.py``, one aggregation of the summed per-token loss with
``loss_agg_mode`` = seq-mean-token-mean, ROLL's default, and ``use_kl_loss`` off by default),
``docs_roll/docs/User Guides/Algorithms/TOPR.md`` and ``examples/qwen2.5-7B-rlvr-offpolicy/rlvr_config.yaml``.
ROLL's page still lists the older RLVR knobs (``rl_loss_coef``, ``positive_loss_coef``,
``use_topr_neg_loss_coef``; code before commit 3077bef) which aggregated the positive and negative
parts each over its own subset; this entry follows the current ``pg_variant`` code (one normaliser
over the batch, as in the paper's sum). [ASSUMPTION]s: the advantage is GRPO's z-score by default
(ROLL takes whatever its estimator gives — its off-policy example uses batch-whitened REINFORCE
returns clipped to ±2 —, the paper R − c); the paper's μ is π_old here, as in ROLL (for the engine's
μ on stale rows add ``loss.is_correction``). Metrics: ``algo/topr/{positive_frac,
negative_clip_frac}`` (share of negative tokens whose ratio ρ > 1 is truncated to 1; ROLL's
``topr_negative_upper_clipfrac``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage, masked_mean, masked_sum
from rlsuite.suite.types import Batch, Forward


def topr_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
              positive: torch.Tensor, w_pos: float = 1.0, w_neg: float = 1.0,
              ratio: Literal["token", "sequence"] = "token") -> tuple[torch.Tensor, torch.Tensor]:
    """TOPR's per-token loss ``−w+·Â·log π`` on positive rows and ``−w−·sg(clip(ρ, 0, 1))·Â·log π``
    on the others, ρ = π/π_old per token or per sequence (exp of the summed log-ratio). Returns
    (loss [B, T], 0 off the mask; the detached ratio ρ [B, T] before truncation).
    Shapes: logp, old_logp, adv, mask [B, T]; positive [B] bool."""
    log_ratio = (logp.detach() - old_logp) * mask
    if ratio == "sequence":
        log_ratio = masked_sum(log_ratio, mask, -1)[:, None].expand_as(mask)
    rho = torch.exp(log_ratio.clamp(max=20.0))
    pos = positive[:, None].to(mask.dtype)
    weight = pos * w_pos + (1 - pos) * w_neg * rho.clamp(0.0, 1.0)
    return -weight * adv * logp * mask, rho


@dataclass(frozen=True, kw_only=True)
class TOPRConfig(AlgoConfig):
    ranges = {"positive_weight": "[0, inf)", "negative_weight": "[0, inf)", "reward_baseline": "(-inf, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    positive_weight: float = 1.0
    """w+, the weight of the positive samples' loss (ROLL ``topr_positive_weight``)."""
    negative_weight: float = 1.0
    """w−, the weight of the negative samples' tapered loss (ROLL ``topr_negative_weight``)."""
    split: Literal["score", "advantage"] = "score"
    """Positive set T+: task score > 0 (ROLL) or Â ≥ 0 (the paper's sign of the baselined reward)."""
    ratio: Literal["token", "sequence"] = "token"
    """The truncated ratio on negatives: per token π/π_old (ROLL) or the sequence's π(τ)/π_old(τ) (paper)."""
    advantage: Literal["grpo", "reward"] = "grpo"
    """Â: the GRPO group z-score, or the reward minus the constant ``reward_baseline`` (the paper's form)."""
    reward_baseline: float = 0.0
    """c of ``advantage = reward``: Â = R − c (the paper's baseline, which sets the effective share of
    positives)."""
    aggregation: AggMode = "seq-mean-token-mean"


@register
class TOPR(Algorithm):
    name = "topr"
    summary = "Tapered off-policy REINFORCE: full update on positives, ratio truncated to [0, 1] on negatives; no KL."
    citation = ("Le Roux, Bellemare, Lebensold, Bergeron, Greaves, Fréchette, Pelletier, Thibodeau-Laufer, Toth, "
                "Work 2025, Tapered Off-Policy REINFORCE: Stable and efficient reinforcement learning for LLMs, "
                "arXiv:2503.14286")
    fidelity = "code"
    assumptions = ("Â = GRPO z-score by default (ROLL: its configured estimator; paper: R − c)",
                   "the paper's behaviour μ is π_old, as in ROLL's code")
    switches = ("split", "ratio", "advantage", "negative_weight")
    inert = {"reward_baseline": "used only with advantage = reward",
             "split": "with 0/1 scores and a group baseline, score > 0 ⇔ Â > 0 wherever Â ≠ 0; differs with "
                      "partial-credit scores or advantage = reward (tests/algorithms/test_topr.py)"}
    Config = TOPRConfig
    cfg: TOPRConfig

    @property
    def group_relative(self) -> bool:  # type: ignore[override]
        return self.cfg.advantage == "grpo"

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        if self.cfg.advantage == "grpo":
            adv = group_normalised_advantage(batch.rewards, batch.group_id)  # [B]
        else:
            adv = batch.rewards - self.cfg.reward_baseline
        positive = batch.scores > 0 if self.cfg.split == "score" else adv >= 0
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask), extras={"topr_positive": positive.float()},
                      metrics={"algo/topr/positive_frac": float(positive.float().mean())})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c = self.cfg
        positive = batch.extras["topr_positive"] > 0.5
        loss, rho = topr_loss(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, positive,
                                c.positive_weight, c.negative_weight, c.ratio)
        with torch.no_grad():
            neg = batch.loss_mask * (~positive)[:, None].to(batch.loss_mask.dtype)
            frac = masked_mean((rho > 1).to(neg.dtype), neg)
        return loss, {"algo/topr/negative_clip_frac": frac}
