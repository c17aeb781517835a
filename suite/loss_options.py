"""The loss options every entry shares (``loss.*``) that act on the policy term of each training
forward: off-policy sequence masking, the high-entropy minority, the entropy bonus with its
adaptive coefficient. (The IS-corrected KL, ``loss.kl_is_weight``, is in
:func:`rlsuite.suite.kl_control.loss_term`; the mismatch correction, ``loss.is_correction``, in
:mod:`rlsuite.suite.mismatch_correction`.)

* **OPSM** (``opsm_delta``; DeepSeek-V3.2, arXiv 2512.02556, eq. 9): the policy loss of a token
  with ``A < 0`` is multiplied by 0 where its sequence's mean ``log μ − log π_θ`` exceeds δ
  (:func:`rlsuite.suite.ops.off_policy_sequence_mask`). As TRL 1.16.0 (``GRPOTrainer._compute_loss``:
  ``per_token_loss * off_policy_mask``, μ = the sampler's log-probs when it has them, else π_old)
  and slime (``compute_opsm_mask`` in ``slime/utils/ppo_utils.py`` at commit 624b824, with
  ``--use-rollout-logprobs``), μ is the engine's log-probs, π_θ this forward's (detached), the
  mask multiplies the policy term only and the normaliser is unchanged.
* **High-entropy minority** (``top_entropy_quantile`` ρ < 1; Wang et al. 2025, arXiv 2506.01939):
  the policy loss keeps the tokens whose entropy (this forward's, at the rollout temperature) is
  at least the ``1 − ρ`` quantile over the forward's policy tokens
  (:func:`rlsuite.suite.ops.top_entropy_mask`); TRL 1.16.0 takes it over each micro-batch's
  tokens gathered across processes (``get_high_entropy_mask``) and multiplies the policy term, the
  normaliser unchanged. Here the forward is one process's micro-batch (the whole minibatch at
  ``train.micro_batch_size=0``); a data-parallel run is refused.
* **Entropy bonus** (``entropy_coef`` c): ``− c·Σ w·H·keep`` joins the loss, with ``w`` the entry's
  aggregation weights (verl 0.9.1 ``workers/utils/losses.py``: ``policy_loss −= entropy_coeff ·
  agg_loss(entropy, response_mask, loss_agg_mode)``) and ``keep`` the high-entropy tokens when ρ < 1
  (TRL restricts its bonus to them too). [ASSUMPTION] the aggregation is verl's: TRL 1.16.0 always
  takes the mean over the kept tokens, whatever its ``loss_type``. The entropy is then computed
  with its gradient (``needs`` holds ``entropy``; otherwise the trainer detaches it).
* **Adaptive coefficient** (``entropy_target``; Skywork-OR1, arXiv 2505.22312, as TRL 1.16.0's
  ``use_adaptive_entropy``): the coefficient an update applies is the one left by the previous
  update, and only while the previous update's entropy was ≤ the target (no bonus before the first
  measurement); after each optimizer update the token-mean entropy over the tokens the bonus acts
  on (all micro-batches and processes of the update) moves it by ``± entropy_coef_delta`` within
  ``[0, entropy_coef_max]`` (TRL's ``entropy_coef_min`` is 0 here). Kept in checkpoints
  (:class:`EntropyControl`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor

from rlsuite.suite.ops import off_policy_sequence_mask, top_entropy_mask


def entropy_bonus_on(lo) -> bool:
    """Whether the loss has an entropy term (a fixed coefficient > 0, or an adaptive one)."""
    return lo.entropy_coef > 0 or lo.entropy_target is not None


def needs(lo) -> frozenset[str]:
    """What the options need from the trainer (:data:`rlsuite.suite.hooks.NEEDS`): ``entropy``
    with its gradient for the entropy bonus."""
    return frozenset({"entropy"}) if entropy_bonus_on(lo) else frozenset()


def policy_masks(lo, logp: Tensor, entropy: Optional[Tensor], adv: Optional[Tensor], behav_logp: Tensor,
                 mask: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], dict[str, Any]]:
    """(the multiplier of the per-token policy loss or None, the high-entropy tokens or None,
    metrics) of one training forward. Shapes: logp, entropy, adv, behav_logp, mask [B, T] →
    [B, T] float, [B, T] bool. Metrics: ``loss/opsm_masked_frac`` and
    ``loss/top_entropy_kept_frac``, shares of the forward's policy tokens."""
    keep: Optional[Tensor] = None
    high: Optional[Tensor] = None
    out: dict[str, Any] = {}
    if lo.opsm_delta is None and lo.top_entropy_quantile >= 1:
        return keep, high, out  # neither option is on: nothing computed on the update's hot path
    n = mask.sum().clamp(min=1)
    if lo.opsm_delta is not None:
        keep = off_policy_sequence_mask(adv, logp, behav_logp, mask, lo.opsm_delta)
        out["loss/opsm_masked_frac"] = float(((1 - keep) * mask).sum() / n)
    if lo.top_entropy_quantile < 1:
        high = top_entropy_mask(entropy, mask, lo.top_entropy_quantile)
        out["loss/top_entropy_kept_frac"] = float(high.sum() / n)
        keep = high.to(logp.dtype) if keep is None else keep * high.to(logp.dtype)
    return keep, high, out


class EntropyControl:
    """The entropy bonus's coefficient: fixed (``loss.entropy_coef``) or adaptive
    (``loss.entropy_target``); its state is checkpointed with the training state."""

    def __init__(self, lo) -> None:
        self.lo = lo
        self.coef = float(lo.entropy_coef)
        """The coefficient (the adaptive one moves after each update)."""
        self.last = math.inf
        """The last update's measured token-mean entropy (the adaptive gate; none measured yet)."""
        self.window = [0.0, 0.0]  # Σ H·mask and Σ mask over this update's live micro-batches

    @property
    def applied(self) -> float:
        """The coefficient this update applies (the adaptive gate closed: 0)."""
        target = self.lo.entropy_target
        return self.coef if target is None or self.last <= target else 0.0

    def bonus(self, w: Tensor, entropy: Tensor, mask: Tensor, live: bool = True) -> Optional[Tensor]:
        """``c·Σ w·H·mask`` (subtracted from the loss), or None without an entropy term; ``mask``
        is the tokens the bonus acts on. A live micro-batch adds to the adaptive measurement.
        Shapes: w, entropy, mask [B, T]."""
        if not entropy_bonus_on(self.lo):
            return None
        if live and self.lo.entropy_target is not None:
            m = mask.to(torch.float64)
            self.window[0] += float((entropy.detach().to(torch.float64) * m).sum())
            self.window[1] += float(m.sum())
        return self.applied * (w * entropy * mask).sum()

    def step(self, world) -> None:
        """After an optimizer update: the adaptive coefficient moves by the update's entropy (every
        process's tokens, ``world.all_gather_object``); the measurement window restarts."""
        lo, window = self.lo, self.window
        self.window = [0.0, 0.0]
        if lo.entropy_target is None:
            return
        parts = world.all_gather_object(window)
        total, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
        measured = total / max(count, 1.0)
        if measured <= lo.entropy_target:
            self.coef = min(self.coef + lo.entropy_coef_delta, lo.entropy_coef_max)
        else:
            self.coef = max(self.coef - lo.entropy_coef_delta, 0.0)
        self.last = measured

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef, "last": self.last} if self.lo.entropy_target is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = float(state.get("coef", self.coef))
        self.last = float(state.get("last", self.last))


__all__ = ["EntropyControl", "entropy_bonus_on", "needs", "policy_masks"]
