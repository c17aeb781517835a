"""MaxRL — maximum-likelihood RL: the group-centred reward divided by the group *mean*.

Advantage of sample i of a group with mean reward R̄ (Tajwar et al. 2026, arXiv 2602.02710):

    Â_i = (R_i − R̄) / (R̄ + ε)   if R̄ > 0,      Â_i = 0   if R̄ ≤ 0,

broadcast to every token of y_i; a singleton group keeps its reward (mean 0 by the verl/SkyRL
convention, no division; prime-rl's (R − R)/R gives it 0). With 0/1 rewards and pass rate p the
correct answers get (1 − p)/p ≈ 1/p:
the gradient is unbiased for the order-G truncation of the maximum-likelihood objective log p
(G = 1: REINFORCE; G → ∞: exact maximum likelihood), so hard prompts weigh more than under GRPO's
1/std. A group with no success carries no signal.

Differs from GRPO (``algorithms/grpo.py``) by: 1. the divisor R̄ + ε instead of std + ε (and 0 for
R̄ ≤ 0); 2. SkyRL's trainer defaults: token-mean aggregation and a k3 KL loss with β = 0.001 (GRPO:
seq-mean-token-mean, β = 0.04). The loss is PPO's clipped surrogate (ε 0.2, no dual clip:
SkyRL's ``policy_loss_type: regular``).

Fidelity: ``code`` — SkyRL (NovaSky-AI/SkyRL, snapshot a956457, 2026-08-21)
``skyrl/backends/skyrl_train/utils/ppo_utils.py`` ``compute_maxrl_advantage`` (ε = 1e-6 added to
the mean; singleton → R − 0) and its trainer defaults in ``skyrl/train/config/config.py``
(``regular`` loss, ε_clip 0.2/0.2, ``token_mean``, ``use_kl_loss`` with k3 and 0.001, as in
``examples/train/algorithms/maxrl/run_maxrl_gsm8k.sh``); prime-rl (PrimeIntellect-ai/prime-rl,
snapshot 559b447, 2026-08-21) its algorithms page (``docs/``, section ``max_rl``) and
``src/prime_rl/orchestrator/algo/max_rl.py``
(no ε; R̄ ≤ 0 → 0; its RL loss is its own DPPO default, not used here). Where they differ this
entry takes prime-rl's R̄ ≤ 0 rule (SkyRL divides by ε there, which only matters for negative
rewards: with R ≥ 0, R̄ = 0 means every reward is 0 and both give 0) and SkyRL's ε (``epsilon = 0``
gives prime-rl's formula). Checked against both repositories' own test inputs in
``tests/algorithms/test_maxrl.py``. Metric: ``algo/maxrl/zero_mean_frac`` (share of samples in
groups of ≥ 2 whose mean is ≤ 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_mean_std
from rlsuite.suite.types import Batch, Forward


def mean_normalised_advantage(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """MaxRL's ``(R − mean_G R) / (mean_G R + eps)``, 0 where the group mean is ≤ 0, ``R`` for a
    singleton group. Computed in float64 (an all-equal group gets exactly 0), returned in the
    rewards' dtype. Shapes: rewards [B], group_ids [B] → [B]."""
    r = rewards.to(torch.float64)
    mean = group_mean_std(r, group_ids)[0]  # exact for an all-equal group; 0 for a singleton
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    single = counts[inv] == 1
    pos = mean > 0
    adv = torch.where(pos, (r - mean) / torch.where(pos, mean + eps, torch.ones_like(mean)), torch.zeros_like(r))
    return torch.where(single, r, adv).to(rewards.dtype)


@dataclass(frozen=True, kw_only=True)
class MaxRLConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "epsilon": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (SkyRL ``eps_clip_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (SkyRL ``eps_clip_high``)."""
    epsilon: float = 1e-6
    """ε added to the group mean in the divisor (SkyRL 1e-6; prime-rl 0)."""
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.001


@register
class MaxRL(Algorithm):
    name = "maxrl"
    summary = "Group-centred reward divided by the group mean (≈1/p weight on hard prompts), PPO clip, k3 KL loss."
    citation = ("Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning, arXiv:2602.02710")
    fidelity = "code"
    switches = ("epsilon",)
    group_relative = True
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    Config = MaxRLConfig
    cfg: MaxRLConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = mean_normalised_advantage(batch.rewards, batch.group_id, self.cfg.epsilon)  # [B]
        _, inv, counts = torch.unique(batch.group_id, return_inverse=True, return_counts=True)
        mean = group_mean_std(batch.rewards.to(torch.float64), batch.group_id)[0]
        zero = ((mean <= 0) & (counts[inv] > 1)).float().mean()
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask), metrics={"algo/maxrl/zero_mean_frac": float(zero)})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high)
