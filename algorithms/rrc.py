"""RRC — Ranking-based Reward Construction from a generative (pairwise) judge.

A judge (``algorithms/judges.py``) gives the order-debiased preference ``s(a ≻ b) ∈ [0, 1]``.
The rewards of one prompt's G responses are built from it, then fed to GRPO or RLOO:

* ``strategy = self`` (self-competitive ranking): ``P_ij = s(y_i ≻ y_j)`` over all G(G−1)/2
  pairs (``pairs = all``) or a merge-sort tournament (``pairs = tournament``, O(G log G));
  Borda score ``b_i = (1/(G−1)) Σ_{j≠i} P_ij ∈ [0, 1]``; ``reward = borda`` gives ``R_i = b_i``,
  ``reward = rank`` gives ``R_i = 1 − 2·(rank_i − 1)/(G − 1) ∈ [−1, 1]`` (ties share the
  average rank).
* ``strategy = anchor`` (anchor-guided): each response against the anchors ``a`` of
  ``Group.anchors`` (the current policy's greedy decode; G calls per anchor):
  ``reward = borda`` gives ``R_i = mean_a s(y_i ≻ a) − ½``; ``reward = rank`` gives the ordinal
  ``R_i = mean_a w(y_i, a) − ½`` with hard wins ``w ∈ {0, ½, 1}``.

Advantage: ``estimator = grpo`` — ``(R − mean_G R)/(std_G R + 1e-6)``; ``rloo`` — leave-one-out.
Loss: the PPO clipped surrogate (ε_low, ε_high), GRPO's seq-mean-token-mean and k3 KL loss.
Differs from GRPO (``grpo.py``) by: 1. the reward is a within-group ranking from a judge, not
the task grade; 2. anchor decodes (``needs`` ``anchor``) for the anchor strategy.
Metrics ``algo/rrc/{judge_calls, comparisons, order_flip_agreement, tie_rate, anchorless_groups}``
per step (``rewards`` counts; ``advantages`` emits and resets).

Fidelity: ``description`` — paper not found (code URL github.com/wangclnlp/RRC not retrieved);
precedent GRAM (github.com/NiuTrans/GRAM, code checked: A/B verdict softmax, both orders).
[ASSUMPTION]s (also in ``assumptions``): the whole reward construction above (pairwise P over all
pairs or a tournament, Borda, the rank formula, ``s(y ≻ a) − ½``); the anchor is the current
policy's greedy decode (reference-model or gold anchors and binary-search placement among
ordered anchors are not built); R feeds GRPO's z-score or RLOO; both presentation orders; G = 8
typical (G comes from the task preset); the judge's prompt template; the tournament's tie and
Borda rules; the no-anchor fallback. Win-rate benchmarks (AlpacaEval, Arena-Hard, MT-Bench) are
evaluation, not part of this entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor

from algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, Group, register
from algorithms.judges import TIE_TOL, Judge, Judged, Pool, judge_pairs, load_judge
from algorithms.rloo import leave_one_out_advantage
from suite.aggregation import AggMode
from suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage
from suite.types import Batch, Forward


def borda_scores(P: Tensor) -> Tensor:
    """``b_i = (1/(G−1)) Σ_{j≠i} P_ij``; ½ for G = 1. P [G, G] (diagonal ignored) → [G]."""
    G = P.shape[0]
    if G < 2:
        return torch.full((G,), 0.5)
    return (P.sum(1) - P.diagonal()) / (G - 1)


def average_ranks(b: Tensor) -> Tensor:
    """1-based ranks by descending score, ties (within TIE_TOL) sharing the average rank. [G] → [G]."""
    diff = b[None, :] - b[:, None]  # [i, j] = b_j − b_i
    better = (diff > TIE_TOL).sum(1).float()
    tied = ((diff.abs() <= TIE_TOL).sum(1) - 1).float()
    return 1 + better + 0.5 * tied


def rank_reward(ranks: Tensor) -> Tensor:
    """``R = 1 − 2·(rank − 1)/(G − 1)`` ∈ [−1, 1]; 0 for G = 1. [G] → [G]."""
    G = ranks.shape[0]
    return 1 - 2 * (ranks - 1) / (G - 1) if G > 1 else torch.zeros(G)


def anchor_reward(S: Tensor, hard: bool) -> Tensor:
    """``mean_a s(y_i ≻ a) − ½`` (or with hard wins 1/½/0). S [G, m] → [G]."""
    if hard:
        S = torch.where((S - 0.5).abs() <= TIE_TOL, 0.5, (S > 0.5).float())
    return S.mean(1) - 0.5


def tournament_ranks(G: int, s: Callable[[int, int], float]) -> Tensor:
    """Merge sort by ``s(i, j) ≥ ½`` (i first); every adjacent pair of the result was compared
    directly, so runs of adjacent ties share the average rank. → 1-based ranks [G]."""
    def sort(idx: list[int]) -> list[int]:
        if len(idx) < 2:
            return idx
        left, right, out = sort(idx[:len(idx) // 2]), sort(idx[len(idx) // 2:]), []
        while left and right:
            out.append(left.pop(0) if s(left[0], right[0]) >= 0.5 else right.pop(0))
        return out + left + right

    order, ranks, start = sort(list(range(G))), torch.zeros(G), 0
    for p in range(1, G + 1):  # close a tie block at p
        if p == G or abs(s(order[p - 1], order[p]) - 0.5) > TIE_TOL:
            for q in range(start, p):
                ranks[order[q]] = 1 + (start + p - 1) / 2
            start = p
    return ranks


@dataclass(frozen=True, kw_only=True)
class RRCConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    strategy: Literal["self", "anchor"] = "self"
    """``self``: rank the group against itself; ``anchor``: compare each response with anchors."""
    judge: Literal["task", "lm"] = "task"
    """Judge from ``algorithms.judges.JUDGES``: ``task`` (task grader) or ``lm`` (causal-LM judge)."""
    judge_model: str = "tiny"
    """The LM judge: a registered model name, HF id or local path (``tiny`` is an untrained placeholder)."""
    reward: Literal["borda", "rank"] = "borda"
    """``borda``: the soft score; ``rank``: the rank reward (self) or hard wins (anchor)."""
    pairs: Literal["all", "tournament"] = "all"
    """Self strategy: judge all G(G−1)/2 pairs, or a merge-sort tournament (O(G log G) pairs)."""
    debias_order: bool = True
    """Judge both presentation orders and average (2 calls per pair)."""
    estimator: Literal["grpo", "rloo"] = "grpo"
    """Advantage from the rewards: GRPO group z-score or RLOO leave-one-out."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio."""
    aggregation: AggMode = "seq-mean-token-mean"
    kl_coef: float = 0.04

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.judge == "lm" and not self.judge_model:
            raise ValueError("judge = lm needs judge_model (a registered model, HF id or local path)")


_TASK_JUDGE_INERT = "with the default task judge (order-free, transitive) it changes only the judge-call count"


@register
class RRC(Algorithm):
    name = "rrc"
    summary = "Group rewards from a pairwise judge (self-competitive Borda/rank or anchor-guided), then GRPO/RLOO."
    citation = ("RRC: Ranking-based Reward Construction for generative reward models (paper not found; "
                "github.com/wangclnlp/RRC); precedent GRAM, github.com/NiuTrans/GRAM")
    fidelity = "description"
    assumptions = (
        ("Self-competitive: order-averaged P_ij over all pairs (or a tournament), Borda b_i = mean_j P_ij, "
         "rank reward R_i = 1 − 2(rank_i − 1)/(G − 1) or b_i directly"),
        ("Anchor-guided: R_i = s(y_i ≻ a) − ½ averaged over anchors; the anchor is the current policy's greedy "
         "decode; 'rank' = hard wins (the ordinal reward), binary-search placement among ordered anchors not built"),
        ("Judge: softmax over the verdict tokens A/B at the answer position, averaged over both presentation "
         "orders (GRAM); the prompt template is our own"),
        ("Tournament = merge sort on s ≥ ½ with adjacent ties sharing the average rank; its Borda score is the "
         "one implied by the ranking, (G − rank)/(G − 1)"),
        ("Without anchors (hooks called outside the trainer) the anchor strategy uses the other group members "
         "as anchors and counts the group in algo/rrc/anchorless_groups"),
        "R feeds GRPO's group z-score or RLOO's leave-one-out baseline (estimator)",
        "Defaults unknown: G from the task preset (8 typical), both orders, GRPO clip 0.2 and k3 KL 0.04",
    )
    switches = ("strategy", "judge", "reward", "pairs", "debias_order", "estimator")
    group_relative = True
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    inert = {"judge_model": "read only with judge = lm (default task)",
             "debias_order": _TASK_JUDGE_INERT, "pairs": _TASK_JUDGE_INERT}
    Config = RRCConfig
    cfg: RRCConfig

    def __init__(self, cfg: RRCConfig) -> None:
        super().__init__(cfg)
        self._judge: Judge | None = None
        self._count = dict.fromkeys(("calls", "pairs", "agree", "flip_pairs", "ties", "anchorless"), 0)

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"} | ({"anchor"} if self.cfg.strategy == "anchor" else frozenset())

    # -- reward ------------------------------------------------------------------------
    def _verdicts(self, pool: Pool, pairs: list[tuple[int, int]], ctx: Context) -> Judged:
        if self._judge is None:  # loaded once (shared across entries by load_judge)
            self._judge = load_judge(self.cfg.judge, self.cfg.judge_model)
            if ctx.policy is not None and hasattr(ctx.policy, "parameters"):
                self._judge.to(next(ctx.policy.parameters()).device)
        j = judge_pairs(self._judge, pool, pairs, self.cfg.debias_order, ctx.charge)
        c = self._count
        c["calls"] += j.calls
        c["pairs"] += len(pairs)
        c["ties"] += int(j.ties.sum())
        if j.agree is not None:
            c["agree"] += int(j.agree.sum())
            c["flip_pairs"] += len(pairs)
        return j

    def _matrix(self, pool: Pool, G: int, ctx: Context) -> Tensor:
        """All-pairs P [G, G] with P_ji = 1 − P_ij (diagonal ½)."""
        pairs = [(i, j) for i in range(G) for j in range(i + 1, G)]
        P = torch.full((G, G), 0.5)
        for (i, j), s in zip(pairs, self._verdicts(pool, pairs, ctx).s.tolist()):
            P[i, j], P[j, i] = s, 1 - s
        return P

    def rewards(self, group: Group, ctx: Context) -> Tensor:
        G, cfg = len(group.completions), self.cfg
        pool = Pool(group.prompt, tuple(group.completions) + tuple(group.anchors), group.grade,
                    tuple(float(x) for x in group.scores))
        if cfg.strategy == "anchor" and group.anchors:
            m = len(group.anchors)
            j = self._verdicts(pool, [(i, G + k) for i in range(G) for k in range(m)], ctx)
            return anchor_reward(j.s.view(G, m), hard=cfg.reward == "rank")
        if cfg.strategy == "anchor":  # no anchors: the other group members serve as anchors
            self._count["anchorless"] += 1
            P = self._matrix(pool, G, ctx)
            S = P[~torch.eye(G, dtype=torch.bool)].view(G, G - 1) if G > 1 else torch.full((G, 1), 0.5)
            return anchor_reward(S, hard=cfg.reward == "rank")
        if cfg.pairs == "tournament":
            memo: dict[tuple[int, int], float] = {}

            def s(i: int, j: int) -> float:
                if (i, j) not in memo:
                    memo[(i, j)] = float(self._verdicts(pool, [(i, j)], ctx).s[0])
                    memo[(j, i)] = 1 - memo[(i, j)]
                return memo[(i, j)]

            ranks = tournament_ranks(G, s)
            return rank_reward(ranks) if cfg.reward == "rank" else (G - ranks) / max(G - 1, 1)
        b = borda_scores(self._matrix(pool, G, ctx))
        return rank_reward(average_ranks(b)) if cfg.reward == "rank" else b

    # -- advantage and loss ------------------------------------------------------------
    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        if self.cfg.estimator == "rloo":
            adv = leave_one_out_advantage(batch.rewards, batch.group_id)
        else:
            adv = group_normalised_advantage(batch.rewards, batch.group_id)  # [B]
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask), metrics=self._step_metrics())

    def _step_metrics(self) -> dict[str, float]:
        c, k = self._count, "algo/rrc/"
        out = {k + "judge_calls": float(c["calls"]), k + "comparisons": float(c["pairs"])}
        if c["pairs"]:
            out[k + "tie_rate"] = c["ties"] / c["pairs"]
        if c["flip_pairs"]:
            out[k + "order_flip_agreement"] = c["agree"] / c["flip_pairs"]
        if self.cfg.strategy == "anchor":
            out[k + "anchorless_groups"] = float(c["anchorless"])
        self._count = dict.fromkeys(c, 0)
        return out

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high)


@dataclass(frozen=True, kw_only=True)
class RRCSelfConfig(RRCConfig):
    reward: Literal["borda", "rank"] = "rank"


@register
class RRCSelf(RRC):
    name = "rrc_self"
    summary = "RRC preset: self-competitive all-pairs ranking with the rank reward, GRPO advantage."
    Config = RRCSelfConfig


@dataclass(frozen=True, kw_only=True)
class RRCAnchorConfig(RRCConfig):
    strategy: Literal["self", "anchor"] = "anchor"


@register
class RRCAnchor(RRC):
    name = "rrc_anchor"
    summary = "RRC preset: each response against the policy's greedy anchor, R = s(y ≻ a) − ½, GRPO advantage."
    inert = {**RRC.inert, "pairs": "read only with strategy = self (default anchor)",
             "reward": "with the default task judge s ∈ {0, ½, 1}, so hard wins equal the soft score"}
    Config = RRCAnchorConfig
