"""Sharded training within a run (``dist.shard=fsdp``): FSDP2 ``fully_shard`` over the
``dist.world_size`` ranks of :mod:`rlsuite.suite.distributed`; :class:`Sharding` is the trainer's
parallel mode then (:class:`rlsuite.suite.parallel.ParallelMode`), and works on the run's
:class:`~rlsuite.suite.train_state.TrainState`.

What changes against data parallelism (every rank holding the full model):

* the policy, the critic (its head; a separate critic's trunk per decoder layer too), the
  frozen reference and the initial policy are sharded: ``fully_shard`` per decoder layer plus
  the root, so each rank holds 1/W of every parameter, gradient and AdamW moment. A forward
  all-gathers one layer at a time; the backward reduce-scatters the gradients as **sums**
  (divide factor 1, sum-only collectives), so the data-parallel contract stays: each rank runs
  forward/backward on its contiguous shard of every minibatch with the global normaliser's
  weights, and the summed gradient is the one-process gradient up to float summation order;
* every forward and backward is a collective, so every rank runs the same number of
  micro-batches per minibatch (a rank with fewer runs padding micro-batches of weight 0 that
  add nothing to the gradient, the metrics or the FLOPs), and a non-finite loss is agreed on
  before any backward (every rank raises ``Diverged`` at the same micro-batch);
* gradient clipping takes the global norm of the sharded gradients (squared local norms,
  all-reduced), then AdamW steps on the local shards;
* the rollout engine keeps its own full copy of the weights (it samples alone); a sync gathers
  the policy one decoder layer at a time (``DTensor.full_tensor``) into it, so a rank never holds
  a second full copy besides the engine's. The staleness history (``rollout.sync=lag``) keeps
  sharded snapshots; the mismatch knob's noise is drawn in the same key order as unsharded;
* checkpoints: ``checkpoint/dcp/`` (torch.distributed.checkpoint: the sharded policy, critic,
  refreshed reference, history and optimizer state, each rank writing its shards; loadable on
  any world size) and ``checkpoint/state.pt`` (rank 0: counters, algorithm state, the engine's
  weights where they lag); ``final/`` is a normal ``save_pretrained`` folder (gathered to rank 0);
* what stays as in data parallelism: the full batch on every rank, scoring passes on the full
  batch (each a collective forward of the sharded model), rank 0 alone writing the run folder
  and evaluating (a stale engine's eval copy is gathered by every rank first), agreed stop
  signals and wall-clock charges, FLOPs and budget accounting.

Mixed precision: ``dist.shard_precision=bf16`` (FSDP2 ``MixedPrecisionPolicy``: bf16 params
in the forward/backward, fp32 gradient reduction, fp32 master weights and optimizer state);
``dist.activation_checkpointing`` recomputes each decoder layer in the backward;
``dist.shard_offload`` keeps sharded state on the CPU (``CPUOffloadPolicy``; CUDA only).

:func:`state_bytes` measures what a rank holds (local shard bytes of parameters and optimizer
state) in sharded and unsharded runs alike.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn

from rlsuite.suite.behaviour import BehaviourSync
from rlsuite.suite.errors import BadInput, Diverged

_LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")


def _dtensor():
    from torch.distributed.tensor import DTensor

    return DTensor


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (the tensor itself otherwise)."""
    return t.to_local() if isinstance(t, _dtensor()) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """The full tensor of a DTensor (a collective: every rank calls it in the same order)."""
    return t.full_tensor() if isinstance(t, _dtensor()) else t


def ensure_group(device: torch.device) -> bool:
    """A one-rank process group when none exists (a sharded run with ``world_size`` 1); True if made."""
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return True


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of an HF causal LM (or of its decoder), each one FSDP unit."""
    dec = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = getattr(dec, "layers", None)
    if layers is None:
        raise BadInput(f"dist.shard=fsdp needs a decoder with a `layers` list; {type(model).__name__} has none")
    return list(layers)


def _checkpointed(layer: nn.Module) -> None:
    """Recompute ``layer``'s activations in the backward (its forward, inside FSDP's hooks)."""
    from torch.utils.checkpoint import checkpoint

    inner = layer.forward

    def forward(*args, **kwargs):
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    layer.forward = forward


class Sharding:
    """The run's FSDP2 set-up, a parallel mode (:class:`rlsuite.suite.parallel.ParallelMode`):
    :meth:`prepare` shards a :class:`~rlsuite.suite.train_state.TrainState`'s models in place."""

    base_eval_memo = False  # the weights hash of a sharded model would be this rank's shards

    def __init__(self, dist, device: torch.device, world) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

        if dist.shard_offload and device.type != "cuda":
            raise BadInput("dist.shard_offload needs a CUDA device (it keeps sharded state in CPU memory)")
        if dist.shard_precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise BadInput("dist.shard_precision=bf16 needs a GPU with bfloat16 support; use fp32")
        self.world = world
        self.own_group = ensure_group(device)
        self.mesh = init_device_mesh(device.type, (world.size,))
        bf16 = dist.shard_precision == "bf16"
        self.mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                                       reduce_dtype=torch.float32 if bf16 else None)
        self.offload = CPUOffloadPolicy() if dist.shard_offload else OffloadPolicy()
        self.recompute = dist.activation_checkpointing
        self.aliases: dict[str, str] = {}  # tied parameter names → the first name of that parameter

    # -- sharding ---------------------------------------------------------------------
    def shard(self, module: nn.Module, layers: list[nn.Module], trainable: bool) -> nn.Module:
        from torch.distributed.fsdp import FSDPModule, fully_shard

        # reshard after every forward, the root too (FSDP2 keeps a root unsharded after its forward by
        # default: a frozen reference, never run backward, would hold its full embedding for good)
        kw = dict(mesh=self.mesh, mp_policy=self.mp, offload_policy=self.offload, reshard_after_forward=True)
        for layer in layers:
            if trainable and self.recompute:
                _checkpointed(layer)
            fully_shard(layer, **kw)
        fully_shard(module, **kw)
        for m in module.modules():  # gradients summed over ranks (the global normaliser's weights)
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(1.0)
                m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        return module

    def prepare(self, st) -> None:
        """Shard ``st``'s policy, reference, initial policy and critic (before its optimizer
        exists); its behaviour sync becomes a :class:`ShardedBehaviour`."""
        first: dict[int, str] = {}
        for name, p in st.model.named_parameters(remove_duplicate=False):
            if id(p) in first:
                self.aliases[name] = first[id(p)]
            else:
                first[id(p)] = name
        st.base_sha256()  # of the unsharded base (π_ref / π_init), for resume checks
        self.shard(st.model, decoder_layers(st.model), trainable=True)
        for frozen in (st.ref, st.init):
            if frozen is not None:
                self.shard(frozen, decoder_layers(frozen), trainable=False)
        if st.critic is not None:
            c = st.critic
            if c.trunk is not None:
                self.shard(c.trunk, list(c.trunk.layers), trainable=True)
            self.shard(c.head, [], trainable=True)
        b = st.behaviour
        st.behaviour = ShardedBehaviour(b.r, b.seed, b.engine, st.model, self)

    # -- the update -------------------------------------------------------------------
    def rank_micro_batches(self, plan: list[list[torch.Tensor]]) -> list[tuple[torch.Tensor, bool]]:
        """This rank's micro-batches as (rows, live): every rank runs as many (each forward and
        backward is a collective), a short rank padding with weight-0 copies of a real one."""
        mine = [(rows, True) for rows in plan[self.world.rank]]
        n = max(len(p) for p in plan)
        pad = next(rows for p in plan for rows in p)
        return mine + [(pad, False)] * (n - len(mine))

    def nonfinite(self, total: torch.Tensor, step: int) -> Optional[str]:
        """Every rank agrees on a non-finite loss before any backward (which is a collective) and
        raises ``Diverged`` at the same micro-batch."""
        if not self.all_finite(bool(torch.isfinite(total))):
            raise Diverged(f"non-finite loss at step {step} on a sharded rank")
        return None

    def reduce_grads(self, opt, nonfinite: Optional[str], step: int) -> None:
        """Nothing: the backward reduce-scattered the gradients as sums already."""

    def all_finite(self, finite: bool) -> bool:
        """Whether every rank's loss is finite (before a backward, which is a collective)."""
        if not self.world.active:
            return finite
        t = torch.tensor([0.0 if finite else 1.0], dtype=torch.float64, device=self._device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t) == 0.0

    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
            else torch.device("cpu")

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over sharded gradients: the global 2-norm (local
        squared norms summed over ranks, in float64), every shard scaled by
        ``min(1, max / (norm + 1e-6))`` as torch does."""
        grads = [local(p.grad) for p in params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        # squared local norms accumulated in float64 (a float32 norm over a large tensor is only
        # accurate to ~1e-5 relative), summed over ranks
        sq = torch.stack([torch.linalg.vector_norm(g, 2.0, dtype=torch.float64).to(self._device()) ** 2
                          for g in grads]).sum()
        if self.world.active:
            dist.all_reduce(sq)
        norm = sq.sqrt().to(grads[0].dtype)
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.device, g.dtype))
        return norm.cpu()

    # -- full weights -----------------------------------------------------------------
    def full_chunks(self, state: dict[str, torch.Tensor], cpu: bool = False) -> Iterator[dict[str, torch.Tensor]]:
        """``state`` (sharded) as full tensors, one decoder layer (or the tensors between
        layers) at a time, in its order; a tied name reuses its first name's tensor. Every
        rank iterates to the end (collectives)."""
        gathered: dict[str, torch.Tensor] = {}
        chunk: dict[str, torch.Tensor] = {}
        cur = None
        for k, v in state.items():
            m = _LAYER.search(k)
            key = m.group(2) if m else None
            if chunk and key != cur:
                yield chunk
                chunk = {}
            cur = key
            src = self.aliases.get(k)
            t = gathered[src] if src in gathered else full(v.detach())
            if cpu:
                t = t.cpu()
            if k in self.aliases.values():
                gathered[k] = t
            chunk[k] = t
        if chunk:
            yield chunk

    def full_state(self, model: nn.Module, keep: bool) -> Optional[dict[str, torch.Tensor]]:
        """The full state dict of ``model`` on the CPU where ``keep`` (rank 0), else None (a collective)."""
        out: dict[str, torch.Tensor] = {}
        for chunk in self.full_chunks(model.state_dict(), cpu=True):
            if keep:
                out.update(chunk)
        return out if keep else None

    def eval_engine(self, st, rollout, tok):
        """Where the engine lags the policy, a rollout engine with the current policy for rank 0's
        eval (every rank gathers; None on the others, and where the engine holds the policy)."""
        from rlsuite.suite.engines import make_engine

        if st.engine.version == st.budget.counters["updates"]:
            return None
        state = self.full_state(st.model, keep=self.world.main)
        if state is None:
            return None
        return make_engine(rollout.engine, FullView(st.model, state), tok, rollout)

    def final_writer(self, model: nn.Module):
        """``final/``'s writer: the full weights gathered now (every rank), saved by rank 0."""
        state = self.full_state(model, self.world.main)
        return lambda d: save_pretrained(model, d, state)

    # -- checkpoints ------------------------------------------------------------------
    def _container(self, st) -> nn.Module:
        parts = {"policy": st.model}
        if st.critic is not None:
            parts["critic"] = st.critic
        return nn.ModuleDict(parts)

    def _tensors(self, st, history_versions, ref: bool) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        out: dict[str, Any] = {"model": st.model.state_dict(),
                               "optim": get_optimizer_state_dict(self._container(st), st.opt)}
        if st.critic is not None:
            out["critic"] = st.critic.state_dict()
        if ref:
            out["ref"] = st.ref.state_dict()
        if history_versions:  # saving: the snapshots; loading: templates of their shape and placement
            h = st.behaviour.history
            out["history"] = {str(v): h[v] if v in h else {k: x.detach().clone() for k, x in
                                                           st.model.state_dict().items()} for v in history_versions}
        return out

    def save(self, st, folder, plain) -> None:
        """Every rank: the sharded tensors into ``checkpoint/dcp``; rank 0 also ``state.pt``
        (``plain()``: the state dict of :func:`rlsuite.suite.checkpoint.state_of`, whose sharded
        weight dicts are left out of it)."""
        import torch.distributed.checkpoint as dcp

        from rlsuite.suite.checkpoint import pack

        state = plain()
        versions = sorted(st.behaviour.history)
        ref = "ref" in state
        meta = {k: v for k, v in state.items() if k not in ("model", "opt", "critic", "ref", "history")}
        meta["sharded"] = {"world_size": self.world.size, "history": versions, "ref": ref,
                           "critic": st.critic is not None}
        tensors = self._tensors(st, versions, ref)

        def write(d: Path) -> None:
            self.world.broadcast_object(str(d))
            dcp.save(tensors, checkpoint_id=str(d / "dcp"))
            torch.save(pack(meta), d / "state.pt")

        if self.world.main:
            folder.sync("metrics.jsonl")
            folder.replace_dir("checkpoint", write)
        else:
            d = Path(self.world.broadcast_object(None))
            dcp.save(tensors, checkpoint_id=str(d / "dcp"))

    def load(self, st, ck: dict[str, Any], ckpt: Path) -> None:
        """Every rank: the sharded tensors of ``ckpt/dcp`` (written on any world size) into
        ``st``'s models, optimizer and history."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        info = ck.get("sharded")
        if info is None:
            raise BadInput(f"{ckpt}: written by an unsharded run (dist.shard=none); resume it with "
                           f"dist.shard=none, or start the sharded run afresh (remove {ckpt})")
        if info["critic"] != (st.critic is not None):
            raise BadInput(f"{ckpt}: the checkpoint's critic does not match this run's")
        target = self._tensors(st, info["history"], info["ref"])
        dcp.load(target, checkpoint_id=str(ckpt / "dcp"))
        st.model.load_state_dict(target["model"])
        if st.critic is not None:
            st.critic.load_state_dict(target["critic"])
        if info["ref"]:
            st.ref.load_state_dict(target["ref"])
            st.ref_refreshed = True
        set_optimizer_state_dict(self._container(st), st.opt, target["optim"])
        st.behaviour.history = {int(v): sd for v, sd in target.get("history", {}).items()}


class ShardedBehaviour(BehaviourSync):
    """:class:`rlsuite.suite.behaviour.BehaviourSync` over a sharded policy: sharded history snapshots,
    engine loads gathered one decoder layer at a time (the mismatch noise in the same order)."""

    def __init__(self, rollout, seed: int, engine, model, sharding: Sharding) -> None:
        self.r, self.seed, self.engine, self.model, self.sharding = rollout, seed, engine, model, sharding
        self.history = {0: {k: v.detach().clone() for k, v in model.state_dict().items()}} \
            if rollout.sync == "lag" else {}

    def load(self, state: dict, version: int) -> None:
        from rlsuite.suite.prompts import seed_for

        gen = torch.Generator().manual_seed(seed_for(self.seed, "mismatch", version))
        for chunk in self.sharding.full_chunks(state):
            self.engine.load_weights(self.behaviour_state(chunk, version, gen), version)


class FullView:
    """A sharded model seen with a full state dict (what an engine reads when it is built)."""

    def __init__(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        self._model, self._state = model, state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state

    def parameters(self):
        return iter(self._state.values())

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def save_pretrained(model: nn.Module, d: Path, state: dict[str, torch.Tensor]) -> None:
    """``final/`` of a sharded policy: ``save_pretrained`` of the gathered full ``state`` (rank 0)."""
    model.save_pretrained(d, state_dict=state)


def state_bytes(st) -> dict[str, int]:
    """What this rank holds of the trained state ``st`` (a :class:`~rlsuite.suite.train_state.TrainState`):
    ``params`` (the local shards of the policy, critic, reference and initial policy, each
    parameter once) and ``optim`` (AdamW's state)."""
    seen: set[int] = set()
    params = 0
    for m in (st.model, st.critic, st.ref, st.init):
        if m is None:
            continue
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                t = local(p.detach())
                params += t.numel() * t.element_size()
    optim = 0
    for s in st.opt.state.values():
        for v in s.values():
            if isinstance(v, torch.Tensor):
                t = local(v)
                optim += t.numel() * t.element_size()
    return {"params": params, "optim": optim}


__all__ = ["Sharding", "ShardedBehaviour", "FullView", "state_bytes", "decoder_layers", "ensure_group"]
