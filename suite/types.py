"""Records that cross the boundaries of the engine: the rollout record and the training batch.

Shape symbols used in every docstring of the project:

====  ==========================================================================
P     prompts per rollout batch
G     completions per prompt (``rollout.group_size``)
B     sequences in the batch, ``B = P·G`` (after filtering: any multiple of G)
T     padded sequence width: prompt (left-padded to a common width ``prompt_width``)
      followed by the response (policy tokens and, in multi-turn tasks, tool
      observations), right-padded
K     top-K width of the optional behaviour top-K log-probs
H     hidden size
====  ==========================================================================

Layout of one row ``b`` of ``tokens [B, T]``::

    [pad … pad | prompt tokens | y_1 … y_k  obs … obs  y_k+1 … EOS | pad … pad]
     <---------- prompt_width ----------> <-------- response ---------->

``loss_mask`` is 1 exactly on the policy-generated tokens (``y``, EOS included) and 0 on
prompt, padding and observations. Every length quantity of the project (|y|, the
``seq-mean-token-*`` normalisers, ``len/*`` metrics) counts ``loss_mask`` tokens.

Log-prob tensors are *aligned with the tokens*: ``logp[b, t] = log π(tokens[b, t] |
tokens[b, :t])``; positions without a prediction (prompt, padding) hold 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Optional

import torch
from torch import Tensor


def real_width(attn_mask: Tensor) -> int:
    """Columns up to the last real token of any row of ``attn_mask [B, T]`` (trailing padding
    excluded); what :meth:`Rollout.trim` keeps for a micro-batch."""
    return int(attn_mask.any(0).nonzero().max()) + 1


@dataclass(frozen=True)
class Rollout:
    """One rollout batch as produced by the rollout engine (immutable).

    Fields (shapes as in the module table):
      tokens [B, T] long; attn_mask [B, T] long (1 on real tokens, observations included);
      loss_mask [B, T] float (1 only on policy tokens);
      behav_logp [B, T] float: log μ(token) where μ is the sampling distribution after
        temperature and *before* top-p/top-k truncation (the truncation is logged as
        ``mismatch/trunc_logp_mean``); 0 where loss_mask is 0;
      turn_id [B, T] long: turn index of response/observation tokens, −1 on prompt/padding;
      policy_version [B] long: optimizer updates of the weights that produced the sample;
      behaviour_id [B] long: which behaviour policy (``before_rollout``) sampled it;
      group_id [B] long: index of the prompt group (0..P−1) within the batch;
      example_idx [B] long: index of the prompt in the task's train split;
      scores [B] float: the task's per-sample grade; rewards [B] float: the reward used by the
        algorithm (``algo.rewards`` over each group, then in-reward KL if configured);
      truncated [B] bool: the response hit ``max_new_tokens`` without EOS;
      prompt_width: int, the common left-padded prompt width;
      texts: the decoded completions (policy and observation text, no prompt);
      parsed: the task's parsed answers (for logging);
      error_class: each sample's error class (``Grade.error_key``: canonical final answer for
        math-like tasks, exception type for code; EDAS partitions wrong answers by it);
      grade_error [B] bool or None: the task's grader could not grade the sample (``Grade.error``;
        its score is 0 and the trainer leaves the row out of the policy loss);
      stage [B] long or None: row kind when the algorithm ran a feedback round
        (``rlsuite.algorithms.base.Revision``): 0 first group, 1 feedback-conditioned group, 2 the
        latter's responses after the original prompt (behaviour μ = the feedback-conditioned one);
      topk_ids / topk_logp [B, T, K], attn_stat [B, T] (detached), hidden [B, T, H]:
        optional extras recorded by the engine when an algorithm ``needs`` them;
      reward_components: name → [B] float, the task's named reward components
        (``Task.reward_components``, ``Grade.components``; raw, before ``algo.rewards`` and any KL);
        empty when the task reports none;
      turn_states: per row, the environment state each policy turn acted in
        (``turn_states[b][k]``: ``Environment.state()`` before turn ``k``, the turn whose tokens have
        ``turn_id == k``; hashable, None where the environment exposes none); ``()`` for a
        rollout without environments. Turn-level estimators (GiGPO) group turns on it.
    """

    tokens: Tensor
    attn_mask: Tensor
    loss_mask: Tensor
    behav_logp: Tensor
    turn_id: Tensor
    policy_version: Tensor
    behaviour_id: Tensor
    group_id: Tensor
    example_idx: Tensor
    scores: Tensor
    rewards: Tensor
    truncated: Tensor
    prompt_width: int
    texts: tuple[str, ...] = ()
    parsed: tuple[Optional[str], ...] = ()
    error_class: tuple[Optional[str], ...] = ()
    grade_error: Optional[Tensor] = None
    stage: Optional[Tensor] = None
    topk_ids: Optional[Tensor] = None
    topk_logp: Optional[Tensor] = None
    attn_stat: Optional[Tensor] = None
    hidden: Optional[Tensor] = None
    reward_components: Mapping[str, Tensor] = field(default_factory=dict)
    turn_states: tuple[tuple[Hashable, ...], ...] = ()

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def lengths(self) -> Tensor:
        """Policy tokens per sequence, ``[B]`` float (counts ``loss_mask``)."""
        return self.loss_mask.sum(-1)

    def replace(self, **changes: Any) -> "Rollout":
        return dataclasses.replace(self, **changes)

    def select(self, idx: Tensor) -> "Rollout":
        """Rows ``idx`` of every per-sequence field (tensors, tuples and mapping values)."""
        idx = idx.long()
        b = self.batch_size
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == b:
                changes[f.name] = v[idx]
            elif isinstance(v, tuple) and len(v) == b:
                changes[f.name] = tuple(v[i] for i in idx.tolist())
            elif isinstance(v, Mapping):
                changes[f.name] = {
                    k: (x[idx] if isinstance(x, Tensor) and x.dim() > 0 and x.shape[0] == b else x)
                    for k, x in v.items()
                }
        return dataclasses.replace(self, **changes)


    def trim(self, width: int) -> "Rollout":
        """The first ``width`` token columns of every per-token field (tensors and mapping values
        whose second dimension is the token width T); used to drop trailing padding."""
        b, T = self.tokens.shape

        def cut(v: Any) -> Any:
            return v[:, :width] if isinstance(v, Tensor) and v.dim() >= 2 and v.shape[:2] == (b, T) else v

        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                changes[f.name] = cut(v)
            elif isinstance(v, Mapping):
                changes[f.name] = {k: cut(x) for k, x in v.items()}
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Batch(Rollout):
    """A rollout plus what the trainer computed for it before the update.

      old_logp [B, T]: log π_old, recomputed by a scoring pass (or aliased to μ when
        ``rollout.old_logp = "behaviour"`` and the sample is exactly on-policy);
      ref_logp [B, T]: log π_ref (only when the algorithm's KL coefficient is > 0);
      init_logp [B, T]: log-probs under the frozen initial policy (when ``needs`` has ``init_logp``);
      teacher_logp [B, T]: log π_T under the frozen distillation teacher (when ``needs`` has
        ``teacher_logp``: the entry ``opd`` or ``algo.distill_coef > 0``; :mod:`rlsuite.suite.distill`);
      values [B, T]: critic values V(s_t) at response positions (critic algorithms);
      token_rewards [B, T]: per-token rewards: the in-reward KL penalty on policy tokens and
        the sequence score on the last policy token (what GAE consumes);
      adv [B, T], returns [B, T]: filled by ``algo.advantages``;
      extras: per-sequence or per-token tensors an algorithm stores for its loss
        (e.g. importance weights), keyed by name;
      old_logp_mask [B, T]: set instead of ``old_logp`` when π_old is taken from the update's own
        forward (``Scorer.from_update``, :mod:`rlsuite.suite.scoring`): the mask the scoring pass
        would have applied;
      old_sum_pi_sq [B, T]: Σ_v π_old(v)² over the vocabulary, from π_old's scoring pass (when
        ``needs`` has ``old_sum_pi_sq``; 0 off the loss mask).
    """

    old_logp: Optional[Tensor] = None
    ref_logp: Optional[Tensor] = None
    init_logp: Optional[Tensor] = None
    teacher_logp: Optional[Tensor] = None
    values: Optional[Tensor] = None
    token_rewards: Optional[Tensor] = None
    adv: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)
    old_logp_mask: Optional[Tensor] = None
    old_sum_pi_sq: Optional[Tensor] = None

    @classmethod
    def from_rollout(cls, r: Rollout, **kw: Any) -> "Batch":
        base = {f.name: getattr(r, f.name) for f in dataclasses.fields(Rollout)}
        base.update(kw)
        return cls(**base)


@dataclass(frozen=True)
class Forward:
    """What the policy forward returned for a (micro-)batch; unrequested fields are None.

    logp [B, T] (aligned with tokens, 0 where no prediction), entropy [B, T],
    hidden [B, T, H] (last layer, after the final norm), attn_stat [B, T] (detached),
    values [B, T] (when a critic head was evaluated in the same pass), topk_logp [B, T, K]
    (π_θ's log-probs at the behaviour's top-K ids ``Batch.topk_ids``), sum_pi_sq [B, T]
    (Σ_v π_θ(v)² over the vocabulary at the forward's temperature; 0 where no prediction).
    """

    logp: Tensor
    entropy: Optional[Tensor] = None
    hidden: Optional[Tensor] = None
    attn_stat: Optional[Tensor] = None
    values: Optional[Tensor] = None
    topk_logp: Optional[Tensor] = None
    sum_pi_sq: Optional[Tensor] = None


def cat_rollouts(parts: list[Rollout], offset_groups: bool = True) -> Rollout:
    """Concatenate records (``Rollout`` or ``Batch``) of possibly different widths along B.

    Re-pads each part on the left to the largest ``prompt_width`` and on the right to the
    largest total width. With ``offset_groups`` group ids are shifted so groups stay distinct.
    """
    if len(parts) == 1:
        return parts[0]
    cls = type(parts[0])
    pw = max(p.prompt_width for p in parts)
    resp = max(p.tokens.shape[1] - p.prompt_width for p in parts)
    out: dict[str, list] = {}
    offset = 0
    flagged = any(p.grade_error is not None for p in parts)  # ungraded parts: no grade errors
    for p in parts:
        left, right = pw - p.prompt_width, resp - (p.tokens.shape[1] - p.prompt_width)
        for f in dataclasses.fields(cls):
            v = getattr(p, f.name)
            if f.name == "grade_error" and v is None and flagged:
                v = torch.zeros(p.batch_size, dtype=torch.bool)
            if f.name == "prompt_width" or v is None:
                continue
            if f.name == "group_id" and offset_groups:
                v = v + offset
            elif isinstance(v, Tensor) and v.dim() >= 2:
                v = _pad_time(v, left, right, -1 if f.name == "turn_id" else 0)
            elif isinstance(v, Mapping):
                v = {k: _pad_time(x, left, right, 0) if isinstance(x, Tensor) and x.dim() >= 2 else x
                     for k, x in v.items()}
            out.setdefault(f.name, []).append(v)
        offset += int(p.group_id.max().item()) + 1 if p.batch_size else 0
    merged: dict[str, Any] = {"prompt_width": pw}
    for k, vs in out.items():
        if isinstance(vs[0], Tensor):
            merged[k] = torch.cat(vs)
        elif isinstance(vs[0], Mapping):
            merged[k] = {key: torch.cat([v[key] for v in vs]) for key in vs[0]}
        else:
            merged[k] = sum(vs, ())
    return cls(**merged)


def _pad_time(v: Tensor, left: int, right: int, fill: float) -> Tensor:
    """Pad dim 1 (time) of a [B, T, ...] tensor."""
    pad = [0, 0] * (v.dim() - 2) + [left, right]
    return torch.nn.functional.pad(v, pad, value=fill)
