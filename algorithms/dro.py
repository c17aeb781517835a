"""DRO — Direct Reward Optimization with a quadratic log-ratio penalty, as verl 0.9.1's policy loss
``dro`` (Richemond et al. 2024, arXiv 2405.19107; Kimi Team 2025, arXiv 2501.12599, whose policy
mirror-descent loss has the same gradient form; Tinker's ``dro`` loss, which cites both, is the same
per-token formula with the sampler's log-probs in place of π_old's).

Objective (maximised), per policy token, with ``δ_it = log π_θ(y_it) − log π_old(y_it)``:

    J = mean_tokens[ log π_θ(y_it)·Â_it − ½·β·δ_it² ]

Its gradient ``(Â_it − β·δ_it)·∇log π`` is REINFORCE whose advantage shrinks as the policy moves
away from π_old: a soft, quadratic trust region in place of the clip. At π_θ = π_old it is the
plain policy gradient.

Differs from GRPO (``grpo.py``) by:
  1. No ratio and no clip: ``log π·Â`` plus the penalty (the penalty also acts on tokens with
     Â = 0, as in verl and Tinker).
  2. Token-mean aggregation (verl's ``loss_agg_mode`` default), no KL to π_ref.

Metrics: ``stats/approx_kl`` (verl's ``ppo_kl``), ``algo/dro/penalty`` (mean ½βδ²).

Fidelity: ``code`` — verl 0.9.1 ``compute_policy_loss_dro``; loss and gradient checked on the same
inputs (``tests/algorithms/test_dro.py``). [ASSUMPTION] β = 0.05: verl has no default
(``policy_loss.dro_beta: null`` and the loss refuses β ≤ 0); 0.05 is the value of the usage example
of the verl pull request that added the loss (verl-project/verl#7245) and of Tinker's DRO docs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import AlgoConfig, register
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, masked_mean
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class DROConfig(AlgoConfig):
    ranges = {"beta": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    beta: float = 0.05
    """β of the quadratic penalty ½β(log π − log π_old)² (verl ``policy_loss.dro_beta``)."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std (GRPO z-score)."""
    aggregation: AggMode = "token-mean"


@register
class DRO(GRPO):
    name = "dro"
    summary = "REINFORCE log π·Â with a quadratic penalty ½β(log π − log π_old)² instead of a clip (verl dro)."
    citation = ("Richemond et al. 2024, Offline Regularised Reinforcement Learning for Large Language Models "
                "Alignment, arXiv:2405.19107; verl 0.9.1 compute_policy_loss_dro")
    fidelity = "code"
    assumptions = ("β = 0.05: verl has no default (dro_beta null); the value of verl PR #7245's usage example "
                   "and of Tinker's DRO docs",)
    switches = ("beta",)
    tune_knob = ("beta", (0.01, 0.05, 0.2))
    Config = DROConfig
    cfg: DROConfig

    def loss(self, fwd: Forward, batch: Batch, ctx):
        mask = batch.loss_mask
        penalty = 0.5 * self.cfg.beta * (fwd.logp - batch.old_logp).square()
        with torch.no_grad():
            metrics = {"stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "algo/dro/penalty": masked_mean(penalty, mask)}
        return -(fwd.logp * batch.adv - penalty) * mask, metrics
