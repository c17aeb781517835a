"""BNPO — TRL 1.16.0's ``loss_type="bnpo"``: the GRPO clipped surrogate normalised by the number of
policy tokens of the batch (TRL's docstring cites no paper for it).

Objective (maximised): ``J = (1/Σ_i|y_i|) Σ_i Σ_t min(r_it·Â_i, clip(r_it, 1−ε, 1+ε_high)·Â_i)``
with TRL's group advantage ``Â_i = (R_i − mean_G R)/(std_G R + 1e-4)`` (unbiased std, ε 1e-4).

Differs from GRPO (``grpo.py``) by:
  1. Token-mean aggregation instead of ``seq-mean-token-mean``. TRL normalises by the tokens of
     its *local* micro-batch and divides by the accumulation steps; the suite's token-mean uses the
     minibatch's token count, the same when an optimizer step is one micro-batch (the suite's
     default ``micro_batch_size = 0``) or the micro-batches hold equal token counts.
  2. TRL's defaults: ε = ε_high = 0.2 (``epsilon``; ``epsilon_high`` None = ε), no KL (``beta`` 0),
     ``scale_rewards="group"``, the std offset 1e-4 (the suite's GRPO: 1e-6).
  3. The suite's clipped surrogate clamps log r to ±20 before ``exp`` (TRL does not); TRL's
     ``delta`` (two-sided clip) is off by default and not reproduced.

Metrics: ``rlsuite.suite.ops.clipped_surrogate``'s (``stats/clip_frac_low`` / ``_high`` are TRL's
``clip_ratio/low_mean`` / ``high_mean``).

Fidelity: ``code`` — TRL 1.16.0 ``GRPOTrainer._compute_loss`` (``bnpo``); loss and gradient checked
on the same inputs (``tests/algorithms/test_bnpo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage
from rlsuite.suite.types import Batch

TRL_STD_EPS = 1e-4
"""TRL 1.16.0's offset of the group std in the advantage, ``(R − mean)/(std + 1e-4)``."""


def trl_group_advantage(batch: Batch, scale_by_std: bool) -> AdvOut:
    """TRL's group advantage broadcast to the policy tokens: ``(R − mean_G R)/(std_G R + 1e-4)``."""
    adv = group_normalised_advantage(batch.rewards, batch.group_id, scale_by_std, eps=TRL_STD_EPS)
    return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask))


@dataclass(frozen=True, kw_only=True)
class BNPOConfig(GRPOConfig):
    clip_eps_low: float = 0.2
    """ε of the clipped ratio (TRL ``epsilon``)."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio (TRL ``epsilon_high``; None there means ε)."""
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.0


@register
class BNPO(GRPO):
    name = "bnpo"
    summary = "TRL's bnpo: the GRPO clipped surrogate, token-mean over the batch, TRL's group advantage."
    citation = "TRL 1.16.0 GRPOTrainer, loss_type bnpo (no paper cited)"
    fidelity = "code"
    switches = ("clip_eps_low", "clip_eps_high", "scale_by_std")
    tune_knob = ("clip_eps_high", (0.2, 0.28))
    Config = BNPOConfig
    cfg: BNPOConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        return trl_group_advantage(batch, self.cfg.scale_by_std)
