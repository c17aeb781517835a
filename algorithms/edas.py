"""EDAS — Error Diversity Advantage Shaping (a wrapper over GRPO or DAPO).

Liu, Xu, Xie, Zhu, Dong, Wang, Shao, Zhang, Yang, Duan, Wang 2026, "Leveraging Error Diversity in
Group Rollouts for Reinforcement Learning", arXiv 2605.17333 (code: today-still-sleep-early/EDAS).
After the base's group-normalised advantage, only the incorrect rollouts W of a group change
(N_w = |W|). Partition W into K error classes, ``p_k = |C_k|/N_w``, ``I_i = −ln p_k(i)``,
``H = −Σ_k p_k ln p_k``, ``S = mean_{i∈W} |A_i|``:

    Δ_i = 0                              if N_w ≤ 1
    Δ_i = −β·S                           if K = 1   (every wrong answer identical: perseveration)
    Δ_i = α·S·(I_i − H)/ln N_w           if K > 1   (rare errors penalised less; zero-sum over W)
    A_i ← A_i + sgn(Δ_i)·min(|Δ_i|, |A_i|/κ)        (sign-preserving, κ > 1)

Differs from its base (``base``: ``dapo`` — DAPO's clip-higher and dynamic sampling — or
``grpo``: GRPO z-score, PPO clip ε 0.2/0.2 and a k3 KL loss, no DAPO mechanisms) by the shaping
above, with an optional warm-up of the shaping.

Source of the defaults: the authors' function, its GRPO caller, the warm-up and both launch
scripts (the verl port of the EDAS repository, as carried unmodified by a public fork; compared
for the fidelity issue: the advantage computation agreed on 20 random cases). The defaults are
the authors' launch settings:

* ``base = grpo``: a KL loss with coefficient 0.01 and the k3 (verl ``low_var_kl``) estimator
  (``kl_coef = None`` resolves to 0.01 with GRPO, 0 with DAPO); ``base = dapo``: no overlong
  penalty (``overlong = none``: the authors' DAPO launcher sets the overlong buffer length to 0;
  ``shaping``, DAPO's soft punishment, and ``filter`` stay switches).
* Warm-up: the authors' ramp waits ``warmup_start`` steps, then rises linearly over
  ``warmup_steps`` steps (``ramp = clamp((step − warmup_start)/warmup_steps, 0, 1)``; 0 steps = off,
  the default, as the suite found no warm-up value in the launch scripts it was compared with);
  ``warmup_frac`` (a linear ramp over that share of training progress, no delay) is the
  reconstruction's own switch.
* ``overlong = filter`` (the suite's own option): a truncated row is out of the loss, and also
  out of the wrong set W (not counted in N_w, K or S), as if it had not been sampled: its answer
  was cut off, so its error class says nothing about the policy's error modes.

Fidelity: ``code``. The error class is the task's (``Batch.error_class`` from ``Grade.error_key``:
the canonical final answer for math-like tasks, the exception type or failure status for code;
``equivalence = parsed`` uses the parsed answer instead). [ASSUMPTION]s: unparsable answers
(None) share one "no answer" class (``none_class``); a rollout is incorrect iff its task score
< 1; β = 0.3 with DAPO and 0.2 with GRPO when unset; the warm-up's step is the suite's update
step (1-based), its exact off-by-one in the authors' loop not checked.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.dapo import DAPO, DAPOConfig
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.ops import clipped_surrogate
from rlsuite.suite.types import Batch, Forward


def edas_delta(adv: list[float], classes: list, alpha: float, beta: float) -> tuple[list[float], int]:
    """Δ_i for the incorrect rollouts of one group (their advantages and error classes) and K."""
    n, counts = len(adv), Counter(classes)
    if n <= 1:
        return [0.0] * n, len(counts)
    S = sum(abs(a) for a in adv) / n
    if len(counts) == 1:
        return [-beta * S] * n, 1
    p = {k: v / n for k, v in counts.items()}
    H = -sum(q * math.log(q) for q in p.values())
    return [alpha * S * (-math.log(p[c]) - H) / math.log(n) for c in classes], len(counts)


def clip_shift(a: float, d: float, kappa: float) -> float:
    """Sign-preserving update ``A + sgn(Δ)·min(|Δ|, |A|/κ)``."""
    return a + math.copysign(min(abs(d), abs(a) / kappa), d) if d != 0 else a


@dataclass(frozen=True, kw_only=True)
class EDASConfig(DAPOConfig):
    ranges = {"alpha": "[0, inf)", "beta": "[0, inf)", "kappa": "(1, inf)", "warmup_frac": "[0, 1]",
              "warmup_start": "[0, inf)", "warmup_steps": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    base: Literal["dapo", "grpo"] = "dapo"
    """Group estimator wrapped: DAPO (clip-higher, dynamic sampling) or GRPO (with its KL loss)."""
    kl_coef: Optional[float] = None  # type: ignore[assignment]
    """KL loss coefficient (None: the authors' launchers, 0.01 with GRPO, 0 with DAPO)."""
    overlong: Literal["shaping", "filter", "none"] = "none"
    """DAPO's overlong handling: ``none`` (the authors' DAPO launcher: no penalty), ``shaping`` (the soft
    punishment) or ``filter`` (truncated rows out of the loss and out of the wrong set)."""
    clip_eps_high: Optional[float] = None
    """ε_high of the clip (None: the base's, 0.28 DAPO / 0.2 GRPO)."""
    alpha: float = 0.4
    """Diversity shaping strength (K > 1)."""
    beta: Optional[float] = None
    """Perseveration penalty (K = 1; None: 0.3 with DAPO, 0.2 with GRPO)."""
    kappa: float = 2.0
    """Sign-preserving clip: |change| ≤ |A|/κ (κ > 1)."""
    warmup_start: int = 0
    """The authors' warm-up: update steps before the shaping starts to ramp in."""
    warmup_steps: int = 0
    """The authors' warm-up: linear ramp of the shaping over this many steps after ``warmup_start`` (0 = off)."""
    warmup_frac: float = 0.0
    """The reconstruction's warm-up: a linear ramp over this fraction of training progress (0 = off)."""
    none_class: Literal["shared", "unique"] = "shared"
    """Unparsable answers form one class, or each its own."""
    equivalence: Literal["task", "parsed"] = "task"
    """Error-equivalence function: the task's error class (``Batch.error_class``) or the parsed answer."""

    def __post_init__(self) -> None:
        if self.kl_coef is None:  # the authors' launchers: KL loss 0.01 (k3) with GRPO, none with DAPO
            object.__setattr__(self, "kl_coef", 0.01 if self.base == "grpo" else 0.0)
        super().__post_init__()
        if self.kappa <= 1:
            raise ValueError(f"kappa must be > 1, got {self.kappa}")
        if self.warmup_frac > 0 and (self.warmup_steps > 0 or self.warmup_start > 0):
            raise ValueError("warmup_frac (a ramp over training progress) and warmup_start/warmup_steps (the "
                             "authors' ramp in steps) are alternatives: set one of them")

    def ramp(self, step: int, progress: float) -> float:
        """The shaping's weight in [0, 1] at this step (1 without a warm-up)."""
        if self.warmup_frac > 0:
            return min(1.0, progress / self.warmup_frac)
        if self.warmup_steps > 0 or self.warmup_start > 0:
            return min(1.0, max(0.0, (step - self.warmup_start) / max(self.warmup_steps, 1)))
        return 1.0


@register
class EDAS(DAPO):
    name = "edas"
    summary = "Reshapes incorrect rollouts' advantages by the diversity of their errors (over GRPO or DAPO)."
    citation = ("Liu et al. 2026, Leveraging Error Diversity in Group Rollouts for Reinforcement Learning, "
                "arXiv:2605.17333")
    fidelity = "code"
    assumptions = ("error class = the task's Grade.error_key (math: canonical answer; code: exception type)",
                   "unparsable answers share one 'no answer' class (none_class)",
                   "incorrect ⇔ task score < 1",
                   "β = 0.3 with DAPO, 0.2 with GRPO when unset",
                   "warm-up off by default (no value found in the launch scripts compared); its step is the "
                   "suite's 1-based update step",
                   "overlong = filter (the suite's own) drops truncated rows from the wrong set too")
    switches = ("base", "kl_coef", "overlong", "alpha", "beta", "kappa", "warmup_start", "warmup_steps",
                "warmup_frac", "none_class", "equivalence")
    inert = {"alpha": "acts only where a group's wrong answers fall into ≥ 2 classes; the contract harness "
                      "carries no parsed answers (covered by its hand tests in tests/unit/)",
             "equivalence": "the contract harness carries neither error classes nor parsed answers (covered by "
                            "its hand tests in tests/unit/)",
             "overlong_buffer": "read only with overlong = shaping (default none, the authors' DAPO launcher)",
             "overlong_penalty": "read only with overlong = shaping (default none, the authors' DAPO launcher)",
             "warmup_start": "the contract harness's groups carry no wrong set the shaping changes at its step "
                             "(covered by the hand tests in tests/unit/)",
             "warmup_steps": "the contract harness's groups carry no wrong set the shaping changes at its step "
                             "(covered by the hand tests in tests/unit/)"}
    tune_knob = ("alpha", (0.2, 0.4, 0.6))
    Config = EDASConfig
    cfg: EDASConfig

    def rewards(self, group, ctx: Context) -> torch.Tensor:
        return super().rewards(group, ctx) if self.cfg.base == "dapo" else group.scores

    def filter(self, batch: Batch, ctx: Context) -> Optional[torch.Tensor]:
        return super().filter(batch, ctx) if self.cfg.base == "dapo" else None

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c = self.cfg
        # the base's z-score (with DAPO's overlong filtering when base = dapo and overlong = filter)
        out = super().advantages(batch, ctx) if c.base == "dapo" else GRPO.advantages(self, batch, ctx)
        beta = c.beta if c.beta is not None else (0.3 if c.base == "dapo" else 0.2)
        ramp = c.ramp(ctx.step, ctx.progress)
        mask = out.loss_mask if out.loss_mask is not None else batch.loss_mask
        seq = ((out.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()  # Â_i
        source = batch.error_class if c.equivalence == "task" else batch.parsed
        parsed = list(source) if len(source) == batch.batch_size else [None] * batch.batch_size
        wrong = (batch.scores < 1).tolist()
        if out.loss_mask is not None:  # overlong = filter: a row out of the loss is out of W too
            kept = (out.loss_mask.sum(-1) > 0).tolist()
            wrong = [w and k for w, k in zip(wrong, kept)]
        new, deltas, k_one, k_many, ents = list(seq), [], 0, 0, []
        for g in torch.unique(batch.group_id).tolist():
            rows = [i for i in (batch.group_id == g).nonzero().flatten().tolist() if wrong[i]]
            cls = [parsed[i] if parsed[i] is not None or c.none_class == "shared" else ("<none>", i) for i in rows]
            d, K = edas_delta([seq[i] for i in rows], cls, c.alpha, beta)
            if len(rows) >= 2:
                k_one, k_many = k_one + (K == 1), k_many + (K > 1)
                ents.append(-sum(v / len(rows) * math.log(v / len(rows)) for v in Counter(cls).values()))
            for i, di in zip(rows, d):
                new[i] = clip_shift(seq[i], ramp * di, c.kappa)
                deltas.append(new[i] - seq[i])
        adv = torch.tensor(new, dtype=out.adv.dtype, device=out.adv.device)[:, None] * mask
        m = {**out.metrics, "algo/edas/groups_k1": float(k_one), "algo/edas/groups_kmulti": float(k_many),
             "algo/edas/perseveration_rate": k_one / max(1, k_one + k_many),
             "algo/edas/delta_mean": sum(deltas) / max(1, len(deltas)),
             "algo/edas/error_entropy": sum(ents) / max(1, len(ents))}
        return AdvOut(adv=adv, metrics=m, loss_mask=out.loss_mask)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        c = self.cfg
        high = c.clip_eps_high if c.clip_eps_high is not None else (0.28 if c.base == "dapo" else 0.2)
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, c.clip_eps_low, high)
