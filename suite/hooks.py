"""The hook contract between the trainer and an algorithm entry: the types the hooks take and
return (:class:`Context`, :class:`Group`, :class:`Behaviour`, :class:`Revision`, :class:`AdvOut`),
the inputs an entry may declare (:data:`NEEDS`) and the row kinds of a feedback round
(:data:`STAGES`). The hooks themselves are documented on :class:`rlsuite.algorithms.base.Algorithm`,
which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch
from torch import Tensor

#: Inputs an algorithm may declare in ``needs``. Policy-forward outputs: ``entropy``,
#: ``hidden``, ``attn_stat``; batch fields: ``old_logp`` (π_old scoring pass), ``values``
#: (a critic), ``topk`` (behaviour top-K log-probs from the rollout), ``behav_attn_stat``
#: (the sampler's attention statistic), ``behav_hidden``, ``anchor`` (a greedy decode of the
#: current policy per prompt, given to ``rewards`` as ``Group.anchors``; charged to the budget;
#: anchors of either kind run through the task's environment on a multi-turn task),
#: ``ref_anchor`` (``Algorithm.anchors_per_prompt`` responses per prompt sampled once from the
#: frozen base the run started from, at the rollout temperature from the stream (seed,
#: "ref_anchor", prompt index), kept for the run and in its checkpoints, given as
#: ``Group.anchors``; charged to the budget when generated).
#: ``ref_logp`` is implied by ``kl_coef > 0`` and may also be declared; ``init_logp``: log-probs
#: under a frozen copy of the initial policy (for KL-to-initial metrics when π_ref is refreshed);
#: ``teacher_logp``: log-probs under the frozen distillation teacher ``algo.teacher`` (implied by
#: ``distill_coef > 0``; :mod:`rlsuite.suite.distill`); ``old_sum_pi_sq``: Σ_v π_old(v)² per token over
#: the whole vocabulary (at the rollout temperature), from π_old's scoring pass (which then always
#: runs, and whose log-probs are then ``old_logp`` even with ``rollout.old_logp=behaviour``; OTB's energy).
NEEDS = frozenset({"entropy", "hidden", "attn_stat", "old_logp", "ref_logp", "init_logp", "values", "topk",
                   "behav_attn_stat", "behav_hidden", "anchor", "ref_anchor", "teacher_logp", "old_sum_pi_sq"})


@dataclass(frozen=True)
class Behaviour:
    """A behaviour policy for part of a rollout batch (``before_rollout``).

    ``state``: parameter tensors to load into the rollout engine (a full or partial state
    dict of the policy), or None for the engine's current weights; ``rows``: the sample rows
    ``[0, B)`` it generates. ``id`` ends up in ``Rollout.behaviour_id``.
    """

    id: int
    rows: tuple[int, ...]
    state: Optional[Mapping[str, Tensor]] = None


#: Row kinds of a batch with a feedback round (``Rollout.stage``): the first group on the
#: prompt, the feedback-conditioned group on prompt + answer + feedback, and the latter's
#: responses re-placed after the original prompt (their μ is still the feedback-conditioned one).
STAGES = ("first", "feedback", "recontext")


@dataclass(frozen=True)
class Revision:
    """A second, feedback-conditioned round of sampling (``revise``; FBOS-RL).

    ``sources``: one entry per prompt group — the index ``0..G−1`` of the first-round completion
    the task's verifier feedback (``Task.feedback``) is about, or −1 for no second group on that
    prompt. For each source the trainer builds ``Task.revision_prompt(example, completion,
    feedback)``, samples G completions from it (charged to the budget like any rollout),
    grades them on the original example, and puts the rows named in ``stages`` (:data:`STAGES`)
    into the batch. ``detail``: the feedback's detail, passed to ``Task.feedback``.
    """

    sources: tuple[int, ...]
    stages: frozenset[str] = frozenset(STAGES)
    detail: str = "full"

    def __post_init__(self) -> None:
        if not self.stages or set(self.stages) - set(STAGES):
            raise ValueError(f"Revision.stages must be a non-empty subset of {STAGES}, got {sorted(self.stages)}")


@dataclass(frozen=True)
class Group:
    """One prompt's completions, given to ``rewards(group, ctx)``.

    ``scores [G]`` are the task's grades; ``completions`` the decoded texts; ``example`` the
    task's example object; ``parsed`` the task's parsed answers; ``lengths [G]`` policy tokens
    per completion; ``truncated [G]`` bool, hit ``max_new_tokens`` without EOS;
    ``grade(text) → float``: the task's own grader for this prompt (task-aware judges use it, so
    ``algorithms/`` imports no task); ``anchors``: reference responses for this prompt (the
    current policy's greedy decode when the entry ``needs`` ``"anchor"``; the frozen base's
    samples, the same every step, when it ``needs`` ``"ref_anchor"``).
    """

    prompt: str
    example: Any
    completions: tuple[str, ...]
    parsed: tuple[Optional[str], ...]
    scores: Tensor
    lengths: Optional[Tensor] = None
    truncated: Optional[Tensor] = None
    grade: Optional[Callable[[str], float]] = None
    anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdvOut:
    """Output of ``advantages``: ``adv [B, T]`` (0 off the loss mask), ``returns [B, T]`` for
    critics, and metrics. ``extras`` are stored into ``batch.extras`` for the loss.
    ``loss_mask [B, T]``, when given, replaces the batch's loss mask for the update (the
    aggregation normaliser included) — e.g. DAPO's overlong filtering drops truncated samples."""

    adv: Tensor
    returns: Optional[Tensor] = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Tensor] = field(default_factory=dict)
    loss_mask: Optional[Tensor] = None


@dataclass
class Context:
    """What hooks may read, and the one thing they may do (``charge`` extra compute).

    step: the current step (1-based; 0 before training); progress: ∈ [0, 1] of the binding
    budget; entropy: the last measured token-mean policy entropy (None before the first
    update); max_new_tokens, group_size, prompts_per_step: from the run spec; n_train: size
    of the task's train split; seed: the run seed; policy: the trained model (read-only by
    convention; ``before_rollout`` may read its parameters); generator(stream): a fresh
    ``torch.Generator`` seeded by (seed, stream, step); charge(kind, tokens, params): add
    ``2·params·tokens`` FLOPs of an extra pass (``kind`` names it in the metrics);
    refresh_reference(): copy the current policy into π_ref (needs ``ref_logp`` in ``needs``).
    """

    step: int
    progress: float
    entropy: Optional[float]
    max_new_tokens: int
    group_size: int
    prompts_per_step: int
    n_train: int
    seed: int
    policy: Any
    generator: Callable[[str], torch.Generator]
    charge: Callable[[str, int, int], None]
    refresh_reference: Callable[[], None] = lambda: None
