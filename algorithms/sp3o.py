"""SP3O — Sparse Proximal Policy Optimization (Li, Yan, Luo, Wang, Wang, Tan, Tian, Cui, Ding,
Zhao, Li, Cheng, "Rethinking Critic Learning in PPO: Understanding and Mitigating Value
Flattening", arXiv 2609.18708); reconstruction of algorithms.md §10.

Value flattening: dense per-token regression on highly correlated adjacent states with a
terminal-only reward makes V nearly constant along a response, so δ_t ≈ 0 except at the end
and GAE degenerates. The fix trains the critic on a few well-separated *anchor* states:

  * anchors ``t_0 < … < t_{K−1}`` per response (a pure function of the token ids): the first
    and last policy token plus intermediate ones ≥ d tokens from their neighbours, evenly
    spaced (``position``) or right after a step delimiter (``delimiter``), at most K;
  * sparse value loss: PPO's clipped value loss only at anchors,
    ``L_V = mean_anchors ½·max((V − Ĝ)², (clip(V, V_old ± c) − Ĝ)²)``;
  * segment GAE (each segment between anchors is a macro-action, R_k = reward inside it):
    ``δ_k = R_k + γ·V(s_{t_{k+1}}) − V(s_{t_k})``, ``Â_k = δ_k + γλ·Â_{k+1}``; every token of
    segment k gets Â_k (value target ``Â_k + V(s_{t_k})``). Alternative: token GAE with V
    linearly interpolated between anchors.

Differs from PPO (``algorithms/ppo.py``, whose policy loss it reuses) only in the critic's
loss mask and the advantage estimator. Metrics: ``algo/sp3o/{flatness, anchors_mean,
explained_var_anchors, adv_sign_agreement}`` (flatness = mean_i std_t V / std_batch V).
Fidelity: ``abstract``; the anchor rule and segment GAE are reconstructions (``assumptions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from algorithms.base import AdvOut, Context, register
from algorithms.ppo import PPO, PPOConfig
from suite.ops import clipped_value_loss, explained_variance, gae, group_mean_std, masked_mean, masked_var, masked_whiten
from suite.types import Batch, Forward


def select_anchors(tokens, mask, n_anchors: int, min_gap: int, selector: str, delimiter_ids=()) -> torch.Tensor:
    """Anchor indicator ``[B, T]`` on policy tokens: first and last always; ≤ K − 2 between, each ≥ d
    policy tokens from its neighbours (evenly spaced, or the token after a delimiter id)."""
    out = torch.zeros_like(mask)
    for b in range(mask.shape[0]):
        pos = mask[b].nonzero().squeeze(-1)
        L = len(pos)
        if L == 0:
            continue
        if selector == "position":
            k = min(n_anchors, (L - 1) // min_gap + 1, L)
            k = max(k, 2) if L > 1 else 1
            idx = [int(j * (L - 1) / (k - 1) + 0.5) for j in range(k)] if k > 1 else [0]
        else:
            toks, idx = tokens[b, pos].tolist(), [0]
            for j in range(1, L - 1):
                if toks[j - 1] in delimiter_ids and j - idx[-1] >= min_gap and L - 1 - j >= min_gap \
                        and len(idx) < n_anchors - 1:
                    idx.append(j)
            idx += [L - 1] if L > 1 else []
        out[b, pos[idx]] = 1
    return out


def segment_gae(token_rewards, values, mask, anchors, gamma: float, lam: float):
    """GAE over anchor segments, broadcast to their tokens. [B, T] → (adv, returns) [B, T]."""
    seg = (anchors.cumsum(-1) - 1).clamp(min=0).long()  # segment index of each column
    per_seg = lambda x: torch.zeros_like(x).scatter_add_(1, seg, x).gather(1, seg)  # noqa: E731
    r_k = per_seg(token_rewards * mask) * anchors  # reward inside segment k, at its anchor
    adv_k, ret_k = gae(r_k, values, anchors, gamma, lam)  # δ_k = R_k + γV(t_{k+1}) − V(t_k)
    return per_seg(adv_k * anchors) * mask, per_seg(ret_k * anchors) * mask


def interpolate_values(values, mask, anchors) -> torch.Tensor:
    """V linearly interpolated between anchors along each response's policy tokens. [B, T] → [B, T]."""
    out = torch.zeros_like(values)
    for b in range(mask.shape[0]):
        pos = mask[b].nonzero().squeeze(-1)
        if len(pos) == 0:
            continue
        a = anchors[b, pos].nonzero().squeeze(-1)
        va, j = values[b, pos[a]], torch.arange(len(pos), device=a.device)
        lo = torch.searchsorted(a, j, right=True) - 1
        hi = (lo + 1).clamp(max=len(a) - 1)
        frac = torch.where(a[hi] > a[lo], (j - a[lo]) / (a[hi] - a[lo]).clamp(min=1), torch.zeros_like(j).float())
        out[b, pos] = va[lo] + frac.to(va.dtype) * (va[hi] - va[lo])
    return out


@dataclass(frozen=True, kw_only=True)
class SP3OConfig(PPOConfig):
    n_anchors: int = 8
    """K, most anchors per response (first and last included)."""
    min_gap: int = 64
    """d, least policy tokens between neighbouring intermediate anchors."""
    anchor_selector: Literal["position", "delimiter"] = "position"
    """Evenly spaced anchors, or anchors right after a step delimiter (delimiter_ids)."""
    delimiter_ids: tuple[int, ...] = ()
    """Token ids that end a reasoning step (e.g. the tokenizer's id of '\\n\\n')."""
    sparse_value: bool = True
    """Value loss only at anchors (False: PPO's dense value loss)."""
    advantage: Literal["segment", "interpolated"] = "segment"
    """Segment GAE over anchors, or token GAE with V interpolated between anchors."""
    anchor_reweight: bool = True
    """Scale each response's anchor losses by |y|/K, keeping PPO's per-response value-loss weight."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_anchors < 2 or self.min_gap < 1:
            raise ValueError(f"need n_anchors ≥ 2 and min_gap ≥ 1 (got {self.n_anchors}, {self.min_gap})")


@register
class SP3O(PPO):
    name = "sp3o"
    summary = "PPO whose critic is trained only at a few well-separated anchor states; segment-level GAE."
    citation = ("Li, Yan, Luo, Wang, Wang, Tan, Tian, Cui, Ding, Zhao, Li, Cheng 2026, Rethinking Critic Learning "
                "in PPO: Understanding and Mitigating Value Flattening, arXiv:2609.18708")
    fidelity = "abstract"
    assumptions = (
        "Value flattening as described: dense regression on correlated states flattens V along a response.",
        "Anchors: first and last policy token always, ≤ K − 2 between, each ≥ d tokens from its neighbours; "
        "K = 8, d = 64 (ranges 4–8, ≥ 64); short responses get first + last only.",
        "Segment GAE with one γ per segment; every token of segment k gets Â_k; target Â_k + V(s_{t_k}).",
        "Sparse value loss per response rescaled by |y|/K (same per-response weight as PPO's dense loss).",
        "λ, γ, clip, whitening as PPO (λ = 1; the 0.95–1.0 range is the tune grid).",
    )
    switches = ("sparse_value", "advantage", "anchor_selector", "n_anchors", "min_gap")
    inert = {"n_anchors": "changes anchors only on responses longer than min_gap (64) tokens; the contract "
                          "batch has ≤ 6 (live on long responses: tests/unit/test_seed_b.py)",
             "min_gap": "as n_anchors: only responses longer than min_gap tokens get intermediate anchors",
             "anchor_selector": "delimiter anchors also need responses longer than min_gap and delimiter_ids",
             "delimiter_ids": "used only with anchor_selector = delimiter (default position)"}
    Config = SP3OConfig
    cfg: SP3OConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, m, v = self.cfg, batch.loss_mask, batch.values
        anchors = select_anchors(batch.tokens, m, c.n_anchors, c.min_gap, c.anchor_selector, c.delimiter_ids)
        if c.advantage == "segment":
            adv, returns = segment_gae(batch.token_rewards, v, m, anchors, c.gamma, c.lam)
        else:
            v_interp = interpolate_values(v, m, anchors)
            adv, returns = gae(batch.token_rewards, v_interp, m, c.gamma, c.lam)
        if c.whiten_adv:
            adv = masked_whiten(adv, m)
        row_std = masked_mean((v - masked_mean(v, m, -1)[:, None]).square(), m, -1).sqrt()
        outcome = batch.rewards - group_mean_std(batch.rewards, batch.group_id)[0]
        signed = m * (adv != 0) * (outcome != 0)[:, None]
        k = "algo/sp3o"
        multi = m.sum(-1) > 1  # responses with a spread along t
        flat = row_std[multi].mean() / masked_var(v, m).sqrt().clamp(min=1e-8) if multi.any() else v.new_tensor(0.0)
        metrics = {f"{k}/flatness": flat,
                   f"{k}/anchors_mean": anchors.sum(-1).mean(),
                   f"{k}/explained_var_anchors": explained_variance(v, returns, anchors),
                   f"{k}/adv_sign_agreement": masked_mean((adv.sign() == outcome.sign()[:, None]).float(), signed),
                   "value/returns_mean": masked_mean(returns, m), "value/explained_var": explained_variance(v, returns, m)}
        return AdvOut(adv=adv, returns=returns, metrics=metrics, extras={"sp3o_anchors": anchors})

    def value_loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c, anchors = self.cfg, batch.extras["sp3o_anchors"]
        if not c.sparse_value:
            return super().value_loss(fwd, batch, ctx)
        loss, metrics = clipped_value_loss(fwd.values, batch.values, batch.returns, anchors, c.value_clip)
        if c.anchor_reweight:  # |y_i| / K_i per response
            loss = loss * (batch.loss_mask.sum(-1) / anchors.sum(-1).clamp(min=1))[:, None]
        return c.vf_coef * loss, metrics
