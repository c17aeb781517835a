"""OPD — on-policy distillation: the student samples, a frozen teacher scores the student's tokens,
and the student follows the per-token reverse KL (Agarwal et al. 2024, GKD, arXiv:2306.13649, with
the reverse KL on student samples; Lu & Thinking Machines Lab 2025, "On-Policy Distillation").

Objective (minimised), per sampled token ``y_t`` of the student's own completions:

    ℓ_t = max(−A_t·r_t, −A_t·clip(r_t, 1−ε, 1+ε))   (and ≤ −3·A_t when A_t < 0: dual clip)
    A_t = clamp(log π_T(y_t) − sg(log π_θ(y_t)), ±c)

with ``r_t = π_θ/π_old``, π_T the teacher (``algo.teacher``), ``sg`` no gradient, aggregated over
the batch's tokens (``token-mean``). On policy the gradient is ``Σ_t (log π_θ − log π_T)(y_t)·∇log
π_θ(y_t)``: each token's reverse-KL sample ``log π_θ − log π_T`` is its own negative advantage, so
the student lowers the probability of the tokens the teacher finds less likely than it does and
raises the others. No reward reaches the loss: the task's grades are logged only (``reward/*``),
``batch.adv`` is 0 and the signal lives in the loss (prime-rl's OPD "assigns no credit").

Differs from the RL entries by: 1. the teacher's log-probs replace the reward as the signal, per
token, dense; 2. nothing is group-relative (G only fans out sampling). The same term is added to
any other entry's objective by ``algo.distill_coef`` (λ·ℓ_t, :mod:`rlsuite.suite.distill`); this
entry is that term alone, so ``algo.distill_coef`` stays 0 here.

Fidelity: ``code`` — verl 0.9.1's distillation loss with ``use_policy_gradient=True``,
``loss_mode="k1"`` and ``use_task_rewards=False`` (``verl/trainer/distillation/losses.py``
``distillation_loss`` / ``distillation_ppo_loss``: advantages ``−(log_probs − teacher_logprobs)``
from the current forward, detached, clamped to ±``loss_max_clamp`` = 10, through
``compute_policy_loss_vanilla`` with ``clip_ratio`` 0.2 and ``clip_ratio_c`` 3.0; token-mean).
prime-rl 559b447 (``orchestrator/algo/opd.py``, ``trainer/rl/loss.py`` ``ref_kl_loss_fn``) has the
same per-token advantage ``ref_logprobs − trainer_logprobs`` (detached) with another trust region
(ratio to μ, tokens whose probability fell > 0.2 below μ's dropped, ``1e-3·(log ratio)²``, no
clamp); slime 624b824 (``--opd-kl-coef``, ``apply_opd_kl_to_advantages``) adds
``−coef·(log π_old − log π_T)`` to any estimator's advantages. The hand test
(``tests/algorithms/test_opd.py``) checks the inputs against verl's ``kl_penalty`` and
``compute_policy_loss_vanilla`` where it can import them.

[ASSUMPTION] At its default ``algo.teacher`` is empty: the teacher is a frozen copy of the model
the run starts from, so the signal starts at 0 (the contract tests' placeholder); a real run names
a teacher (a run folder's ``final/``, a saved folder or a registered model with the same tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.distill import ADV_CLAMP, CLIP_EPS, distill_loss
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class OPDConfig(AlgoConfig):
    ranges = {"clip_eps": "[0, 1]", "adv_clamp": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps: float = CLIP_EPS
    """ε of the ratio π_θ/π_old's clip (verl ``distillation_loss.clip_ratio``)."""
    adv_clamp: Optional[float] = ADV_CLAMP
    """c: the per-token advantage log π_T − log π_θ is clamped to ±c (verl ``loss_max_clamp``); None = no clamp
    (prime-rl)."""
    aggregation: AggMode = "token-mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.distill_coef != 0:
            raise ValueError(f"distill_coef must be 0 with opd (the entry is the distillation term alone; "
                             f"algo.distill_coef adds the term to other entries), got {self.distill_coef}")


@register
class OPD(Algorithm):
    name = "opd"
    summary = "On-policy distillation: per-token reverse KL to a frozen teacher on the student's samples."
    citation = ("Agarwal et al. 2024, On-Policy Distillation of Language Models: Learning from Self-Generated "
                "Mistakes, ICLR, arXiv:2306.13649; Lu & Thinking Machines Lab 2025, On-Policy Distillation")
    fidelity = "code"
    assumptions = ("algo.teacher empty (the default): a frozen copy of the run's starting model, a zero signal",)
    switches = ("adv_clamp",)
    not_group_relative = ("no reward advantage: batch.adv is 0 on every row, the signal is the teacher's per-token "
                          "log-ratio inside the loss")
    on_policy_pg = False  # the gradient is −A_t·∇log π with the teacher's A_t from the loss, not batch.adv (0)
    Config = OPDConfig
    cfg: OPDConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp", "teacher_logp"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        return AdvOut(adv=torch.zeros_like(batch.loss_mask))  # no reward credit: the signal is in the loss

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return distill_loss(fwd.logp, batch.old_logp, batch.teacher_logp, batch.loss_mask, self.cfg.clip_eps,
                            self.cfg.adv_clamp)
