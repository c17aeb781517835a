"""A*-PO — Policy Optimization via Optimal Advantage Regression (Brantley, Chen, Gao, Lee, Sun, Zhan,
Zhang 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage Regression", arXiv 2505.20686).

Two stages, as TRL's ``A2POTrainer`` runs them:

1. **Optimal value** of each prompt from N samples of the frozen reference policy π_ref (the run's
   base), graded by the task: ``V*(x) = β1·log( (1/N)·Σ_j exp(r(x, y_j)/β1) )``.
2. **Regression** on fresh samples of the current policy: the implicit reward
   ``β2·log π_θ(y|x)/π_ref(y|x)`` (summed over the response's policy tokens) is regressed onto the
   optimal advantage ``r(x, y) − V*(x)``:

       L = mean_i ( β2·Σ_t (log π_θ(y_it) − log π_ref(y_it)) − (r_i − V*(x_i)) )²

Mapped onto the hooks: ``needs`` ``ref_anchor`` (N = ``num_value_samples`` samples per prompt of the
frozen base at the rollout temperature, drawn once per prompt and kept in checkpoints) and
``ref_logp``; ``rewards`` grades the anchors with the task's grader (``Group.grade``), caches V*(x) per
prompt and returns the regression target ``r − V*``; ``advantages`` broadcasts it and takes the rows
of prompts none of whose reference samples was correct out of the loss mask (TRL's
``filter_all_incorrect``); ``loss`` puts each row's squared error on every one of its policy tokens,
so ``seq-mean-token-mean`` gives the mean over rows. Metrics ``algo/a_star_po/{v_star_mean,
target_mean, dropped_frac, anchorless_groups, implicit_reward_mean, sq_err_mean}``.

Differs from GRPO by: 1. no group baseline and no ratio: a least-squares regression on the sequence
log-ratio to π_ref (which keeps π_θ near π_ref; no KL term of its own); 2. V* from π_ref's samples.

Fidelity: ``code`` — TRL 1.16.0 ``trl/experimental/a2po/a2po_trainer.py`` (``_estimate_optimal_values``,
``compute_loss``) and ``a2po_config.py`` (defaults N = 8, β1 = 0.5, β2 = 1e-3, filter on); the hand
test's V* and loss were checked against TRL's formula and ``compute_loss`` on the same inputs. Log-probs
are the suite's (at the rollout temperature; TRL scores with the raw logits, the same at its default
temperature 1).
[ASSUMPTION]s where the hooks differ from TRL's loop: V*(x) is estimated the first time a prompt is
drawn (its anchors are generated then and charged to the budget) rather than for the whole train
split before training — the same estimate for every prompt trained on, without the cost of prompts
never drawn; TRL samples one completion per prompt in stage 2, here ``rollout.group_size`` come from the
preset, each regressed on its own (the loss has no group term; set ``rollout.group_size=1`` for TRL's
setting). TRL drops the all-incorrect prompts from the dataset before stage 2; here their rows are
sampled and then left out of the loss (no refill through the ``filter`` hook: that would crash a run
whose reference solves none of a step's prompts, and would cost the trainer's π_old-from-update
lever); under ``seq-mean-token-mean`` they still count in the row count unless
``loss.empty_rows=skip``, which gives TRL's mean over the kept rows. An all-incorrect prompt is
recognised by V* = 0 (the target then equals the task score; TRL's test is "the reference rewards sum
to 0", the same for its binary rewards), so the in-reward KL (``kl_where = reward``), which would shift
the target, is refused with the filter on. On multi-turn tasks the reference samples are whole
episodes through the task's environment (tool observations included), graded as the rollout's.
Hooks called outside the trainer (no anchors) estimate V* from the group's own scores and count the
group in ``algo/a_star_po/anchorless_groups``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, Group, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, masked_sum
from rlsuite.suite.types import Batch, Forward


def optimal_value(ref_rewards: Tensor, beta1: float) -> float:
    """``V* = β1·(logsumexp(r/β1) − log N)`` over one prompt's N reference rewards ``[N]``; exactly 0
    when they are all 0 (every reference sample incorrect; the formula's value, without rounding).
    TRL ``_estimate_optimal_values``."""
    r = ref_rewards.to(torch.float64)
    if bool((r == 0).all()):
        return 0.0
    return float(beta1 * (torch.logsumexp(r / beta1, 0) - math.log(r.numel())))


@dataclass(frozen=True, kw_only=True)
class AStarPOConfig(AlgoConfig):
    ranges = {"num_value_samples": "[1, inf)", "beta1": "(0, inf)", "beta2": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    num_value_samples: int = 8
    """N: samples of the frozen reference per prompt that estimate V* (stage 1)."""
    beta1: float = 0.5
    """β1: temperature of the soft maximum that turns the reference rewards into V*."""
    beta2: float = 1e-3
    """β2: scale of the implicit reward β2·log π/π_ref regressed onto r − V* (stage 2)."""
    filter_all_incorrect: bool = True
    """Drop the rows of prompts whose reference samples were all incorrect (no learning signal)."""
    aggregation: AggMode = "seq-mean-token-mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.filter_all_incorrect and self.kl_where == "reward" and (self.kl_coef > 0 or self.kl_target is not None):
            raise ValueError("a_star_po: kl_where = reward shifts the regression target r − V* that "
                             "filter_all_incorrect reads; use kl_where = loss or filter_all_incorrect = false")


@register
class AStarPO(Algorithm):
    name = "a_star_po"
    summary = "Regress β2·log π/π_ref onto r − V*(x), V* a soft maximum of reference-policy rewards per prompt."
    citation = ("Brantley, Chen, Gao, Lee, Sun, Zhan, Zhang 2025, Accelerating RL for LLM Reasoning with Optimal "
                "Advantage Regression, arXiv:2505.20686")
    fidelity = "code"
    assumptions = (
        "V*(x) is estimated when a prompt is first drawn (its N reference samples generated and charged then), "
        "not for the whole train split before training",
        "rollout.group_size samples per prompt from the preset, each regressed on its own (TRL: one per prompt)",
        "all-incorrect prompts are recognised by V* = 0 and their rows left out of the loss mask (TRL drops them "
        "before sampling; no refill); kl_where = reward is refused with the filter on",
        "without anchors (hooks called outside the trainer) V* comes from the group's own scores",
    )
    switches = ("beta1", "beta2", "num_value_samples", "filter_all_incorrect")
    on_policy_pg = False  # the gradient is 2β2(β2·Δ − (r − V*))·∇Σlog π, a policy gradient only at π_θ = π_ref
    not_group_relative = "baseline V*(x) from the frozen reference's samples (stage 1), not from the group's rewards"
    inert = {"num_value_samples": "sets anchors_per_prompt, the reference samples the trainer draws; hooks called "
                                  "outside the trainer have no anchors (tests/algorithms/test_a_star_po.py runs it)",
             "filter_all_incorrect": "acts only on a prompt whose reference rewards are all 0 (outside the trainer: "
                                     "whose group scores are); hand-tested in tests/algorithms/test_a_star_po.py"}
    Config = AStarPOConfig
    cfg: AStarPOConfig

    def __init__(self, cfg: AStarPOConfig) -> None:
        super().__init__(cfg)
        self.v_star: dict[str, float] = {}  # prompt text → V*(x), estimated once (stage 1)
        self.anchorless = 0

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"ref_logp", "ref_anchor"}

    @property
    def anchors_per_prompt(self) -> int:
        return self.cfg.num_value_samples

    def rewards(self, group: Group, ctx: Context) -> Tensor:
        if group.anchors and group.grade is not None:
            if group.prompt not in self.v_star:
                ref = torch.tensor([group.grade(a) for a in group.anchors], dtype=torch.float64)
                self.v_star[group.prompt] = optimal_value(ref, self.cfg.beta1)
            v = self.v_star[group.prompt]
        else:
            self.anchorless += 1
            v = optimal_value(group.scores, self.cfg.beta1)
        return group.scores.to(torch.float64) - v

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        m = batch.loss_mask
        target = batch.rewards  # r − V*  [B]
        v_star = batch.scores.to(target.dtype) - target
        keep = (v_star != 0) if self.cfg.filter_all_incorrect else torch.ones_like(target, dtype=torch.bool)
        mask = m * keep.to(m.dtype)[:, None]  # rows of all-incorrect prompts (V* = 0 exactly) leave the loss
        metrics = {"algo/a_star_po/v_star_mean": float(v_star.mean()),
                   "algo/a_star_po/target_mean": float(target.mean()),
                   "algo/a_star_po/dropped_frac": float((~keep).float().mean()),
                   "algo/a_star_po/anchorless_groups": float(self.anchorless)}
        self.anchorless = 0
        return AdvOut(adv=broadcast_to_tokens(target, mask), metrics=metrics, extras={"a_star_target": target},
                      loss_mask=mask if self.cfg.filter_all_incorrect else None)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        mask = batch.loss_mask
        implicit = self.cfg.beta2 * masked_sum(fwd.logp - batch.ref_logp, mask, -1)  # [B]
        target = batch.extras["a_star_target"].to(implicit.dtype)
        per_row = (implicit - target).square()  # [B]
        with torch.no_grad():
            rows = mask.sum(-1) > 0
            n = rows.sum().clamp(min=1)
            metrics = {"algo/a_star_po/implicit_reward_mean": (implicit * rows).sum() / n,
                       "algo/a_star_po/sq_err_mean": (per_row * rows).sum() / n}
        return broadcast_to_tokens(per_row, mask), metrics

    def state_dict(self) -> dict[str, Any]:
        return {"v_star": dict(self.v_star)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.v_star = dict(state["v_star"])
