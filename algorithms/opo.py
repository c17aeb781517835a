"""OPO — On-Policy RL with the Optimal reward baseline (Hao et al. 2025, arXiv 2505.23585).

Advantage (outcome reward, no std scaling): the group baseline is the *length-weighted* mean of
the group's rewards,

    b = Σ_j |y_j|·R_j / Σ_j |y_j|,      Â_i = R_i − b      (broadcast to every token of y_i),

the variance-minimising baseline when each token's gradient contributes equally (the paper's
"optimal reward baseline"); ``|y_j|`` counts policy tokens (the loss mask). A singleton group
gets ``b = 0`` (verl), a group of equal rewards exactly ``Â = 0``. Loss: PPO clipped surrogate
(ε 0.2 both sides, dual clip c = 3 for Â < 0: verl's ``clip_ratio_c``), token-mean, no KL —
verl 0.9.1's defaults for ``adv_estimator=opo``, the configuration its OPO page gives
(``use_kl_loss: False``, entropy 0).

Differs from GRPO by: 1. the length-weighted group mean instead of the mean; 2. no std scaling;
3. token-mean, no KL.

Fidelity: ``code`` — checked against verl 0.9.1 ``compute_opo_outcome_advantage`` (values in
``tests/algorithms/test_opo.py``). The paper's "exact on-policy training" (one
update per rollout batch: verl's ``ppo_mini_batch_size = train_batch_size``) is a trainer
setting here (``train.minibatches = 1``, ``train.epochs = 1``), not enforced by the entry; with
it the clip never binds. Differences from verl's code: statistics in float64 (verl: the
rewards' dtype), an all-equal group gets exactly 0 (verl can keep a rounding residual of
``b``), and a group whose rows all have zero length gets ``b = 0`` (verl: 0/0 = NaN, on rows
whose advantage is masked out anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_all_equal
from rlsuite.suite.types import Batch, Forward


def length_weighted_advantage(rewards: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``R_i − Σ_j l_j R_j / Σ_j l_j`` over i's group; baseline 0 for a singleton (or all-empty)
    group; exactly 0 for a group of ≥ 2 equal rewards. Float64 inside, the rewards' dtype out.
    Shapes: rewards, lengths, group_ids [B] → [B]."""
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    r, w = rewards.to(torch.float64), lengths.to(torch.float64)
    num = torch.zeros(counts.shape, dtype=torch.float64, device=r.device).index_add_(0, inv, w * r)
    den = torch.zeros(counts.shape, dtype=torch.float64, device=r.device).index_add_(0, inv, w)
    base = torch.where((counts > 1) & (den > 0), num / den.clamp(min=1e-300), torch.zeros_like(num))[inv]
    equal = group_all_equal(r, group_ids) & (counts[inv] > 1)
    return torch.where(equal, torch.zeros_like(r), r - base).to(rewards.dtype)


@dataclass(frozen=True, kw_only=True)
class OPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip bound c for Â < 0 (verl ``clip_ratio_c``, always on in its vanilla policy loss); None = off."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")


@register
class OPO(Algorithm):
    name = "opo"
    summary = "Length-weighted group-mean baseline (optimal reward baseline), no std; PPO clip, token-mean, no KL."
    citation = "Hao et al. 2025, On-Policy RL with Optimal Reward Baseline, arXiv:2505.23585"
    fidelity = "code"
    group_relative = True
    Config = OPOConfig
    cfg: OPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = length_weighted_advantage(batch.rewards, batch.loss_mask.sum(-1), batch.group_id)  # [B]
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)
