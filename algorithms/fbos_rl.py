"""FBOS-RL — feedback-driven bi-objective synergistic RL (a reconstruction from the abstract).

Zhang, Li, Xiao, Zhang, Cheng, Chen, Jiang, Wu, Liu 2026, "FBOS-RL: Feedback-Driven Bi-Objective
Synergistic Reinforcement Learning", arXiv 2605.20256 (no code). Each step samples a first group
on the prompt x; the task's verifier grades it and returns rule-based text feedback f on one
answer y⁰ (``Task.feedback``: where and why it fails, format violations); a second group is
sampled from the feedback-augmented prompt x⁺ = (x, y⁰, f) (``Task.revision_prompt``). Two
objectives, alternated (``schedule``) or summed, with GRPO's clipped surrogate:

  EPA (exploitation): on the original prompt, pull π(·|x) toward the better rollouts of the
      pooled 2G set {first group} ∪ {feedback-guided responses re-placed after x}; a pooled group
      z-score; the re-placed rows carry the token-level truncated importance weight
      ``w_t = min(π_old(y_t|x, y_<t) / μ(y_t|x⁺, y_<t), C)`` (they were sampled under x⁺):
          L_EPA = −(1/|·|) Σ w_t · min(r_t Â, clip(r_t, 1−ε, 1+ε) Â),   r_t = π_θ/π_old on x
  ECC (exploration): GRPO on x⁺ — the second group's own z-score, on its own context.

Both groups are sampled every step (the trainer's ``revise`` round) and both are charged to the
sample budget, so a matched-samples comparison with GRPO gives FBOS-RL half the steps.
Differs from GRPO (``algorithms/grpo.py``; ε, β and aggregation kept) by the second round, the
pooled EPA groups with truncated IS on the re-placed rows, and the objective schedule.

Fidelity ``abstract``; [ASSUMPTION]s (= ``FBOSRL.assumptions``): the feedback is about the
group's worst first answer (``source``); prompts whose first group is all correct (scores ≥ 1) get
no second group; EPA's advantage is a z-score over the pooled 2G rewards; IS is token-level,
truncated at C = 2 (``is_cap``), applied only to the re-placed rows; ``alternate`` switches
objective every ``period`` steps starting with EPA; ``joint`` sums both every step; GRPO's
defaults; feedback templates are the tasks' own (``feedback = full``) or a bare verdict (``binary``).

Source of the defaults (search tools, 2026-12-01): arXiv 2605.20256 (v1 18 May, v2 Jun 2026): the
abstract (arxiv.org/html/2605.20256) and a third-party summary were read; no code found. Agrees:
a first group on x; a rule-based verifier returns a scalar reward and text feedback (error
location and cause, format violations); a second group from the feedback-augmented prompt (x, the
first answer, the feedback); EPA and ECC trained alternately (the summary) = ``schedule =
alternate``. No number (IS cap, period, which answer gets feedback) is stated in what was read:
C = 2, period 1 and ``source = worst`` stay assumptions. Budget: v1 claims gains "under an
identical number of rollouts", v2 "under an identical rollout budget (i.e., the same training
steps)" and also at the same number of training steps; this entry charges both groups to the
sample budget (half the steps at matched samples), so the paper may count samples differently
(flagged for comparisons; not a default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch

from rlsuite.algorithms.base import STAGES, AdvOut, Context, Group, Revision, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward


def truncated_is_weight(old_logp: torch.Tensor, behav_logp: torch.Tensor, rows: torch.Tensor,
                        cap: float) -> torch.Tensor:
    """``min(π_old/μ, C)`` per token on ``rows`` (bool [B]), 1 elsewhere. [B, T] → [B, T] (detached)."""
    w = torch.exp((old_logp - behav_logp).clamp(max=20.0)).clamp(max=cap)
    return torch.where(rows[:, None], w, torch.ones_like(w)).detach()


@dataclass(frozen=True, kw_only=True)
class FBOSConfig(GRPOConfig):
    ranges = {"period": "[1, inf)", "is_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    objective: Literal["both", "epa", "ecc"] = "both"
    """Objectives trained: EPA only, ECC only, or both (per ``schedule``)."""
    schedule: Literal["alternate", "joint"] = "alternate"
    """With both: alternate EPA and ECC every ``period`` steps (EPA first), or sum them every step."""
    period: int = 1
    """Steps per phase when alternating."""
    is_cap: float = 2.0
    """C: truncation of the importance weight π_old(y|x)/μ(y|x⁺) on the re-placed rows."""
    epa_feedback: bool = True
    """EPA includes the feedback-guided responses re-scored under the original prompt (False: EPA = GRPO on
    the first group)."""
    feedback: Literal["full", "binary"] = "full"
    """Feedback detail: the task's rule-based diagnosis, or only correct/incorrect."""
    source: Literal["worst", "random"] = "worst"
    """Which first answer the feedback is about: the lowest-scored (first on ties) or a random incorrect one."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.period < 1:
            raise ValueError(f"period must be ≥ 1, got {self.period}")
        if self.is_cap <= 0:
            raise ValueError(f"is_cap must be > 0, got {self.is_cap}")


@register
class FBOSRL(GRPO):
    name = "fbos_rl"
    summary = ("A second, verifier-feedback-conditioned group; alternates EPA (pooled, truncated IS) and ECC "
               "(GRPO on x⁺).")
    citation = ("Zhang et al. 2026, FBOS-RL: Feedback-Driven Bi-Objective Synergistic Reinforcement Learning, "
                "arXiv:2605.20256")
    fidelity = "abstract"
    own_mismatch_weight = "its EPA objective weights by the truncated ratio π_old/μ"
    assumptions = ("feedback about the group's worst first answer (source = worst)",
                   "no second group for prompts whose first group is all correct (scores ≥ 1)",
                   "EPA: z-score over the pooled 2G rewards (first group + re-placed feedback-guided rows)",
                   "token-level truncated IS min(π_old(y|x)/μ(y|x⁺), C = 2) on the re-placed rows only",
                   "alternate objectives every `period` steps starting with EPA; joint = sum every step",
                   "GRPO's ε, β and aggregation; feedback = the task's rule-based template")
    switches = ("objective", "schedule", "period", "is_cap", "epa_feedback", "feedback", "source")
    inert = {f: "acts through the trainer's feedback round (revise); covered in tests/algorithms/test_fbos_rl.py"
             for f in ("objective", "schedule", "period", "epa_feedback", "feedback", "source")}
    inert["is_cap"] = ("weights only re-placed rows (stage 2), which the contract batches do not have; "
                       "see test_fbos_rl.py")
    Config = FBOSConfig
    cfg: FBOSConfig

    def phase(self, step: int) -> frozenset[str]:
        """The objectives trained at ``step`` (1-based): {"epa"}, {"ecc"} or both."""
        c = self.cfg
        if c.objective != "both":
            return frozenset({c.objective})
        if c.schedule == "joint":
            return frozenset({"epa", "ecc"})
        return frozenset({"epa"}) if ((step - 1) // c.period) % 2 == 0 else frozenset({"ecc"})

    def revise(self, groups: Sequence[Group], ctx: Context) -> Optional[Revision]:
        c, phase = self.cfg, self.phase(ctx.step)
        stages = set()
        if "epa" in phase:
            stages |= {"first", "recontext"} if c.epa_feedback else {"first"}
        if "ecc" in phase:
            stages.add("feedback")
        if stages == {"first"}:
            return None  # EPA without feedback-guided rows: GRPO on the first group
        gen = ctx.generator("fbos-source")
        sources = []
        for g in groups:
            s = g.scores
            if bool((s >= 1.0).all()):
                sources.append(-1)
            elif c.source == "worst":
                sources.append(int(torch.argmin(s)))
            else:
                wrong = torch.nonzero(s < s.max()).flatten() if bool((s < s.max()).any()) else torch.arange(len(s))
                sources.append(int(wrong[torch.randint(len(wrong), (1,), generator=gen)]))
        return Revision(sources=tuple(sources), stages=frozenset(stages), detail=c.feedback)

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        # one z-score per group id: first-round and re-placed rows share their prompt's id
        # (EPA's pooled 2G set); feedback-conditioned rows have their own ids (ECC)
        adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)  # [B]
        m: dict[str, float] = {"algo/fbos/phase_epa": float("epa" in self.phase(ctx.step)),
                               "algo/fbos/phase_ecc": float("ecc" in self.phase(ctx.step))}
        if batch.stage is not None:
            for k, name in enumerate(STAGES):
                rows = batch.stage == k
                m[f"algo/fbos/{name}_rows"] = float(rows.sum())
                if rows.any():
                    m[f"algo/fbos/{name}_score"] = float(batch.scores[rows].mean())
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask), metrics=m)  # [B, T]

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        tok, m = clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                   self.cfg.clip_eps_low, self.cfg.clip_eps_high)
        if batch.stage is None:
            return tok, m
        placed = batch.stage == 2
        w = truncated_is_weight(batch.old_logp, batch.behav_logp, placed, self.cfg.is_cap)
        pm = batch.loss_mask * placed[:, None]
        if bool(pm.any()):
            raw = torch.exp((batch.old_logp - batch.behav_logp).clamp(max=20.0))
            m = {**m, "algo/fbos/is_weight_mean": masked_mean(w, pm),
                 "algo/fbos/is_truncated_frac": masked_mean((raw > self.cfg.is_cap).float(), pm)}
        return w * tok, m
