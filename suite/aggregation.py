"""Loss aggregation modes, owned by the trainer (never by an algorithm).

The trainer turns a per-token loss ``ℓ [B, T]`` into a scalar with weights ``w [B, T]`` that
are computed **once per optimizer step on the whole minibatch, before the micro-batch loop**:
``loss = Σ_{i,t} w_{i,t} ℓ_{i,t}``. Each micro-batch contributes ``Σ w ℓ`` over its own rows,
so gradient accumulation gives exactly the full-batch gradient in every mode.

With ``m`` the loss mask, ``N`` the number of sequences in the minibatch and
``L = rollout.max_new_tokens``:

=========================  ========================================  ===============================
mode                       value                                     used by
=========================  ========================================  ===============================
token-mean                 Σ m ℓ / Σ m                               DAPO, verl default, PPO
token-sum                  Σ m ℓ                                     verl ``token-sum``
seq-mean-token-mean        (1/N) Σ_i Σ_t m ℓ / Σ_t m                 GRPO paper, GSPO
seq-mean-token-sum         (1/N) Σ_i Σ_t m ℓ                         AGRO
seq-mean-token-sum-norm    Σ_i Σ_t m ℓ / (N · L)                     Dr. GRPO code; DPPO, DRPO
prompt-mean-token-mean     (1/P) Σ_g Σ_{i∈g,t} m ℓ / Σ_{i∈g,t} m     ScaleRL; SkyRL ``prompt_mean``
=========================  ========================================  ===============================

``seq-mean-token-sum-norm`` follows the Dr. GRPO code (sail-sg/understand-r1-zero): each
sequence's token sum divided by the constant ``L``, averaged over sequences. ``N`` counts every
row of the minibatch, fully masked ones included. verl 0.9.1's mode of the same name
(``agg_loss`` in ``verl/trainer/ppo/core_algos.py``) divides the summed token sums by
``N' × T``, with ``N'`` the number of sequences that have at least one unmasked token and ``T``
the padded width of the loss mask it is given (or ``loss_scale_factor`` when that is set); it
equals ours when no row is fully masked and ``T = L``. TRL 1.16.0's ``dr_grpo`` divides by
``B × max_completion_length`` (``B`` the rows of the micro-batch, all counted; the result is
then divided by the accumulation steps), which equals ours for ``L = max_completion_length``.
The verl default ``token-mean`` is that of verl 0.9.1 (``actor.loss_agg_mode``). Details and
the other modes' peer equivalents: ``algorithms/README.md`` ("Loss aggregation").

``prompt-mean-token-mean`` (ScaleRL's prompt-level average, Khatri et al. 2025, arXiv
2510.13786 §3.2) gives each prompt group ``g`` of the minibatch the same weight: the tokens of all
of its rows present in the minibatch are pooled into one token mean, and the ``P`` groups are
averaged, so ``w_{i,t} = m_{i,t} / (P · Σ_{j∈g(i)} Σ_t m_{j,t})``. It needs each row's group id
(``group_id``, ``Batch.group_id``). It is SkyRL's ``prompt_mean``
(``apply_loss_reduction_to_advantages_minibatch`` in ``skyrl/backends/skyrl_train/utils/ppo_utils.py``,
commit a956457), which counts every prompt of the mini-batch in ``P`` and clamps a prompt's token
count at 1; SkyRL's mini-batches hold whole prompts, while the suite's minibatches
(``train.minibatches`` > 1) are a random split of rows, so there a group may be split and each
part is one prompt of its minibatch. With one minibatch (the default) every group is
whole.

The empty-row rule (``loss.empty_rows``): ``count`` (the default) counts a row with no
response tokens in ``N`` under the ``seq-mean-*`` modes; ``skip`` is verl 0.9.1's rule, ``N`` the
rows with at least one unmasked token (then ``seq-mean-token-sum-norm`` still divides by the
constant ``L``, where verl divides by the mask's padded width unless ``loss_scale_factor`` is set).
Under ``prompt-mean-token-mean`` the rule applies to groups: ``count`` counts every group of the
minibatch in ``P`` (SkyRL's rule), ``skip`` only the groups with at least one unmasked token.
The two agree whenever no row of the minibatch is fully masked.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

AggMode = Literal["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
                  "prompt-mean-token-mean"]
AGG_MODES: tuple[str, ...] = get_args(AggMode)


def aggregation_weights(mask: Tensor, mode: AggMode, max_new_tokens: int, empty_rows: str = "count",
                        dtype: torch.dtype | None = None, group_id: Tensor | None = None) -> Tensor:
    """Weights ``w [B, T]`` such that ``Σ w ℓ`` is the aggregated loss of the minibatch.

    Shapes: mask [B, T], group_id [B] (any integer ids) → [B, T]. Call on the *whole* minibatch,
    then slice rows for micro-batches. ``empty_rows``: ``count`` (rows without response tokens
    count in N; groups without any in P) or ``skip`` (verl's rule: they do not). ``dtype``: of the
    weights (the loss's; default: the mask's when it is floating, else float32), so a float64 loss
    is aggregated in float64. ``group_id``: each row's prompt group, read (and required) only by
    ``prompt-mean-token-mean``.
    """
    mask = mask.to(dtype or (mask.dtype if mask.is_floating_point() else torch.float32))
    if empty_rows not in ("count", "skip"):
        raise ValueError(f"unknown empty_rows rule '{empty_rows}'; valid: count, skip")
    n_seq = mask.shape[0] if empty_rows == "count" else max(1, int((mask.sum(-1) > 0).sum()))
    if mode == "token-mean":
        return mask / mask.sum().clamp(min=1)
    if mode == "token-sum":
        return mask
    if mode == "seq-mean-token-mean":
        return mask / (n_seq * mask.sum(-1, keepdim=True).clamp(min=1))
    if mode == "seq-mean-token-sum":
        return mask / n_seq
    if mode == "seq-mean-token-sum-norm":
        return mask / (n_seq * float(max_new_tokens))
    if mode == "prompt-mean-token-mean":
        if group_id is None or group_id.shape != mask.shape[:1]:
            raise ValueError(f"aggregation 'prompt-mean-token-mean' needs each row's group id (group_id [B] for "
                             f"B = {mask.shape[0]}), got {None if group_id is None else tuple(group_id.shape)}")
        _, inv = torch.unique(group_id.to(mask.device), return_inverse=True)  # [B] → 0..P−1
        tok = torch.zeros(int(inv.max()) + 1 if inv.numel() else 0, dtype=mask.dtype, device=mask.device)
        tok = tok.index_add(0, inv, mask.sum(-1))  # [P] response tokens of each group
        n_prompt = tok.shape[0] if empty_rows == "count" else int((tok > 0).sum())
        return mask / (max(1, n_prompt) * tok.clamp(min=1)[inv][:, None])
    raise ValueError(f"unknown aggregation mode '{mode}'; valid: {', '.join(AGG_MODES)}")


def aggregate(loss: Tensor, mask: Tensor, mode: AggMode, max_new_tokens: int, empty_rows: str = "count",
              group_id: Tensor | None = None) -> Tensor:
    """Aggregate a per-token loss ``[B, T]`` of one full batch to a scalar (``group_id [B]``: for
    ``prompt-mean-token-mean``)."""
    return (aggregation_weights(mask, mode, max_new_tokens, empty_rows, dtype=loss.dtype, group_id=group_id)
            * loss).sum()
