"""SP3O — Sparse PPO (Li, Yan, Luo et al. 2026, "Rethinking Critic Learning in PPO: Understanding
and Mitigating Value Flattening", arXiv 2609.18708); a reconstruction (fidelity labels: algorithms/README.md).

Value flattening: dense regression on correlated adjacent states with a terminal-only reward
makes V nearly constant along a response. SP3O trains the critic only at a few well-separated
*anchor* tokens per response: PPO's clipped value loss at the anchors alone. By default (the
authors' code) the anchors sit at fixed shares 0.3 / 0.6 / 0.9 of each response (a fourth at 0.95
on responses of ≥ 6144 tokens) and the policy's advantage is PPO's token GAE on the critic's
values at every token. The reconstruction's alternatives stay switches: anchors at the first and
last policy token with intermediate ones ≥ d tokens apart, evenly spaced or after a step
delimiter (``anchor_selector = position | delimiter``), and segment GAE with each segment a
macro-action (``advantage = segment``; R_k = reward inside it):
``δ_k = R_k + γ·V(s_{t_{k+1}}) − V(s_{t_k})``, ``Â_k = δ_k + γλ·Â_{k+1}``; every token of segment
k gets Â_k, value target ``Â_k + V(s_{t_k})``; or token GAE with V interpolated between anchors
(``advantage = interpolated``).

Differs from PPO (``algorithms/ppo.py``, whose policy loss it reuses) in the critic's loss mask
(and, with the switches, the advantage estimator). Metrics ``algo/sp3o/{flatness (mean_i std_t V /
std_batch V), anchors_mean, explained_var_anchors, adv_sign_agreement}``. Fidelity: ``abstract``.

Source of the defaults (search tools, 2026-12-01): the authors' code github.com/Dodojordi/SP3O (a
slime fork; read at commit 8b8b26e: examples/sp3o/train.sh, slime/utils/sp3o.py,
slime/backends/megatron_utils/loss.py), the abstract and third-party summaries; not the paper's
text. The code says SP3O "changes only the positions used by the critic value loss. Policy loss
masks and value targets are left unchanged." Since the fidelity issue the defaults follow it: (1)
advantage: PPO's token GAE over the dense critic values (λ = 1.0), ``advantage = token`` (the
entry's first default ``segment``, and ``interpolated``, are reconstructions no source setting
matches); (2) anchors: 3 at response-relative positions 0.3 / 0.6 / 0.9 (never the last token),
plus a 0.95 tail anchor for responses of at least 6144 tokens (``anchor_selector = relative``;
the summaries report K = 3 best and K = 16 / 64 back at the dense-PPO level; the first default
was up to K = 8 evenly spaced anchors including the first and last token, ≥ 64 apart). Still
differs: (3) the source first trains the critic alone for 20 steps with the dense value
loss; (4) it averages the value loss per response, where ``anchor_reweight`` keeps the suite PPO's
per-token weighting. Agree: PPO clip 0.2 / 0.2, λ = 1.0, no KL. Launch: Qwen3-4B-Base, 64 prompts
× 8, 2 updates per rollout, actor LR 1e-6, critic LR 4e-6, TIS on, temperature 1.0, max 8192.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.ppo import PPO, PPOConfig
from rlsuite.suite.ops import (clipped_value_loss, explained_variance, gae, group_mean_std, masked_mean, masked_var,
                               masked_whiten)
from rlsuite.suite.types import Batch, Forward


def relative_anchors(L: int, positions: tuple[float, ...], tail: float, tail_min_len: int) -> list[int]:
    """The source's anchors on a response of L policy tokens: token ``floor(f·(L − 1))`` (0-based) for
    each relative position f < 1, so never the last token, plus ``floor(tail·(L − 1))`` when ``L ≥
    tail_min_len``; duplicates (short responses) merge. [ASSUMPTION] the exact rounding."""
    fracs = list(positions) + ([tail] if L >= tail_min_len else [])
    return sorted({int(f * (L - 1)) for f in fracs})


def select_anchors(tokens, mask, n_anchors: int, min_gap: int, selector: str, delimiter_ids=(),
                   positions: tuple[float, ...] = (0.3, 0.6, 0.9), tail: float = 0.95,
                   tail_min_len: int = 6144) -> torch.Tensor:
    """Anchor indicator ``[B, T]`` on policy tokens. ``relative``: the source's response-relative
    positions (:func:`relative_anchors`); ``position``/``delimiter``: first and last always, ≤ K − 2
    between, each ≥ d policy tokens from its neighbours (evenly spaced, or the token after a
    delimiter id)."""
    out = torch.zeros_like(mask)
    for b in range(mask.shape[0]):
        pos = mask[b].nonzero().squeeze(-1)
        L = len(pos)
        if L <= 1:
            out[b, pos] = 1
            continue
        if selector == "relative":
            idx = relative_anchors(L, positions, tail, tail_min_len)
        elif selector == "position":
            k = max(2, min(n_anchors, (L - 1) // min_gap + 1))
            idx = [int(j * (L - 1) / (k - 1) + 0.5) for j in range(k)]
        else:
            toks, idx = tokens[b, pos].tolist(), [0]
            for j in range(1, L - 1):
                if toks[j - 1] in delimiter_ids and j - idx[-1] >= min_gap and L - 1 - j >= min_gap \
                        and len(idx) < n_anchors - 1:
                    idx.append(j)
            idx.append(L - 1)
        out[b, pos[idx]] = 1
    return out


def segment_gae(token_rewards, values, mask, anchors, gamma: float, lam: float):
    """GAE over anchor segments, broadcast to their tokens. [B, T] → (adv, returns) [B, T]."""
    seg = (anchors.cumsum(-1) - 1).clamp(min=0).long()  # segment index of each column

    def per_seg(x):  # sum over each segment, given back at every column of that segment
        return torch.zeros_like(x).scatter_add_(1, seg, x).gather(1, seg)
    r_k = per_seg(token_rewards * mask) * anchors  # reward inside segment k, at its anchor
    adv_k, ret_k = gae(r_k, values, anchors, gamma, lam)  # δ_k = R_k + γV(t_{k+1}) − V(t_k)
    return per_seg(adv_k * anchors) * mask, per_seg(ret_k * anchors) * mask


def interpolate_values(values, mask, anchors) -> torch.Tensor:
    """V linearly interpolated between anchors along each response's policy tokens. [B, T] → [B, T]."""
    out = torch.zeros_like(values)
    for b in range(mask.shape[0]):
        pos = mask[b].nonzero().squeeze(-1)
        a = anchors[b, pos].nonzero().squeeze(-1)
        va, j = values[b, pos[a]], torch.arange(len(pos), device=a.device)
        lo = torch.searchsorted(a, j, right=True) - 1
        hi = (lo + 1).clamp(max=len(a) - 1)
        frac = torch.where(a[hi] > a[lo], (j - a[lo]) / (a[hi] - a[lo]).clamp(min=1), torch.zeros_like(j).float())
        out[b, pos] = va[lo] + frac.to(va.dtype) * (va[hi] - va[lo])
    return out


@dataclass(frozen=True, kw_only=True)
class SP3OConfig(PPOConfig):
    ranges = {"n_anchors": "[2, inf)", "min_gap": "[1, inf)", "delimiter_ids": "[0, inf)",
              "anchor_positions": "[0, 1)", "tail_anchor": "[0, 1)", "tail_min_len": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    anchor_selector: Literal["relative", "position", "delimiter"] = "relative"
    """``relative``: the source's anchors at fixed shares of each response (``anchor_positions``, plus
    the tail anchor on long responses); ``position``: K evenly spaced, first and last included, ≥ d
    apart; ``delimiter``: right after a step delimiter (``delimiter_ids``)."""
    anchor_positions: tuple[float, ...] = (0.3, 0.6, 0.9)
    """``relative``: the anchors' shares of the response length (the source's three; never the last token)."""
    tail_anchor: float = 0.95
    """``relative``: one more anchor at this share on responses of at least ``tail_min_len`` tokens."""
    tail_min_len: int = 6144
    """``relative``: the response length from which the tail anchor is added."""
    n_anchors: int = 8
    """``position``/``delimiter``: K, most anchors per response (first and last included)."""
    min_gap: int = 64
    """``position``/``delimiter``: d, least policy tokens between neighbouring intermediate anchors."""
    delimiter_ids: tuple[int, ...] = ()
    """Token ids that end a reasoning step (e.g. the tokenizer's id of '\\n\\n')."""
    sparse_value: bool = True
    """Value loss only at anchors (False: PPO's dense value loss)."""
    advantage: Literal["token", "segment", "interpolated"] = "token"
    """``token``: PPO's token GAE on the critic's values at every token (the source: only the value loss's
    positions change); ``segment``: GAE over anchor segments; ``interpolated``: token GAE on V
    interpolated between anchors."""
    anchor_reweight: bool = True
    """Scale each response's anchor losses by |y|/K, keeping PPO's per-response value-loss weight."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_anchors < 2 or self.min_gap < 1:
            raise ValueError(f"need n_anchors ≥ 2 and min_gap ≥ 1 (got {self.n_anchors}, {self.min_gap})")
        if not self.anchor_positions or any(not 0 <= f < 1 for f in self.anchor_positions):
            raise ValueError(f"anchor_positions must be shares in [0, 1), got {self.anchor_positions}")


@register
class SP3O(PPO):
    name = "sp3o"
    not_group_relative = "critic baseline: PPO's token GAE (the source; segment GAE as a switch), then batch whitening"
    summary = "PPO whose critic is trained only at a few well-separated anchor states (value-flattening fix)."
    citation = ("Li, Yan, Luo, Wang, Wang, Tan, Tian, Cui, Ding, Zhao, Li, Cheng 2026, Rethinking Critic Learning "
                "in PPO: Understanding and Mitigating Value Flattening, arXiv:2609.18708")
    fidelity = "abstract"
    assumptions = (
        "Value flattening (the phenomenon): dense regression on correlated states makes V flat along a response.",
        "Anchors (source): 3 at 0.3/0.6/0.9 of the response, a 4th at 0.95 from 6144 tokens; position/delimiter "
        "selectors (K = 8, d = 64) are the reconstruction's",
        "Advantage (source): PPO's token GAE on the dense critic values; segment/interpolated GAE are switches",
        "The source's 20 critic-only warm-up steps: train.critic_warmup_steps=20 (off by default, as every "
        "train setting); during them the entry's own sparse value loss trains, not the source's dense one",
        "Sparse value loss per response rescaled by |y|/K (same per-response weight as PPO's dense loss).",
        "λ, γ, clip, whitening as PPO (λ = 1; the 0.95–1.0 range is the tune grid).",
    )
    switches = ("sparse_value", "advantage", "anchor_selector", "anchor_positions", "n_anchors", "min_gap")
    _long = "moves anchors only on responses > min_gap (64) tokens; the contract batch has ≤ 6 (unit-tested)"
    _sel = "read only with anchor_selector = position or delimiter (default relative; unit-tested)"
    inert = {"n_anchors": _sel, "min_gap": _sel, "anchor_selector": _long,
             "delimiter_ids": "used only with anchor_selector = delimiter (default relative)",
             "anchor_positions": "moves the critic's loss positions only; the contract harness has no critic "
                                 "values that differ by position (unit-tested)",
             "tail_anchor": "adds an anchor only on responses ≥ tail_min_len (6144) tokens (unit-tested)",
             "tail_min_len": "the contract batch's responses are far below it (unit-tested)"}
    Config = SP3OConfig
    cfg: SP3OConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, m, v = self.cfg, batch.loss_mask, batch.values
        anchors = select_anchors(batch.tokens, m, c.n_anchors, c.min_gap, c.anchor_selector, c.delimiter_ids,
                                 c.anchor_positions, c.tail_anchor, c.tail_min_len)
        if c.advantage == "token":  # the source: PPO's GAE; only the value loss's positions change
            adv, returns = gae(batch.token_rewards, v, m, c.gamma, c.lam)
        elif c.advantage == "segment":
            adv, returns = segment_gae(batch.token_rewards, v, m, anchors, c.gamma, c.lam)
        else:  # token GAE on V interpolated between anchors; returns = Â + Ṽ
            adv, returns = gae(batch.token_rewards, interpolate_values(v, m, anchors), m, c.gamma, c.lam)
        adv = masked_whiten(adv, m) if c.whiten_adv else adv
        row_std = masked_mean((v - masked_mean(v, m, -1)[:, None]).square(), m, -1).sqrt()
        outcome = batch.rewards - group_mean_std(batch.rewards, batch.group_id)[0]
        signed = m * (adv != 0) * (outcome != 0)[:, None]
        multi, k = m.sum(-1) > 1, "algo/sp3o"  # responses with a spread along t
        flat = row_std[multi].mean() / masked_var(v, m).sqrt().clamp(min=1e-8) if multi.any() else v.new_tensor(0.0)
        metrics = {f"{k}/flatness": flat, f"{k}/anchors_mean": anchors.sum(-1).mean(),
                   f"{k}/explained_var_anchors": explained_variance(v, returns, anchors),
                   f"{k}/adv_sign_agreement": masked_mean((adv.sign() == outcome.sign()[:, None]).float(), signed),
                   "value/explained_var": explained_variance(v, returns, m)}
        return AdvOut(adv=adv, returns=returns, metrics=metrics, extras={"sp3o_anchors": anchors})

    def value_loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, anchors = self.cfg, batch.extras["sp3o_anchors"]
        if not c.sparse_value:
            return super().value_loss(fwd, batch, ctx)
        loss, metrics = clipped_value_loss(fwd.values, batch.values, batch.returns, anchors, c.value_clip)
        if c.anchor_reweight:  # |y_i| / K_i per response
            loss = loss * (batch.loss_mask.sum(-1) / anchors.sum(-1).clamp(min=1))[:, None]
        return c.vf_coef * loss, metrics
