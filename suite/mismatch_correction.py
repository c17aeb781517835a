"""Training–inference mismatch correction: importance weights from the rollout engine's μ to the
trainer's π_old, for every algorithm (``loss.is_correction``, default ``none``).

The rollout engine samples from μ (its per-token log-probs are recorded in ``Batch.behav_logp``);
the trainer's scoring pass computes π_old (``Batch.old_logp``). They differ by float rounding,
a bf16 or quantised engine, a stale behaviour policy or truncated sampling. With the per-token
log-ratio ``ℓ_t = log π_old(y_t) − log μ(y_t)`` (clamped to ±20), the ratio is taken at one of
three levels:

* ``token``: ``r_t = exp(ℓ_t)``;
* ``seq``: one ratio per sequence, the product ``r = exp(Σ_t ℓ_t)``, on every token of it;
* ``geo``: the geometric mean ``r = exp(mean_t ℓ_t)`` per sequence (length-independent).

and used in one of three ways (bounds ``[is_low, is_high]``; ``is_low = 0``: no lower bound):

* ``*_tis`` — truncated IS: the policy loss of each token is weighted by ``clamp(r, is_low, is_high)``;
* ``*_mis`` — masked IS: weighted by ``r`` inside the bounds and by 0 outside (the token or the
  whole sequence is dropped from the policy gradient; the loss normaliser is unchanged);
  ``geo_mis`` gates on the geometric mean and weights the surviving sequences' tokens by their own
  token ratios ``r_t`` (OpenRLHF's sequence-level mask);
* ``*_reject`` — rejection: no weight; tokens (or sequences) whose ratio falls outside the bounds
  leave the loss mask before the advantages are computed, so they also leave the normaliser.

The weight is detached and multiplies only the policy term (not the KL loss or the critic's); OTB
(``algorithms/otb.py``, ``is_scaling``) also scales its baseline's token energies by its square, as
verl's optimal token baseline does with its ``rollout_is_weights``.
A row with no response tokens has ``r = 1``.

Peers, as read in their installed source:

* TRL 1.16.0 ``GRPOConfig``: ``vllm_importance_sampling_correction`` (default ``True``, applied only
  when generating with vLLM), ``vllm_importance_sampling_mode`` (default ``"sequence_mask"``):
  ``token_truncate`` = ``token_tis``, ``token_mask`` = ``token_mis``, ``sequence_truncate`` =
  ``seq_tis``, ``sequence_mask`` = ``seq_mis`` (the sequence ratio is the product of the token
  ratios); ``vllm_importance_sampling_clip_max`` (default 3.0) = ``is_high``,
  ``vllm_importance_sampling_clip_min`` (default ``None``) = ``is_low``. TRL multiplies the
  per-token policy loss by the ratio, before adding the KL term.
* verl 0.9.1 ``algorithm.rollout_correction``: ``rollout_is`` (default ``null`` = off; ``token`` or
  ``sequence``) with ``rollout_is_threshold`` (default 2.0): a float is TIS (``token_tis`` /
  ``seq_tis`` with ``is_high``), a ``"lower_upper"`` string is IcePop masking (``token_mis`` /
  ``seq_mis``); ``rollout_rs`` (rejection, default ``null``) ``token_k1`` = ``token_reject``,
  ``seq_sum_k1`` = ``seq_reject``, ``seq_mean_k1`` = ``geo_reject``, applied by changing the
  response mask. verl's k1 statistic is ``log(μ/π_old)``, so its ``"lower_upper"`` bounds are on
  the inverse ratio: the suite's ``[is_low, is_high]`` is verl's ``"1/is_high_1/is_low"`` (checked
  on the same inputs in ``tests/unit/test_mismatch_correction.py``). Not mirrored: verl's k2/k3
  and ``seq_max`` rejection statistics, ``rollout_is_batch_normalize`` and bypass mode.
* OpenRLHF 0.11.2 (``openrlhf/models/loss.py``, ``PolicyLoss``; CLI
  ``--algo.advantage.is_correction_{level,mode,gating,threshold}``, defaults ``off``, ``mask``,
  ``ratio``, ``[0.5, 5.0]``): level ``token`` + mode ``mask`` ("ICEPOP") = ``token_mis``;
  ``token`` + ``clip`` ("TIS") = ``token_tis`` with both bounds; ``seq`` + ``mask``
  ("seq-mask-tis": the gate on the per-sequence geometric mean, survivors keep their per-token
  ratio) = ``geo_mis``. Its divergence gates (``binary_kl``, ``tv``) are not mirrored.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

MODES = ("none", "token_tis", "seq_tis", "geo_tis", "token_mis", "seq_mis", "geo_mis",
         "token_reject", "seq_reject", "geo_reject")
SAFETY = 20.0


def correction(old_logp: Tensor, behav_logp: Tensor, mask: Tensor, mode: str, low: float, high: float
               ) -> tuple[Optional[Tensor], Optional[Tensor], dict[str, float]]:
    """(weight [B, T] or None, new loss mask [B, T] or None, metrics) for one batch.

    old_logp, behav_logp, mask: [B, T] (mask 1 on policy tokens). ``weight`` is returned by the
    ``*_tis`` / ``*_mis`` modes (0 off the mask), the new loss mask by the ``*_reject`` modes.
    Metrics: ``mismatch/is_weight_mean`` (mean weight over policy tokens; 1 for reject),
    ``mismatch/is_truncated_frac`` (policy tokens whose ratio was clipped, ``*_tis``),
    ``mismatch/is_masked_frac`` (policy tokens dropped, ``*_mis`` and ``*_reject``)."""
    if mode not in MODES or mode == "none":
        raise ValueError(f"unknown correction mode {mode!r}; valid: {', '.join(MODES[1:])}")
    level, use = mode.split("_")
    m = mask.to(old_logp.dtype)
    lr = ((old_logp - behav_logp) * m).clamp(-SAFETY, SAFETY)
    if level == "seq":
        lr = (lr.sum(-1, keepdim=True)).clamp(-SAFETY, SAFETY)
    elif level == "geo":
        lr = lr.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    r = torch.exp(lr).expand_as(m)
    lo = low if low > 0 else 0.0
    outside = ((r < lo) | (r > high)) & (m > 0)
    n = m.sum().clamp(min=1)
    out: dict[str, float] = {}
    weight, keep = None, None
    if use == "tis":
        weight = r.clamp(min=lo, max=high) * m
        out["mismatch/is_truncated_frac"] = float(outside.sum() / n)
    elif use == "mis":
        inner = torch.exp(((old_logp - behav_logp) * m).clamp(-SAFETY, SAFETY)) if level == "geo" else r
        weight = torch.where(outside, torch.zeros_like(r), inner) * m
        out["mismatch/is_masked_frac"] = float(outside.sum() / n)
    else:
        keep = mask * (~outside).to(mask.dtype)
        out["mismatch/is_masked_frac"] = float(outside.sum() / n)
    out["mismatch/is_weight_mean"] = float((weight if weight is not None else m).sum() / n)
    return weight, keep, out
