"""Dr. GRPO — GRPO "done right" (Liu et al. 2025, arXiv 2503.20783).

Objective: ``J = (1/G) Σ_i Σ_t min(r_it·Â_i, clip(r_it, 1±ε)·Â_i) / L`` with ``Â_i = R_i − mean_G R``.

Differs from GRPO (``grpo.py``) by:
  1. No division by the group std (Oat's ``remove_std_bias``): ``scale_by_std = False``.
  2. No 1/|y_i| length normalisation (Oat's ``remove_len_bias``): each sequence's token sum is
     divided by the constant ``L = rollout.max_new_tokens`` and averaged over sequences —
     aggregation ``seq-mean-token-sum-norm`` as in the Dr. GRPO code. (verl 0.9.1's mode of that
     name divides by the number of non-empty sequences times the padded width of the loss
     mask, or ``loss_scale_factor`` when set: the same as ours when no row is fully masked and
     the width is L; TRL 1.16.0's ``dr_grpo`` divides by B·max_completion_length, which equals
     ours. See ``suite/aggregation.py``.)
  3. No KL and no reference model (β = 0).
  4. Truncated responses (no EOS) get reward 0 (``zero_truncated``), as in the code.

Fidelity: ``code`` — sail-sg/understand-r1-zero ``train_zero_math.py`` (Oat).
[ASSUMPTION] ε = 0.2 (the Oat default; the README does not state it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlsuite.algorithms.base import Context, Group, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import AggMode


@dataclass(frozen=True, kw_only=True)
class DrGRPOConfig(GRPOConfig):
    scale_by_std: bool = False
    aggregation: AggMode = "seq-mean-token-sum-norm"
    kl_coef: float = 0.0
    zero_truncated: bool = True
    """Responses that hit max_new_tokens without EOS get reward 0."""


@register
class DrGRPO(GRPO):
    name = "dr_grpo"
    summary = "GRPO without std scaling or length normalisation (constant normaliser), no KL."
    citation = ("Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective, "
                "arXiv:2503.20783")
    fidelity = "code"
    assumptions = ("ε = 0.2, the Oat default; the paper's README does not state it",)
    switches = ("scale_by_std", "aggregation", "zero_truncated")
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    Config = DrGRPOConfig
    cfg: DrGRPOConfig

    def rewards(self, group: Group, ctx: Context) -> torch.Tensor:
        if self.cfg.zero_truncated and group.truncated is not None:
            return torch.where(group.truncated, torch.zeros_like(group.scores), group.scores)
        return group.scores
