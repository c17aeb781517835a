"""GiGPO — Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978): GRPO's
episode-level advantage plus a step-level advantage computed inside *anchor-state groups*.

Advantage of the tokens of turn ``k`` of trajectory ``i`` (Eqs. 3–8 of the paper)::

    A(i, k) = A_E(i) + ω · A_S(i, k)
    A_E(i)    = (R_i − mean R) / F          over the episode group (the prompt's G trajectories)
    A_S(i, k) = (G_ik − mean G) / F         over the step group of (i, k)
    G_ik      = γ^(n_i − 1 − k) · R_i       the discounted return at turn k (sparse outcome reward)

A **step group** is every turn of every trajectory in the same prompt group that acted in the
same environment state (``Batch.turn_states``: the hashable ``Environment.state()`` recorded
before each turn; the paper's anchor states, grouped by exact match, or with ``similarity`` set by
verl-agent's similarity clustering of text states, below). A step group of one turn
gets ``A_S = 0`` (its own mean). ``F`` is 1 (``scale_by_std`` False: verl-agent's default
``mode=mean_norm``, ROLL's ``reward_normalization.method: mean`` in its GiGPO examples) or the
group's unbiased std + 1e-6 (``mean_std_norm``). The loss is the PPO clipped surrogate with a
k3 KL loss term.

Differs from GRPO (``algorithms/grpo.py``) by:
  1. The step-level term ``ω·A_S``: turns that acted in the same state are compared by their
     discounted returns, so the turn that made the difference gets the credit (ω = 0 leaves
     the episode term alone: trajectory-level GRPO with this entry's normaliser).
  2. The episode statistics are taken over *steps* (``episode_stats = steps``: each trajectory's
     reward counts once per turn, verl-agent's ``compute_mean_std_cross_steps=True``, its
     default), not over trajectories; ``trajectories`` is the paper's Eq. 3.
  3. Mean-only normalisation by default; KL β 0.01 (ROLL's GiGPO example); aggregation
     ``token-mean``.

Turns and states: a row is one whole multi-turn episode; ``Batch.turn_id`` names the turn of
every token (observations carry the turn they follow and are off the loss mask), and
``turn_states[b][k]`` the state turn ``k`` acted in. Where the task's environment exposes no state
(``None``, or a rollout without environments) the fallback is exact history: the first turn
acts in the prompt group's initial state (a group is one prompt), a later turn in the state
named by its whole token prefix (prompt, earlier turns and observations). So on a single-turn
task every step group is the whole prompt group and ``A = (1 + ω)·A_E``.

**Similar states** (``similarity`` = τ in (0, 1); verl-agent's ``enable_similarity`` with
``similarity_thresh`` τ, 0.95 its default, 0.9 its search example): within a prompt group the text
states are clustered greedily — each joins the first cluster whose first member it matches with
``difflib.SequenceMatcher(None, a, b).ratio() ≥ τ``, else it starts a cluster — and a cluster is a
step group. States that are not text (the fallbacks below, a non-string ``Environment.state()``)
keep exact matching.

Metrics: ``algo/gigpo/turns_mean`` (policy turns per episode), ``algo/gigpo/step_group_size_mean``
(turns per step group), ``algo/gigpo/shared_turn_share`` (share of turns whose step group has
another member: where the step term can act) and ``algo/gigpo/step_adv_abs_mean`` (mean |A_S| over
turns, before ω).

Fidelity: ``code`` — checked against ROLL ``roll/pipeline/agentic/utils.py`` (commit 8eb27cc,
2026-08-19: ``compute_discounted_returns``, ``build_state_group``, ``compute_response_level_rewards``
for ``adv_estimator: gigpo``; its comment cites verl-agent e03bd50 ``gigpo/core_gigpo.py#L109``)
and against the verl-agent ``gigpo/core_gigpo.py`` functions ``compute_step_discounted_returns``,
``episode_norm_reward``, ``build_step_group`` and ``step_norm_reward`` as read from a copy in the
search tools' code index (a fork carrying extra options; the upstream repository
``langfengQ/verl-agent`` could not be fetched here); the similarity clustering (``are_similar``,
``build_step_group`` with ``enable_similarity``) as read there and, the same code, in
``langfengQ/DrMAS`` ``gigpo/core_gigpo.py`` (commit 3b556f2; the GiGPO author's). The hand test uses the inputs checked
against those definitions. Defaults: γ 0.95 (ROLL ``step_reward_gamma``, verl-agent
``algorithm.gamma``), ω 1 (ROLL ``step_reward_weight``, verl-agent ``step_advantage_w``),
KL 0.01 (ROLL ``examples/qwen2.5-0.5B-agentic/agent_val_frozen_lake_gigpo.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Hashable, Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.config import IN_ID_WHEN_SET
from rlsuite.suite.ops import (broadcast_to_tokens, clipped_surrogate, discounted_turn_returns,
                               group_normalised_advantage, turn_counts, turns_to_tokens)
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class GiGPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "step_weight": "[0, inf)", "gamma": "[0, 1]",
              "similarity": "(0, 1)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio."""
    step_weight: float = 1.0
    """ω, the weight of the step-level (anchor-state) advantage; 0 = the episode term alone."""
    gamma: float = 0.95
    """γ of the discounted per-turn return ``γ^(turns after k) · R`` the step groups compare."""
    scale_by_std: bool = False
    """Divide both centred terms by their group's unbiased std (+1e-6): verl-agent's
    ``mean_std_norm``; False = ``mean_norm`` (its default)."""
    similarity: Optional[float] = field(default=None, metadata=IN_ID_WHEN_SET)
    """τ of the similarity clustering of text states (verl-agent's ``similarity_thresh`` with
    ``enable_similarity``): two states match when ``SequenceMatcher`` ratio ≥ τ; None = exact match
    (verl-agent's default)."""
    episode_stats: Literal["steps", "trajectories"] = "steps"
    """Over what the episode group's mean (and std) run: every turn (a trajectory counts once per
    turn, verl-agent's default) or every trajectory once (the paper's Eq. 3)."""
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.01


def step_group_labels(batch: Batch, n_turns: list[int], similarity: Optional[float] = None) -> list[list[int]]:
    """Step-group label of every turn ``[b][k]``: turns of one prompt group (``group_id``) that acted
    in the same state share a label. The state is ``batch.turn_states[b][k]`` where the environment
    exposed one (not None), else the prompt group's initial state for ``k = 0`` and the turn's
    whole token prefix (real tokens before its first token) for ``k > 0``. With ``similarity`` τ a
    text state joins the first earlier text state's label of its prompt group (in row, then turn
    order) whose ``SequenceMatcher`` ratio to it is ≥ τ (that label's first state: verl-agent's
    cluster representative)."""
    states = batch.turn_states
    ids: dict[tuple[int, Hashable], int] = {}
    reps: dict[int, list[tuple[str, int]]] = {}  # prompt group -> (representative text, label), in order
    out: list[list[int]] = []
    for b, n in enumerate(n_turns):
        g = int(batch.group_id[b])
        row = []
        for k in range(n):
            s = states[b][k] if b < len(states) and k < len(states[b]) else None
            if s is None:
                if k == 0:
                    s = ("initial",)
                else:
                    first = int((batch.turn_id[b] == k).nonzero()[0])
                    s = ("prefix", tuple(batch.tokens[b, :first][batch.attn_mask[b, :first] > 0].tolist()))
            elif similarity is not None and isinstance(s, str):
                row.append(_similar_label(reps.setdefault(g, []), s, similarity, ids))
                continue
            else:
                s = ("env", s)
            row.append(ids.setdefault((g, s), len(ids)))
        out.append(row)
    return out


def _similar_label(clusters: list[tuple[str, int]], s: str, tau: float, ids: dict) -> int:
    """The label of the first cluster whose representative matches ``s`` at ratio ≥ τ, else a new
    cluster with ``s`` as its representative (labels drawn from the same counter as ``ids``)."""
    for rep, label in clusters:
        if SequenceMatcher(None, s, rep).ratio() >= tau:
            return label
    label = len(ids)
    ids[("similar", label)] = label  # the label is taken: exact-match keys (g, state) never equal this one
    clusters.append((s, label))
    return label


@register
class GiGPO(Algorithm):
    name = "gigpo"
    summary = ("GRPO's episode advantage plus a step advantage normalised within anchor-state groups "
               "(turn-level credit).")
    citation = ("Feng et al. 2025, Group-in-Group Policy Optimization for LLM Agent Training, "
                "arXiv:2505.10978")
    fidelity = "code"
    assumptions = (
        "[ASSUMPTION] KL estimator k3 as a loss term and token-mean aggregation: ROLL's GiGPO example sets "
        "use_kl_loss with kl_loss_coef 0.01 but its estimator and aggregation defaults were not checked",
        "[ASSUMPTION] a row is a whole episode (the full history is the context of every turn); verl-agent and "
        "ROLL train one row per step whose prompt is a rendered, possibly truncated history: with token-mean "
        "aggregation the loss is the same sum over the same policy tokens",
        "[ASSUMPTION] states: exact match, or verl-agent's greedy similarity clustering of text states with "
        "similarity = τ (its order is its batch's; here rows, then turns); without an environment state the "
        "fallback is the group's initial state at turn 0 and the exact token prefix afterwards (exact match "
        "whatever similarity says)",
    )
    switches = ("step_weight", "gamma", "scale_by_std", "episode_stats", "similarity")
    not_group_relative = ("the step term compares discounted returns γ^(turns left)·R: equal outcomes reached in "
                          "different numbers of turns get different step advantages (0 with gamma = 1)")
    tune_knob = ("step_weight", (0.5, 1.0))
    inert = {"gamma": "acts only across turns: γ^(turns after k) is 1 on the last turn, and the contract's "
                      "batches are one-turn episodes",
             "similarity": "acts only on text environment states that are similar but not equal, and the "
                           "contract's batches expose no environment states (hand-tested in "
                           "tests/algorithms/test_gigpo.py)",
             "episode_stats": "steps and trajectories weigh a trajectory by its number of turns: they differ only "
                              "when trajectories have different numbers of turns, and the contract's batches are "
                              "one-turn episodes"}
    Config = GiGPOConfig
    cfg: GiGPOConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        cfg = self.cfg
        rewards = batch.rewards.float()
        n = turn_counts(batch.turn_id, batch.loss_mask)  # [B]
        width = max(1, int(n.max()))
        n_list = n.tolist()
        dev = rewards.device
        rows_b = torch.tensor([b for b, nb in enumerate(n_list) for _ in range(nb)], dtype=torch.long, device=dev)
        rows_k = torch.tensor([k for nb in n_list for k in range(nb)], dtype=torch.long, device=dev)
        # episode term: over trajectories, or over every turn (each trajectory once per turn)
        if cfg.episode_stats == "trajectories" or rows_b.numel() == 0:
            a_e = group_normalised_advantage(rewards, batch.group_id, cfg.scale_by_std)  # [B]
        else:
            per_step = group_normalised_advantage(rewards[rows_b], batch.group_id[rows_b], cfg.scale_by_std)
            a_e = torch.zeros_like(rewards).index_copy_(0, rows_b, per_step)  # the same value on every turn of b
        # step term: discounted returns normalised inside anchor-state groups; a singleton group gets 0
        labels = step_group_labels(batch, n_list, cfg.similarity)
        a_s = torch.zeros(len(n_list), width, dtype=rewards.dtype, device=dev)
        stats: dict[str, Any] = {}
        if rows_b.numel():
            flat = torch.tensor([lab for row in labels for lab in row], dtype=torch.long, device=dev)
            returns = discounted_turn_returns(rewards, n, width, cfg.gamma)[rows_b, rows_k]
            step = group_normalised_advantage(returns, flat, cfg.scale_by_std)
            _, inv, counts = torch.unique(flat, return_inverse=True, return_counts=True)
            shared = counts[inv] > 1
            a_s[rows_b, rows_k] = torch.where(shared, step, torch.zeros_like(step))
            stats = {"algo/gigpo/turns_mean": float(n.float().mean()),
                     "algo/gigpo/step_group_size_mean": float(counts.float().mean()),
                     "algo/gigpo/shared_turn_share": float(shared.float().mean()),
                     "algo/gigpo/step_adv_abs_mean": float(a_s[rows_b, rows_k].abs().mean())}
        adv = broadcast_to_tokens(a_e, batch.loss_mask) + cfg.step_weight * turns_to_tokens(a_s, batch.turn_id,
                                                                                            batch.loss_mask)
        return AdvOut(adv=adv, metrics=stats)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high)

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}
