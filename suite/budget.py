"""Budget counters and the FLOPs accounting.

Counters (cumulative, logged every step as ``budget/<key>``): ``prompts``, ``samples``,
``gen_tokens``, ``train_tokens``, ``updates``, ``flops``, ``wall_s``. A run stops after the
step that crosses any limit set in the spec and records the exact counters.

FLOPs, with ``P`` the non-embedding parameters of the model doing the work
(:func:`rlsuite.suite.models.non_embedding_params`) and token counts over real (non-pad) tokens:

* rollout: ``2·P·(prompt + generated)`` per sample (observation tokens count as prompt);
* each scoring pass (π_old, π_ref, a separate critic, a judge): ``2·P·(prompt + response)``;
* training: ``6·P·(prompt + response)`` per sample per epoch (a separate critic adds its own
  ``6·P_critic·…``);
* discarded samples (filtering) are charged for everything they went through.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsuite.suite.config import BUDGET_KEYS


def rollout_flops(params: int, prompt_tokens: int, generated_tokens: int) -> int:
    """``2·P·(prompt + generated)`` summed over samples (pass totals over the batch)."""
    return 2 * params * (prompt_tokens + generated_tokens)


def scoring_flops(params: int, tokens: int) -> int:
    """One forward over ``tokens`` real tokens: ``2·P·tokens``."""
    return 2 * params * tokens


def training_flops(params: int, tokens: int, epochs: int) -> int:
    """Forward + backward over ``tokens`` per epoch: ``6·P·tokens·epochs``."""
    return 6 * params * tokens * epochs


@dataclass
class Budget:
    """Cumulative counters and the limits of the spec."""

    limits: dict[str, float]
    counters: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in BUDGET_KEYS})
    flops_by_kind: dict[str, float] = field(default_factory=dict)

    def charge(self, key: str, amount: float) -> None:
        self.counters[key] += amount

    def charge_flops(self, kind: str, flops: float) -> None:
        self.counters["flops"] += flops
        self.flops_by_kind[kind] = self.flops_by_kind.get(kind, 0.0) + flops

    @property
    def progress(self) -> float:
        """Progress of the binding (most advanced) budget, in [0, 1]."""
        if not self.limits:
            return 0.0
        return min(1.0, max(self.counters[k] / v for k, v in self.limits.items()))

    @property
    def exhausted(self) -> bool:
        return any(self.counters[k] >= v for k, v in self.limits.items())

    def row(self) -> dict[str, float]:
        """Cumulative counters (``budget/<key>``) and FLOPs per kind of pass (``budget/flops_<kind>``:
        rollout, score_old, score_ref, score_init, train, anchor, judge…)."""
        out = {f"budget/{k}": (int(v) if k not in ("wall_s",) and float(v).is_integer() else v)
               for k, v in self.counters.items()}
        out.update({f"budget/flops_{k}": v for k, v in sorted(self.flops_by_kind.items())})
        return out

    def state_dict(self) -> dict:
        return {"counters": dict(self.counters), "flops_by_kind": dict(self.flops_by_kind)}

    def load_state_dict(self, d: dict) -> None:
        self.counters.update(d["counters"])
        self.flops_by_kind.update(d.get("flops_by_kind", {}))
