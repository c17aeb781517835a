"""ReMax — REINFORCE with the greedy response's reward as baseline (Li et al. 2023, arXiv 2310.10505).

For each prompt the trainer decodes one greedy response ȳ of the current policy (``needs``
``anchor``, charged to the budget as rollout) and the task grades it: ``b = R(x, ȳ)``. Every
sampled response y_i of that prompt gets, on each of its policy tokens t,

    Â_it = Σ_{s ≥ t, s ∈ y_i} r_is − b,

the return-to-go of the token rewards (the outcome reward R_i on the last policy token and,
with ``kl_where = reward``, ``−β·k_s`` on every policy token) minus the baseline; without the
in-reward KL this is ``R_i − b`` on every token. No whitening, no group statistics (G may be 1).
Loss: PPO clipped surrogate (ε 0.2 both sides, dual clip c = 3 for Â < 0: verl's ``clip_ratio_c``),
token-mean. KL: the k1 estimate in the reward with β = 0.001 (``use_kl_in_reward=True``,
``kl_penalty=kl``, ``kl_ctrl.kl_coef=0.001``: verl 0.9.1's ReMax example launcher; verl's config
default is no KL), no KL loss.

Implementation: ``rewards`` returns ``R_i − b`` for the group (so the trainer's token rewards
carry the baseline on the last policy token), ``advantages`` takes the return-to-go of the
token rewards. The baseline is therefore visible in the logs as
``reward/mean − reward/shaped_mean`` (the latter also holds −β·Σk when the KL is in the reward).

Differs from GRPO by: 1. a greedy-decode baseline instead of group statistics (one extra
decode per prompt); 2. token returns-to-go of the KL-shaped reward; 3. token-mean, KL in the reward.

Fidelity: ``code`` — verl 0.9.1 ``compute_remax_outcome_advantage`` with the baseline its
``RayPPOTrainer`` builds (``reward_baselines``: the reward of one ``do_sample=False`` response
of the same policy per prompt, repeated over the prompt's n samples, without KL); values in
``tests/algorithms/test_remax.py``. On multi-turn tasks the greedy anchor is a whole episode
through the task's environment (the rollout's turn limits, observations included), as verl's agent
loop runs it. Without an anchor or a grader (hooks called outside the trainer) the baseline is 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, Group, register
from rlsuite.algorithms.reinforce_pp import discounted_returns
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate
from rlsuite.suite.types import Batch, Forward


def returns_to_go(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Σ_{s≥t} r_s`` over policy tokens (masked positions skipped), 0 off the mask. [B, T] → [B, T]."""
    return discounted_returns(token_rewards * mask, mask, 1.0) * mask


@dataclass(frozen=True, kw_only=True)
class ReMaxConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip bound c for Â < 0 (verl ``clip_ratio_c``, always on in its vanilla policy loss); None = off."""
    kl_coef: float = 0.001
    kl_estimator: Literal["k1", "k2", "k3", "abs", "k1+", "k2+", "k3+", "abs+"] = "k1"
    kl_where: Literal["loss", "reward"] = "reward"


    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")


@register
class ReMax(Algorithm):
    name = "remax"
    not_group_relative = ("no group baseline: the baseline is the grade of the policy's greedy decode "
                          "(in the reward hook)")
    summary = "Baseline = grade of the policy's greedy decode per prompt; token returns-to-go, PPO clip, KL in reward."
    citation = ("Li et al. 2023, ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for "
                "Aligning Large Language Models, arXiv:2310.10505")
    fidelity = "code"
    assumptions = (
        "Without an anchor or a grader (hooks called outside the trainer) the baseline is 0",
    )
    switches = ("kl_coef",)
    Config = ReMaxConfig
    cfg: ReMaxConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp", "anchor"}

    def rewards(self, group: Group, ctx: Context) -> torch.Tensor:
        if not group.anchors or group.grade is None:
            return group.scores
        return group.scores - float(group.grade(group.anchors[0]))

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        if batch.token_rewards is None:  # outcome reward only: the return-to-go is R_i − b on every token
            return AdvOut(adv=broadcast_to_tokens(batch.rewards, batch.loss_mask))
        return AdvOut(adv=returns_to_go(batch.token_rewards, batch.loss_mask))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)
