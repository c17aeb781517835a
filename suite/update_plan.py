"""Step 6's plan: the learning-rate schedule, the micro-batches of a minibatch per data-parallel
rank, and the token positions its training forwards compute (charged as FLOPs)."""

from __future__ import annotations

import math

import torch

from rlsuite.suite.fast_forward import shared_positions
from rlsuite.suite.types import Batch, real_width


def update_fields(needs: frozenset[str], critic: str) -> frozenset[str]:
    """The fields the training forward computes besides log-probs, for an entry that ``needs`` these
    inputs with critic kind ``critic`` (the entry's, else ``model.critic``): entropy, the hidden
    states / attention statistics / top-K it asks for, and values from a head critic."""
    head = "values" in needs and critic != "separate"
    return frozenset({"entropy"}) | (needs & {"hidden", "attn_stat", "topk"}) | (
        frozenset({"values"}) if head else frozenset())


def old_logp_from_update(spec, algo, update_fields: frozenset[str], rows: int) -> bool:
    """Whether π_old (``rollout.old_logp=recompute``) of a batch of ``rows`` rows comes from the
    update's own forward instead of a scoring pass (:meth:`rlsuite.suite.scoring.Scorer.from_update`;
    the dry run's cost plan asks the same). That forward is then one pass of the model, at the weights
    before the update, over all its rows, so its log-probs are π_old itself, on-policy or stale (a
    stale sampler is μ, not π_old): the scoring pass computes the same tensor (the first update's
    ratio is exactly 1 either way). It holds with one epoch, one
    minibatch and one micro-batch (no ``bucket_by_length``), one process, no trainer-level
    correction (``loss.is_correction``) and no in-reward or adaptive KL (they read π_old before the
    update), an entry that neither filters nor reads π_old before its update
    (:attr:`~rlsuite.algorithms.base.Algorithm.old_logp_before_update`) and no trainer-level filter
    (``rollout.filter_zero_variance=drop``: the first draw's statistics of π_old are logged before
    it), no critic, no need of π_old's Σπ² (``old_sum_pi_sq``: read by the advantages), and a training
    forward that computes nothing but log-probs and entropy (``update_fields``)."""
    from rlsuite.algorithms.base import Algorithm

    t, d, cfg = spec.train, spec.dist, algo.cfg
    return (t.epochs == 1 and t.minibatches == 1 and (t.micro_batch_size == 0 or t.micro_batch_size >= rows)
            and not t.bucket_by_length and d.world_size == 1 and d.shard == "none"
            and spec.loss.is_correction == "none" and not algo.old_logp_before_update
            and type(algo).filter is Algorithm.filter and spec.rollout.filter_zero_variance != "drop"
            and "values" not in algo.needs and "old_sum_pi_sq" not in algo.needs
            and not ("ref_logp" in algo.needs and (cfg.kl_where == "reward" or cfg.kl_target is not None))
            and update_fields == frozenset({"entropy"}))


def lr_factor(optim, updates: float, progress: float) -> float:
    """The learning-rate multiplier: linear warm-up over ``optim.warmup_updates``, then ``optim.schedule``."""
    o, u = optim, updates
    if o.warmup_updates and u < o.warmup_updates:
        return (u + 1) / o.warmup_updates
    p = progress
    return {"constant": 1.0, "linear": 1.0 - p, "cosine": 0.5 * (1 + math.cos(math.pi * p))}[o.schedule]


def micro_batches(mb: Batch, world_size: int, train) -> list[list[torch.Tensor]]:
    """Per rank, the row indices of its micro-batches of minibatch ``mb``: the rank's
    contiguous shard in ``train.micro_batch_size`` chunks, its rows ordered longest first
    under ``train.bucket_by_length`` (stable, so equal lengths keep their order)."""
    n, size, t = mb.batch_size, world_size, train
    dev = mb.tokens.device
    plan = []
    for r in range(size):
        lo_r, hi_r = n * r // size, n * (r + 1) // size
        rows = torch.arange(lo_r, hi_r, device=dev)
        if t.bucket_by_length:  # by the last real column: what trimming a micro-batch keeps
            am = mb.attn_mask[lo_r:hi_r]
            last = (am * torch.arange(1, am.shape[1] + 1, device=dev)).amax(-1)
            rows = rows[torch.argsort(last, descending=True, stable=True)]
        micro = t.micro_batch_size or max(1, hi_r - lo_r)
        plan.append(list(torch.split(rows, micro)) if len(rows) else [])  # an empty shard: no micro-batch
    return plan


def computed_positions(model, mb: Batch, plan: list[list[torch.Tensor]], prompt_width: int,
                       want: frozenset[str], bucket_by_length: bool) -> int:
    """Real token positions the training forwards of minibatch ``mb`` compute, over all
    ranks' micro-batches ``plan`` (the same number on every rank): all of them, less the
    prompt positions that ``train.share_prefix`` computes once per group within a micro-batch
    (as the forward of each, trimmed under ``train.bucket_by_length``, actually does)."""
    total = int(mb.attn_mask.sum())
    if not prompt_width:
        return total
    for rows in (r for rank in plan for r in rank):
        tokens, attn = mb.tokens[rows], mb.attn_mask[rows]
        if bucket_by_length:
            width = real_width(attn)
            tokens, attn = tokens[:, :width], attn[:, :width]
        total -= shared_positions(model, want, tokens, attn, prompt_width)
    return total

