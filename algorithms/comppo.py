"""CompPO — computation-conditioned credit transport: Comp-GAE with an attention-gated trace and a
transport-aligned critic (TAC).

Per policy token t, the behaviour policy's own attention concentration
``c_t = 1 − H(a_t)/log(n_t)`` (normalised entropy of the attention row, averaged over layers and
heads, computed in the sampler's forward and stored detached in the rollout record — under
staleness it is μ's statistic) is mapped to a bounded retention gate
``g_t = g_min + (1 − g_min)·σ(κ(c_t − τ)) ∈ [g_min, 1]`` (τ = the batch median of c by default).
Comp-GAE replaces GAE's fixed λ along the response:

    δ_t = r_t + γV_{t+1} − V_t,   Â_t = δ_t + γλ·g_{t+1}·Â_{t+1},   Ĝ_t = Â_t + V_t

so the credit transported backward through a token is retained in proportion to its gate, and
the critic regresses on the gated returns Ĝ (its bootstrap targets follow the same transport).
A constant gate g ≡ 1 recovers fixed-coefficient GAE exactly (tested). TAC is a small MLP value
head on the actor's last hidden states (no second transformer); ``critic = standard`` uses a
separate critic model instead.

Differs from PPO (``ppo.py``) by: 1. the gated trace; 2. the TAC critic (small value-loss
weight 0.1 on the shared trunk, or detached); 3. no dual clip.
Switches (the paper's ablations): ``gate`` = attention | constant | shuffled (gate values
permuted within each response) | position (gate from relative position only, matched in mean
to the attention gate); ``critic`` = tac | standard; ``tac_detach``; g_min, κ, τ.

Fidelity: ``description`` — written before the paper was found (see below); no code located;
everything is a reconstruction.

Source of the defaults (search tools, 2026-12-01): the paper is Shi, Kang, Zhu, "Let Credit Follow
Computation: Architecture-Aware Credit Transport for Large Language Model Reinforcement Learning",
arXiv 2608.21501; only its abstract was read (in third-party digests); no code found. The abstract
states no numeric default: g_min 0.5, κ 10, τ = batch median, λ 1.0 and the value-loss weight 0.1
remain reconstructions. Agrees: attention concentration mapped to a bounded per-token retention
gate; a constant gate recovers fixed-coefficient GAE; task reward and clipped PPO objective
unchanged; shuffle and position controls (the ``gate`` switch). Differs (flagged): (1) the abstract
puts the gate into "both the one-step bootstrap and a path-dependent generalized-advantage trace";
this entry gates only the trace (δ_t is ungated); (2) TAC "reuses the actor's hidden states and
routing information"; this entry's head reads the last hidden state only. Reported there:
Qwen3-4B, five seeds, 61.4% final held-out accuracy vs 53.8% for tuned GRPO; stable in 10/12
PPO-grid runs vs 3/12. The class attributes ``citation`` and ``fidelity`` predate the find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.ppo import PPO, PPOConfig
from rlsuite.suite.ops import explained_variance, gae, masked_mean, masked_whiten
from rlsuite.suite.types import Batch


def retention_gate(conc: torch.Tensor, mask: torch.Tensor, g_min: float, kappa: float,
                   tau: Optional[float]) -> torch.Tensor:
    """``g = g_min + (1 − g_min)·σ(κ(c − τ))`` on policy tokens (τ: batch median of c). [B, T] → [B, T]."""
    t = float(conc[mask > 0].median()) if tau is None and mask.any() else (tau or 0.0)
    return (g_min + (1 - g_min) * torch.sigmoid(kappa * (conc - t))) * mask


def next_token_values(x: torch.Tensor, mask: torch.Tensor, fill: float = 1.0) -> torch.Tensor:
    """``out[b, t]`` = x at the next policy token after t (skipping masked tokens), else ``fill``."""
    out = torch.full_like(x, fill)
    nxt = torch.full_like(x[:, 0], fill)
    for t in reversed(range(x.shape[1])):
        out[:, t] = nxt
        nxt = torch.where(mask[:, t] > 0, x[:, t], nxt)
    return out


@dataclass(frozen=True, kw_only=True)
class CompPOConfig(PPOConfig):
    ranges = {"g_min": "[0, 1]", "kappa": "[0, inf)", "tau": "[0, 1]", "gate_constant": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    gate: Literal["attention", "constant", "shuffled", "position"] = "attention"
    """Gate source: attention concentration, a constant, attention gates shuffled within each
    response, or relative position only (matched in mean to the attention gate)."""
    critic: Literal["tac", "standard"] = "tac"
    """TAC (an MLP value head on the actor's hidden states) or a separate critic model."""
    tac_detach: bool = False
    """TAC on detached hidden states (the trunk then learns from the policy loss only)."""
    g_min: float = 0.5
    """Lower bound of the gate."""
    kappa: float = 10.0
    """Slope κ of the gate's sigmoid."""
    tau: Optional[float] = None
    """Centre τ of the sigmoid (null = the batch median of the concentration)."""
    gate_constant: float = 1.0
    """The gate value when gate = constant (1 recovers GAE with λ)."""
    dual_clip: Optional[float] = None
    vf_coef: float = 0.1
    lam: float = 1.0


@register
class CompPO(PPO):
    name = "comppo"
    not_group_relative = "critic baseline: gated GAE against the learned V_t, then batch whitening"
    summary = "PPO with an attention-gated GAE trace (Comp-GAE) and a transport-aligned value head (TAC)."
    citation = ("Shi, Kang, Zhu 2026, CompPO: computation-conditioned credit transport, arXiv:2608.21501 "
                "(abstract; no code)")
    fidelity = "description"
    assumptions = (
        "concentration c = 1 − normalised attention entropy, averaged over all layers and heads",
        "gate g = g_min + (1 − g_min)·σ(κ(c − τ)), g_min 0.5, κ 10, τ = batch median of c",
        "the gate of the next policy token scales the trace: Â_t = δ_t + γλ g_{t+1} Â_{t+1}; δ_t is ungated",
        "TAC: an MLP head H → H/2 → 1 (tanh) on the last hidden state, value-loss weight 0.1 on the shared trunk",
        "policy loss: PPO clip ε 0.2, token-mean, whitened advantages, no dual clip",
        "position control: g from the relative position in the response, rescaled to the attention gate's mean",
    )
    switches = ("gate", "critic", "tac_detach", "g_min")
    tune_knob = ("g_min", (0.3, 0.5, 0.7))
    inert = {"gate_constant": "used only with gate = constant (default attention)",
             "critic": "selects the critic the trainer builds (Algorithm.critic), not a hook output",
             "tac_detach": "selects the critic the trainer builds (Algorithm.critic), not a hook output"}
    Config = CompPOConfig
    cfg: CompPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | ({"behav_attn_stat"} if self.cfg.gate != "constant" else frozenset())

    @property
    def critic(self) -> Optional[str]:
        if self.cfg.critic == "standard":
            return "separate"
        return "mlp_head_detached" if self.cfg.tac_detach else "mlp_head"

    def gates(self, batch: Batch, ctx: Context) -> torch.Tensor:
        c, mask = self.cfg, batch.loss_mask
        if c.gate == "constant":
            return c.gate_constant * mask
        g = retention_gate(1 - batch.attn_stat, mask, c.g_min, c.kappa, c.tau)
        if c.gate == "shuffled":
            gen = ctx.generator("comppo-shuffle")
            g = g.clone()
            for b in range(g.shape[0]):
                idx = torch.nonzero(mask[b] > 0).squeeze(-1)
                g[b, idx] = g[b, idx[torch.randperm(len(idx), generator=gen).to(idx.device)]]
        elif c.gate == "position":
            pos = (mask.cumsum(-1) - 1).clamp(min=0) / (mask.sum(-1, keepdim=True) - 1).clamp(min=1)
            ramp = c.g_min + (1 - c.g_min) * torch.sigmoid(c.kappa * (pos - 0.5))
            g = (ramp * masked_mean(g, mask) / masked_mean(ramp, mask).clamp(min=1e-8)).clamp(c.g_min, 1.0) * mask
        return g

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c, mask = self.cfg, batch.loss_mask
        g = self.gates(batch, ctx)
        lam_t = c.lam * next_token_values(g, mask)  # γλ g_{t+1} multiplies Â_{t+1}
        adv, returns = gae(batch.token_rewards, batch.values, mask, c.gamma, lam_t)
        raw = adv
        if c.whiten_adv:
            adv = masked_whiten(adv, mask)
        sel = mask > 0
        gv, av = g[sel], raw[sel].abs()
        corr = torch.corrcoef(torch.stack([gv, av]))[0, 1] if gv.numel() > 2 and gv.std() > 0 and av.std() > 0 \
            else torch.tensor(float("nan"))
        metrics = {"algo/comppo/gate_mean": float(gv.mean()) if gv.numel() else float("nan"),
                   "algo/comppo/gate_std": float(gv.std()) if gv.numel() > 1 else 0.0,
                   "algo/comppo/corr_gate_absadv": float(corr),
                   "value/returns_mean": masked_mean(returns, mask),
                   "value/explained_var": explained_variance(batch.values, returns, mask)}
        return AdvOut(adv=adv, returns=returns, metrics=metrics)
