"""GDPO — Group reward-Decoupled normalization Policy Optimization (Liu et al. 2026, arXiv 2601.05242).

GDPO z-scores each of K reward components separately within the group, sums them with weights,
and whitens the sum over all policy tokens of the batch:

    A_k,i = (r_k,i − mean_G r_k) / (std_G r_k + 1e-6),   Â_it = whiten_batch(Σ_k w_k·A_k,i)_t,

``whiten_batch(x) = (x − mean)/sqrt(var + 1e-8)`` over the batch's policy tokens (token-weighted
mean, Bessel-corrected variance: ``rlsuite.suite.ops.masked_whiten``). The components are the
task's named reward components (``Task.reward_components``, carried by each grade's
``Grade.components`` into ``Batch.reward_components``), chosen by ``reward_keys`` with weights
``reward_weights`` (1 each by default): e.g. ``chain``'s ``correct`` (the exact answer) and
``format`` (a well-formed trace), ``--set algo.reward_keys=[correct,format]``. Decoupling keeps a
component with a small spread from being drowned by one with a large spread, and keeps distinct
combinations of component values from collapsing to one advantage, as the z-score of their sum
would. A key the task does not report is refused at resolution (exit 2, listing its components).

With no ``reward_keys`` (the default) K = 1 and the one component is the suite's shaped reward
``batch.rewards``: GDPO then reduces to **GRPO's z-score followed by batch whitening** — not
GRPO itself: the whitening shifts every advantage by the token-weighted batch mean of the
z-scores (longer responses weigh more) and rescales by their token std, so a group of equal
rewards gets ``−mean/std`` of the batch (the same value on all its tokens) instead of 0, and
exactly 0 only when every group of the batch is equal. Loss: PPO clipped surrogate (ε 0.2 both
sides, dual clip c = 3 for Â < 0: verl's ``clip_ratio_c``), token-mean, no KL (verl 0.9.1
defaults; its GDPO example launcher sets no KL either).

Differs from GRPO by: 1. per-component group normalisation, then a weighted sum; 2. batch
whitening of that sum; 3. token-mean, no KL.

Fidelity: ``code`` — verl 0.9.1 ``compute_gdpo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``;
``algorithm.gdpo_reward_keys`` / ``gdpo_reward_weights`` in ``verl/trainer/config/algorithm.py``):
with ``reward_keys`` its per-key path (each key a raw score from the reward function's dict, one
GRPO z-score per key, weights default 1), without them its ``score_list = [token_level_rewards]``
path; values on the same inputs in ``tests/algorithms/test_gdpo.py``. TRL 1.16.0's
``multi_objective_aggregation="normalize_then_sum"`` (``GRPOTrainer``, ``trl/trainer/grpo_trainer.py``;
``reward_weights`` in ``grpo_config.py``) is the same decoupling with its own constants: ε = 1e-4
in the group std, and the weighted sum standardised over the batch's *sequences* (mean and std of
one value per completion, ε 1e-4) where verl whitens over tokens; not what this entry computes.
[ASSUMPTION] with no ``reward_keys`` the one component is the suite's shaped reward
(``batch.rewards``, which holds the in-reward KL when ``kl_where = reward``); verl reads each
named component's raw score, and so does this entry with ``reward_keys``: an in-reward KL and an
entry's ``rewards`` hook then never reach the advantage (the two agree at the default, no KL).
Statistics in float64; an all-equal batch gets exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_whiten
from rlsuite.suite.types import Batch, Forward

_WHEN_SET = {"identity": "when_set"}  # in the run id only when set: gdpo's recorded ids stay


@dataclass(frozen=True, kw_only=True)
class GDPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)",
              "reward_weights": "(-inf, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio (verl ``clip_ratio_low``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (verl ``clip_ratio_high``)."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip bound c for Â < 0 (verl ``clip_ratio_c``, always on in its vanilla policy loss); None = off."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std before the whitening (verl ``norm_adv_by_std_in_grpo``)."""
    reward_keys: tuple[str, ...] = field(default=(), metadata=_WHEN_SET)
    """The reward components normalised separately, by name, from the task's ``reward_components``
    (verl ``gdpo_reward_keys``; TRL: one reward function each), read raw from the grades; empty: the
    one component ``batch.rewards`` (K = 1)."""
    reward_weights: tuple[float, ...] = field(default=(), metadata=_WHEN_SET)
    """w_k of the weighted sum, one per ``reward_keys`` entry (verl ``gdpo_reward_weights``, TRL
    ``reward_weights``); empty: 1 each."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")
        if len(set(self.reward_keys)) != len(self.reward_keys):
            raise ValueError(f"reward_keys must name each component once, got {list(self.reward_keys)}")
        if self.reward_weights and len(self.reward_weights) != len(self.reward_keys):
            raise ValueError(f"reward_weights must give one weight per reward_keys entry ({len(self.reward_keys)}), "
                             f"got {list(self.reward_weights)}; or none (1 each)")


@register
class GDPO(Algorithm):
    name = "gdpo"
    summary = ("GDPO: each reward component z-scored in its group, weighted sum whitened over the batch's tokens "
               "(one component by default); PPO clip, token-mean, no KL.")
    citation = ("Liu et al. 2026, GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward "
                "RL Optimization, arXiv:2601.05242")
    fidelity = "code"
    assumptions = (
        "Without reward_keys, one reward component: the suite's shaped reward (in-reward KL included when "
        "configured); verl reads each component's raw score, as this entry does with reward_keys",
    )
    inert = {"reward_keys": "needs a task with named reward components (the contract batch has none); "
                            "covered by tests/algorithms/test_gdpo.py",
             "reward_weights": "used only with reward_keys; covered by tests/algorithms/test_gdpo.py"}
    switches = ("scale_by_std",)
    group_relative = True
    Config = GDPOConfig
    cfg: GDPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    @classmethod
    def task_problems(cls, cfg: GDPOConfig, task: type) -> list[str]:
        have = tuple(getattr(task, "reward_components", ()))
        unknown = [k for k in cfg.reward_keys if k not in have]
        if not unknown:
            return []
        valid = ", ".join(have) if have else "none (it reports one reward; leave reward_keys empty)"
        return [f"algo.reward_keys: {', '.join(map(repr, unknown))} not among the reward components of task "
                f"'{getattr(task, 'name', '?')}'; valid: {valid}"]

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, mask = self.cfg, batch.loss_mask
        if not c.reward_keys:  # K = 1: the shaped reward
            z = group_normalised_advantage(batch.rewards, batch.group_id, c.scale_by_std)  # [B]
            return AdvOut(adv=masked_whiten(broadcast_to_tokens(z, mask), mask))
        comps = batch.reward_components
        missing = [k for k in c.reward_keys if k not in comps]
        if missing:
            raise ValueError(f"algo.reward_keys {missing}: not among the batch's reward components "
                             f"({', '.join(comps) or 'none'})")
        weights = c.reward_weights or (1.0,) * len(c.reward_keys)
        z = torch.zeros(batch.batch_size, dtype=torch.float64, device=mask.device)  # [B] Σ_k w_k·A_k
        for k, w in zip(c.reward_keys, weights):
            r = comps[k].to(device=mask.device, dtype=torch.float64)  # [B] raw component
            z = z + w * group_normalised_advantage(r, batch.group_id, c.scale_by_std)
        return AdvOut(adv=masked_whiten(broadcast_to_tokens(z, mask), mask).to(batch.rewards.dtype))

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)
