"""RAFT++ — reward-ranked fine-tuning with importance sampling and clipping (Xiong et al. 2025).

RAFT trains only on the accepted (positively rewarded) samples; RAFT++ adds PPO's ratio and clip
so the accepted samples can be reused over mini-batches. Per token (maximised):

    J = E[ 1{Â_i > 0} · min(r_it·Â_i, clip(r_it, 1 − ε_low, 1 + ε_high)·Â_i) ] − β·k3,   r = π_θ/π_old

with the sign rule that keeps a sample when its advantage is positive and zeroes it otherwise
(:func:`sign_acceptance` with a+ = 1, a− = 0; the rows stay in the normaliser). ``advantage``:
``reward`` Â_i = R_i (ROLL's documented ``adv_estimator: reinforce`` with no normalisation: under
0/1 rewards, weight 1 on every correct answer, 0 on the wrong ones — rejection sampling), or
``grpo`` Â_i = the GRPO z-score (the samples better than their group mean; the RAFT++ regime of
``algorithms/entrocraft.py``, which uses the same :func:`sign_acceptance`).

Differs from GRPO (``algorithms/grpo.py``) by: 1. no negative samples (their advantage is 0);
2. default ``advantage = reward``: no group baseline, so an all-correct group still trains (not
``group_relative``); 3. β = 0.001 and seq-mean-token-mean (ROLL's RAFT++ page).

Fidelity: ``code`` — ROLL (alibaba/ROLL, snapshot 8eb27cc, 2026-08-19): ``docs_roll/docs/User
Guides/Algorithms/RAFT_Plus_Plus.md``, ``examples/docs_examples/example_raft_pp.yaml``,
``roll/utils/functionals.py`` (``compute_advantage``, ``reward_postprocess``) and
``roll/pipeline/rlvr/rewards/math_rule_reward_worker.py`` (0/1 rewards). Agree: PPO clip 0.2
(ROLL's dual clip acts on Â < 0 only, so never here), k3 KL loss β = 0.001,
``seq-mean-token-mean``, one epoch. Differs: ROLL's page first named ``adv_estimator: reinforce``
with no reward normalisation (and ``seq-mean-token-sum``; still so on its published site); commits
1a5f6c5 (2025-09-23) and cec5234 (2025-10-27) changed it to ``grpo`` — whose ``reward_postprocess``
forces group mean/std normalisation, i.e. plain GRPO with negatives — so the rejection rule is only
in the earlier form; this entry keeps it (``advantage = reward``) and offers the z-score as
``grpo``. The paper's own RAFT++ loss was known from its abstract and summaries only. ROLL's ``advantage_clip: 2.0``
and ``reward_clip: 10`` are not applied (inactive for 0/1 rewards; with ``grpo`` the clip would
cap z-scores above 2). Paper: Xiong, Yao, Xu, Pang, Wang, Sahoo, Li, Jiang, Zhang, Xiong, Dong
2025, "A Minimalist Approach to LLM Reasoning: from Rejection Sampling to Reinforce",
arXiv 2504.11343. Metric: ``algo/raft_pp/accepted_frac`` (share of samples with Â > 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage
from rlsuite.suite.types import Batch, Forward


def sign_acceptance(adv: torch.Tensor, accept_pos: float, accept_neg: float,
                    u: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Which samples a rejection by advantage sign keeps: Â > 0 when ``u < a+``, Â < 0 when
    ``u < a−``, Â = 0 always. ``u``: uniform draws in [0, 1) (None: all 0, so a+ = 1 keeps every
    positive and a− = 0 drops every negative — RAFT++'s rule). Shapes: adv [B], u [B] → [B] bool."""
    u = torch.zeros_like(adv) if u is None else u
    return torch.where(adv > 0, u < accept_pos, torch.where(adv < 0, u < accept_neg,
                                                            torch.ones_like(u, dtype=torch.bool)))


@dataclass(frozen=True, kw_only=True)
class RaftPPConfig(AlgoConfig):
    ranges = {"clip_eps": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps: float = 0.2
    """ε of the clipped ratio [1 − ε, 1 + ε] (ROLL ``pg_clip``); only 1 + ε binds, every Â being ≥ 0."""
    advantage: Literal["reward", "grpo"] = "reward"
    """The weight of an accepted sample: its reward R (ROLL's ``reinforce`` estimator, no
    normalisation) or the GRPO z-score; samples whose weight is ≤ 0 are zeroed."""
    aggregation: AggMode = "seq-mean-token-mean"
    kl_coef: float = 0.001


@register
class RaftPP(Algorithm):
    name = "raft_pp"
    summary = "RAFT++: train only on positive-advantage samples (reward or z-score) with the PPO clipped ratio."
    citation = ("Xiong et al. 2025, A Minimalist Approach to LLM Reasoning: from Rejection Sampling to "
                "Reinforce, arXiv:2504.11343")
    fidelity = "code"
    assumptions = ("ROLL's advantage_clip 2.0 and reward_clip 10 are not applied",)
    not_group_relative = ("advantage = reward (default): an accepted sample's weight is its reward, with no group "
                          "baseline (an all-correct group trains on every sample)")
    switches = ("advantage",)
    tune_knob = ("clip_eps", (0.1, 0.2))
    Config = RaftPPConfig
    cfg: RaftPPConfig

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
            adv = batch.rewards
        keep = sign_acceptance(adv, 1.0, 0.0)
        return AdvOut(adv=broadcast_to_tokens(adv * keep.to(adv.dtype), batch.loss_mask),
                      metrics={"algo/raft_pp/accepted_frac": float((adv > 0).float().mean())})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, self.cfg.clip_eps,
                                 self.cfg.clip_eps)
