"""Entrocraft — entropy-curve control by rejection on the advantage distribution.

Li, Wang, Ding, Lochab, Grama, Zhang 2026, "Addressing Performance Saturation for LLM RL via
Precise Entropy Curve Control", arXiv 2604.26326 (code: lblaoke/entrocraft). Positive-advantage
samples lower the policy entropy and negative ones raise it (ΔH ∝ −Cov(A, log π − E log π)), so
accepting samples by advantage sign steers H along a target band [L(s), U(s)]:

    H > U(s): keep A > 0 only (RAFT++);   H < L(s): keep A < 0 only (NSR);   else: GRPO.

H = the last measured token-mean entropy (``ctx.entropy``), s = ``ctx.progress``. Schedules: ``constant``,
``linear`` L(s) = L0 + (L1 − L0)s (same for U), ``cosine`` (s → ½(1 − cos πs)), ``custom`` (knots).
Loss: PPO clip (ε 0.2), token-mean, k3 KL loss β = 0.001 (the reference script).

Differs from GRPO (``algorithms/grpo.py``) by:
  1. The regime wrapper on the advantage (``controller``: ``band`` as released; ``proportional``: accept
     positives/negatives with probability a± = clip(1 ± gain·(H − H*), 0, 1), H* = (L + U)/2; ``off`` = GRPO).
  2. ``mechanism``: ``zero`` the rejected samples' advantages (released) or ``reject`` them in
     ``filter`` so the trainer refills the step with accepted samples.
  3. ``branch_adv``: the accepted samples keep the GRPO z-score (``normalised``) or, as released,
     the raw reward ``R − reward_center`` whenever a rejection regime is active (``raw``).

Fidelity: ``code`` (band controller and schedules from lblaoke/entrocraft). [ASSUMPTION]s:
normalised branch advantages by default (released: raw ±1 rewards; the suite's 0/1 rewards would
give NSR no negatives); the proportional controller and sample rejection (the reference's
"general version"); progress of the binding budget as s/S; zero-advantage samples always kept.

Source of the defaults (search tools, 2026-12-01): the authors' code lblaoke/entrocraft (a verl
fork; snapshot 26165bd, 2026-05-12): README, scripts/grpo/grpo_range_linear/
qwen3-4b-base_numina_math_grpo_range_linear_n8.slurm, verl/trainer/ppo/core_algos.py
(grpo_range_linear) and the fork's actor config. Agree: band L 0.6 → 0.4 and U 0.7 → 0.5, linear in
step/total; the band rule (H > U: RAFT++, H < L: NSR, else GRPO); PPO clip 0.2 / 0.2 and
token-mean (the fork's defaults, not overridden by the script); low_var_kl (k3) KL loss 0.001;
entropy 0; one epoch. Differs: ``branch_adv`` (normalised here, raw rewards as released; listed
above). Launch: Qwen3-4B-Base, Numina-Math-100k, 1024 prompts × 8 a step, mini-batch 32 prompts
per GPU (256 on 8 GPUs, 4 updates a step), LR 1e-6, max response 3072 (trainer settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.algorithms.raft_pp import sign_acceptance
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage
from rlsuite.suite.types import Batch


def interp(s: float, knots: tuple[float, ...]) -> float:
    """Piecewise-linear value at s ∈ [0, 1] of knots evenly spaced on [0, 1]."""
    if len(knots) == 1:
        return knots[0]
    x = min(max(s, 0.0), 1.0) * (len(knots) - 1)
    i = min(int(x), len(knots) - 2)
    return knots[i] + (knots[i + 1] - knots[i]) * (x - i)


def band(s: float, c: EntrocraftConfig) -> tuple[float, float]:
    """Target band (L, U) at progress s ∈ [0, 1]."""
    if c.schedule == "custom":
        return interp(s, c.custom_lower), interp(s, c.custom_upper)
    f = {"constant": 0.0, "linear": s, "cosine": 0.5 * (1 - math.cos(math.pi * s))}[c.schedule]
    return c.lower_start + (c.lower_end - c.lower_start) * f, c.upper_start + (c.upper_end - c.upper_start) * f


def acceptance(h: Optional[float], low: float, up: float, controller: str, gain: float) -> tuple[float, float]:
    """(a+, a−): acceptance probabilities of positive / negative-advantage samples."""
    if h is None or controller == "off":
        return 1.0, 1.0
    if controller == "band":
        return (1.0, 0.0) if h > up else (0.0, 1.0) if h < low else (1.0, 1.0)
    e = h - 0.5 * (low + up)
    return min(1.0, max(0.0, 1 + gain * e)), min(1.0, max(0.0, 1 - gain * e))


@dataclass(frozen=True, kw_only=True)
class EntrocraftConfig(GRPOConfig):
    ranges = {"lower_start": "[0, inf)", "lower_end": "[0, inf)", "upper_start": "[0, inf)",
              "upper_end": "[0, inf)", "custom_lower": "[0, inf)", "custom_upper": "[0, inf)", "gain": "[0, inf)",
              "reward_center": "(-inf, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.001
    controller: Literal["band", "proportional", "off"] = "band"
    """Regime controller: released band rule, proportional acceptance, or off (= GRPO)."""
    schedule: Literal["linear", "constant", "cosine", "custom"] = "linear"
    """Shape of the band over training progress."""
    lower_start: float = 0.6
    """L at progress 0 (nats)."""
    lower_end: float = 0.4
    """L at progress 1."""
    upper_start: float = 0.7
    """U at progress 0."""
    upper_end: float = 0.5
    """U at progress 1."""
    custom_lower: tuple[float, ...] = ()
    """L knots evenly spaced over progress [0, 1] (schedule = custom)."""
    custom_upper: tuple[float, ...] = ()
    """U knots evenly spaced over progress [0, 1] (schedule = custom)."""
    gain: float = 5.0
    """Proportional controller gain per nat of H − H*."""
    mechanism: Literal["zero", "reject"] = "zero"
    """Zero the rejected samples' advantages, or drop them in filter (the trainer refills)."""
    branch_adv: Literal["normalised", "raw"] = "normalised"
    """Accepted samples keep the z-score, or get the raw R − reward_center in rejection regimes."""
    reward_center: float = 0.5
    """Centre of the raw branch (released ±1 rewards: 0; 0/1 rewards: 0.5)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.schedule == "custom" and (not self.custom_lower or len(self.custom_lower) != len(self.custom_upper)):
            raise ValueError("schedule=custom needs custom_lower and custom_upper of equal, non-zero length")


_CTX = ("live when H ≤ U(s); the contract context (H = 0.9) is above every default band (see its hand tests in "
        "tests/unit/)")


@register
class Entrocraft(GRPO):
    name = "entrocraft"
    summary = "Entropy-curve control: accept samples by advantage sign to follow a scheduled entropy band."
    citation = ("Li, Wang, Ding, Lochab, Grama, Zhang 2026, Addressing Performance Saturation for LLM RL via "
                "Precise Entropy Curve Control, arXiv:2604.26326")
    fidelity = "code"
    assumptions = ("branch advantages keep the GRPO z-score by default (released: raw ±1 rewards; branch_adv=raw)",
                   "proportional controller a± = clip(1 ± gain·(H − H*)) and filter rejection ('general version')",
                   "schedule clock s/S = progress of the binding budget",
                   "zero-advantage samples are always accepted")
    switches = ("controller", "schedule", "mechanism", "branch_adv", "lower_start", "lower_end", "upper_end")
    inert = {"custom_lower": "used only with schedule = custom", "custom_upper": "used only with schedule = custom",
             "gain": "used only with controller = proportional", "reward_center": "used only with branch_adv = raw",
             "clip_eps_low": "acts on A < 0 only; " + _CTX, "schedule": _CTX, "lower_start": _CTX, "lower_end": _CTX}
    tune_knob = ("upper_end", (0.4, 0.5, 0.6))
    Config = EntrocraftConfig
    cfg: EntrocraftConfig

    @property
    def group_relative(self) -> bool:  # type: ignore[override]
        return self.cfg.branch_adv == "normalised"

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c = self.cfg
        low, up = band(ctx.progress, c)
        a_pos, a_neg = acceptance(ctx.entropy, low, up, c.controller, c.gain)
        adv = group_normalised_advantage(batch.rewards, batch.group_id, c.scale_by_std)  # [B]
        if c.branch_adv == "raw" and (a_pos < 1 or a_neg < 1):
            adv = batch.rewards - c.reward_center
        u = torch.rand(adv.shape, generator=ctx.generator("entrocraft/accept")).to(adv.device)
        keep = sign_acceptance(adv, a_pos, a_neg, u)  # band regime H > U: (1, 0), RAFT++'s rule (algorithms/raft_pp.py)
        m = {"lower": low, "upper": up, "target": 0.5 * (low + up), "accept_pos": a_pos, "accept_neg": a_neg,
             "regime": 0.0 if a_pos == a_neg else (1.0 if a_pos > a_neg else -1.0),  # +1: RAFT++, −1: NSR
             "rejected_frac": float((~keep).sum()) / max(1, int((adv != 0).sum()))}
        if ctx.entropy is not None:
            m.update(entropy=float(ctx.entropy), abs_error=abs(float(ctx.entropy) - m["target"]))
        return AdvOut(adv=broadcast_to_tokens(adv * keep.to(adv.dtype), batch.loss_mask),
                      metrics={f"algo/entrocraft/{k}": v for k, v in m.items()},
                      extras={"entrocraft_keep": keep.float()})

    def filter(self, batch: Batch, ctx: Context) -> Optional[torch.Tensor]:
        return batch.extras["entrocraft_keep"] > 0.5 if self.cfg.mechanism == "reject" else None
