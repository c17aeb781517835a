"""How a run's models are laid out across its ranks: one parallel-mode object the loop calls
without asking which mode it runs in.

* :class:`Replicated` (``dist.shard=none``, the null object): every rank holds the whole model —
  one process, or data parallelism over ``dist.world_size`` ranks (:mod:`rlsuite.suite.distributed`:
  each rank's share of a minibatch's gradient is summed with one all-reduce before the step);
* :class:`rlsuite.suite.sharding.Sharding` (``dist.shard=fsdp``): FSDP2 shards the models and the
  optimizer state across the ranks (gradients reduce-scattered in the backward).

Both answer the calls of :class:`ParallelMode`: lay out a :class:`~rlsuite.suite.train_state.TrainState`'s
models (before its optimizer exists), this rank's micro-batches, the non-finite-loss agreement,
the gradient reduction and clipping, checkpoint writing and loading, the engine of an eval,
and the gathered weights of ``final/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import torch
from torch import nn

from rlsuite.suite.errors import BadInput, Diverged
from rlsuite.suite.lora import BaseView, load_trained


class ParallelMode(Protocol):
    """What the loop asks of a parallel mode (:class:`Replicated`, :class:`rlsuite.suite.sharding.Sharding`)."""

    base_eval_memo: bool
    """Evals of the starting weights may come from the memo (:func:`rlsuite.suite.evaluate.memo_base_eval`)."""

    def prepare(self, st) -> None:
        """Lay out ``st``'s models across the ranks (before its optimizer exists)."""

    def rank_micro_batches(self, plan: list[list[torch.Tensor]]) -> list[tuple[torch.Tensor, bool]]:
        """This rank's micro-batches of a minibatch as (rows, live) (``plan``: every rank's rows)."""

    def nonfinite(self, total: torch.Tensor, step: int) -> Optional[str]:
        """None where the micro-batch loss ``total`` may run backward; else why not (raises
        ``Diverged`` where the run stops at once)."""

    def reduce_grads(self, opt: torch.optim.Optimizer, nonfinite: Optional[str], step: int) -> None:
        """Combine the ranks' gradient shares before clipping (raises ``Diverged`` when a rank's
        loss was not finite)."""

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` of ``params`` (the global norm)."""

    def save(self, st, folder, plain: Callable[[], dict[str, Any]]) -> None:
        """Write ``checkpoint/`` (``plain()``: the state dict, :func:`rlsuite.suite.checkpoint.state_of`)."""

    def load(self, st, ck: dict[str, Any], ckpt: Path) -> None:
        """Load the trained weights, optimizer state, refreshed reference and lag history of the
        checkpoint ``ck`` (read from folder ``ckpt``) into ``st``."""

    def eval_engine(self, st, rollout, tok):
        """An engine with the current policy for rank 0's eval where the mode must build it on
        every rank (a collective), else None (the trainer's own engine or a fresh one serves)."""

    def full_state(self, model: nn.Module, keep: bool) -> Optional[dict[str, torch.Tensor]]:
        """``model``'s full weights on the CPU where ``keep``, else None."""

    def final_writer(self, model: nn.Module) -> Callable[[Path], None]:
        """What writes the policy into ``final/`` (every rank calls it; the folder's writer runs on rank 0)."""


class Replicated:
    """Every rank holds the whole model (one process, or data parallelism); in one process every
    collective is a no-op."""

    base_eval_memo = True

    def __init__(self, world) -> None:
        self.world = world

    def prepare(self, st) -> None:
        pass  # the models stay whole where they are

    def rank_micro_batches(self, plan: list[list[torch.Tensor]]) -> list[tuple[torch.Tensor, bool]]:
        return [(rows, True) for rows in plan[self.world.rank]]

    def nonfinite(self, total: torch.Tensor, step: int) -> Optional[str]:
        if torch.isfinite(total):
            return None
        why = f"non-finite loss at step {step} (loss/total={float(total.detach())})"
        if not self.world.active:  # data-parallel: every rank learns of it at the all-reduce
            raise Diverged(why)
        return why

    def reduce_grads(self, opt: torch.optim.Optimizer, nonfinite: Optional[str], step: int) -> None:
        if not self.world.active:
            return
        params = [p for g in opt.param_groups for p in g["params"]]  # the ranks' shares, global weights
        if self.world.all_reduce_grads(params, flag=float(nonfinite is not None)):
            raise Diverged(nonfinite or f"non-finite loss on another data-parallel rank at step {step}")

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def save(self, st, folder, plain: Callable[[], dict[str, Any]]) -> None:
        from rlsuite.suite.checkpoint import pack

        if not self.world.main:
            return  # rank 0 alone writes the run folder
        state = pack(plain())
        folder.sync("metrics.jsonl")  # the per-step rows up to this checkpoint are durable before it exists
        folder.replace_dir("checkpoint", lambda d: torch.save(state, d / "state.pt"))

    def load(self, st, ck: dict[str, Any], ckpt: Path) -> None:
        if "sharded" in ck:
            raise BadInput(f"{ckpt}: written by a sharded run (dist.shard=fsdp); resume it with dist.shard=fsdp")
        load_trained(st.model, ck["model"])  # a LoRA policy: its adapters (suite/lora.py)
        st.opt.load_state_dict(ck["opt"])
        if st.critic is not None:
            st.critic.load_state_dict(ck["critic"])
        if st.ref is not None and "ref" in ck:  # refreshed (or a checkpoint written before refs were rebuilt)
            if isinstance(st.ref, BaseView):  # a LoRA run's refreshed π_ref is a copy of its own
                st.refresh_reference()
            st.ref.load_state_dict(ck["ref"])
            st.ref_refreshed = True
        st.behaviour.history = ck.get("history", st.behaviour.history)

    def eval_engine(self, st, rollout, tok):
        return None

    def full_state(self, model: nn.Module, keep: bool) -> Optional[dict[str, torch.Tensor]]:
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()} if keep else None

    def final_writer(self, model: nn.Module) -> Callable[[Path], None]:
        return model.save_pretrained  # safetensors in the weights' own dtype, tied weights once


def parallel_mode(dist, device: torch.device, world) -> ParallelMode:
    """The run's parallel mode for its ``dist`` section."""
    if dist.shard == "none":
        return Replicated(world)
    from rlsuite.suite.sharding import Sharding

    return Sharding(dist, device, world)


__all__ = ["ParallelMode", "Replicated", "parallel_mode"]
