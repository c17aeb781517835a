"""Which prompt groups a step trains on, for every entry: the zero-variance-group filter
(``rollout.filter_zero_variance``) and the no-positive-resampling curriculum
(``rollout.retire_pass_rate``).

* **Zero-variance groups.** A prompt group of ≥ 2 samples whose task scores (``Batch.scores``,
  the grades before ``algo.rewards`` and any KL) are all equal carries no group-relative signal.
  ``mask`` zeroes its rows' loss mask before the advantages, so they leave the loss and its
  normaliser (SkyRL ``skyrl/train/trainer.py`` with ``trainer.algorithm.zero_variance_filter``:
  ``zero_variance_filter`` in ``skyrl/train/utils/trainer_utils.py`` at commit a956457, a group of
  > 1 live trajectories whose rewards lie within ``tol`` gets an all-zero loss mask);
  ``drop`` discards its rows after the advantages, and the trainer's refill loop draws more
  batches (verl 0.9.1 ``algorithm.filter_groups``: groups whose metric has ``std == 0`` over > 1
  trajectories are evicted and refilled, ``verl/trainer/ppo/v1/replay_buffer.py``). A singleton
  group is kept (both peers); as SkyRL, only rows with a non-empty loss mask are compared (a group
  with one such row is kept). [ASSUMPTION] the statistic is the task score, exactly equal (verl's
  ``metric=acc``; SkyRL compares rewards within ``tol = 1e-6``, the same for 0/1 scores). DAPO's own
  dynamic sampling (``algorithms/dapo.py``) is the ``drop`` rule inside the entry (it also drops
  singleton groups).
* **No-positive resampling** (ScaleRL, Khatri et al. 2025, arXiv 2510.13786, §3: prompts whose pass
  rate reached ≥ 0.9 are permanently left out of later epochs). A prompt is retired when the mean
  task score of its samples in one step (its first-round rows of that step's draws) is at least
  ``retire_pass_rate``; the trainer's seeded passes over the train split skip retired prompts
  (they are still drawn by the permutation, so the cursor and every other prompt's position stay
  as without the curriculum). [ASSUMPTION] the pass rate of a non-binary task is its mean score.
  The retired set is kept in checkpoints; a run whose every train prompt is retired stops with an
  error naming the setting.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch import Tensor

from rlsuite.suite.errors import BadInput
from rlsuite.suite.ops import group_all_equal
from rlsuite.suite.types import Batch


def zero_variance_rows(scores: Tensor, group_ids: Tensor, live: Optional[Tensor] = None) -> Tensor:
    """Every row of a group with ≥ 2 live rows whose scores are all equal (SkyRL's rule: ``live``,
    the rows with a non-empty loss mask, are the ones compared; None = all).
    Shapes: scores, group_ids, live [B] → [B] bool."""
    live = torch.ones_like(group_ids, dtype=torch.bool) if live is None else live.to(torch.bool)
    g, s = group_ids[live], scores[live]
    if g.numel() == 0:
        return torch.zeros_like(live)
    _, inv, counts = torch.unique(g, return_inverse=True, return_counts=True)
    flat = g[group_all_equal(s, g) & (counts[inv] > 1)]
    return torch.isin(group_ids, flat)


class Curriculum:
    """The run's group filter and retired prompts (``rollout.filter_zero_variance``,
    ``rollout.retire_pass_rate``); owned by the training state, its state checkpointed."""

    def __init__(self, rollout, n_train: int) -> None:
        self.mode: str = rollout.filter_zero_variance
        self.threshold: Optional[float] = rollout.retire_pass_rate
        self.n_train = n_train
        self.retired: set[int] = set()
        """Train indices not drawn again (``retire_pass_rate``)."""

    def check(self, algo) -> None:
        """Refuse the curriculum for an entry that draws its own prompts (exit 2)."""
        from rlsuite.algorithms.base import Algorithm

        if self.threshold is not None and type(algo).sample_prompts is not Algorithm.sample_prompts:
            raise BadInput(f"rollout.retire_pass_rate={self.threshold}: algo '{algo.cfg.name}' draws its own "
                           f"prompts (sample_prompts), which the curriculum cannot skip; valid: "
                           f"rollout.retire_pass_rate=null for this entry")

    # -- the zero-variance filter --------------------------------------------------------
    def mask(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        """``mask``: the batch with its zero-variance groups' loss mask zeroed (before the
        advantages), and ``filter/zero_variance_frac`` (share of rows in such groups)."""
        if self.mode == "off":
            return batch, {}
        flat = zero_variance_rows(batch.scores, batch.group_id, batch.loss_mask.sum(-1) > 0).to(batch.loss_mask.device)
        metrics = {"filter/zero_variance_frac": float(flat.float().mean())}
        if self.mode != "mask":
            return batch, metrics
        return dataclasses.replace(batch, loss_mask=batch.loss_mask * (~flat).to(batch.loss_mask.dtype)[:, None]), \
            metrics

    def keep(self, batch: Batch, keep: Optional[Tensor]) -> Optional[Tensor]:
        """``drop``: the entry's keep-mask (None: every row) and the rows outside zero-variance
        groups; otherwise the entry's own. Shapes: [B] bool or None → the same."""
        if self.mode != "drop":
            return keep
        mine = ~zero_variance_rows(batch.scores.cpu(), batch.group_id.cpu(), batch.loss_mask.sum(-1).cpu() > 0)
        return mine if keep is None else keep.to(torch.bool).cpu() & mine

    # -- the curriculum --------------------------------------------------------------------
    def record(self, batch: Batch, n_fresh: int) -> None:
        """Retire the prompts of the first ``n_fresh`` rows (this draw's, first round only) whose
        mean score reached the threshold."""
        if self.threshold is None:
            return
        rows = torch.arange(n_fresh)
        if batch.stage is not None:
            rows = rows[batch.stage[:n_fresh].cpu() == 0]
        idx, scores = batch.example_idx[rows].cpu(), batch.scores[rows].cpu().double()
        uniq, inv = torch.unique(idx, return_inverse=True)
        total = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inv, scores)
        count = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inv, torch.ones_like(scores))
        self.retired.update(uniq[total / count >= self.threshold].tolist())

    def draws(self, index: int) -> bool:
        """Whether the train prompt ``index`` may be drawn (raises once every prompt is retired)."""
        if len(self.retired) >= self.n_train:
            raise RuntimeError(f"every train prompt reached rollout.retire_pass_rate={self.threshold} and is "
                               f"retired: nothing left to draw; raise the threshold or set it to null")
        return index not in self.retired

    def metrics(self) -> dict[str, float]:
        """``curriculum/retired_frac``: the share of the train split retired (with the curriculum)."""
        return {} if self.threshold is None else {"curriculum/retired_frac": len(self.retired) / max(1, self.n_train)}

    def state_dict(self) -> dict[str, Any]:
        return {"retired": sorted(self.retired)} if self.threshold is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.retired = set(int(i) for i in state.get("retired", ()))


__all__ = ["Curriculum", "zero_variance_rows"]
