"""The resumable checkpoint (``checkpoint/state.pt`` in the run folder): what it holds, each
tensor stored once, and its size by component.

A checkpoint holds what resuming needs and nothing resuming can rebuild (issue 18 §5):

* the trained models (the policy; the critic when there is one) and their AdamW states; of a
  LoRA policy (``model.lora_rank``), its adapters only (:mod:`rlsuite.suite.lora`: the frozen base
  is rebuilt on resume and checked by its sha256, as the reference is);
* the behaviour policy μ only where it is not the policy: the engine's weights when they lag
  the policy (``rollout.staleness`` > 0 between syncs) and, under ``rollout.sync=lag``, the
  last k policies (:class:`rlsuite.suite.behaviour.BehaviourSync`); an engine that holds the policy
  of now (or one of those k) is rebuilt from it, through the mismatch knob;
* no frozen reference π_ref (nor the frozen initial policy): both are copies of the base the
  run started from, which the runner rebuilds exactly as at the start (the committed warm-start
  base for ``tiny``, the loaded model otherwise); ``base_sha256`` records the base's bytes so
  a resume whose base loads other weights is refused instead of drifting silently. A reference
  an algorithm refreshed (``Context.refresh_reference``) is no longer the base and is kept;
* counters, the algorithm's state, the data cursor, the shared options' state (``options``: the
  curriculum's retired prompts, the adaptive entropy coefficient; :meth:`TrainState.options_state`).

Tensors: every weight dict goes through :class:`TensorStore`: entries with the same bytes
(tied embeddings, the current policy kept in the lag history, a refreshed reference equal to
the policy) are stored once; :func:`unpack` gives them back as one shared tensor (the loaders
copy values, so nothing is tied that was not). ``format`` 2 is this layout; a checkpoint
without it (written before) holds plain state dicts, ``ref`` and ``engine`` included, and still
loads.

Writing and reading (:func:`save`, :func:`resume`) take the run's
:class:`~rlsuite.suite.train_state.TrainState` and its parallel mode
(:class:`rlsuite.suite.parallel.ParallelMode`), which writes ``checkpoint/`` (rank 0's
``state.pt``; sharded: torch.distributed.checkpoint shards beside it) and loads the weights.

``python -m rlsuite.suite.checkpoint RUN_DIR_OR_STATE_PT`` prints the bytes by component
(:func:`component_bytes`).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor

from rlsuite.suite.errors import BadInput
from rlsuite.suite.lora import hf_state, is_lora, trained_state

FORMAT = 2
"""The layout :func:`pack` writes (``state["format"]``)."""

WEIGHT_DICTS = ("model", "critic", "ref", "engine")
"""Top-level entries that are weight dicts (``history`` holds one per kept policy version)."""

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: Tensor) -> Tensor:
    """``t`` viewed as integers of its element size (a bitwise comparison: -0.0 ≠ 0.0, NaN = NaN)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_INT_VIEW[t.element_size()])


def _fingerprint(t: Tensor) -> tuple:
    """A cheap key that equal tensors share: dtype, shape, device and 16 sampled elements' bits."""
    flat = _bits(t).reshape(-1)
    n, k = flat.numel(), min(flat.numel(), 16)
    idx = torch.arange(k, dtype=torch.int64, device=flat.device) * (n - 1) // max(1, k - 1)  # exact integers
    return (t.dtype, tuple(t.shape), str(t.device), tuple(flat[idx].tolist()))


def _same(a: Tensor, b: Tensor) -> bool:
    if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
        return True
    return torch.equal(_bits(a), _bits(b))


class TensorStore:
    """Tensors stored once: :meth:`add` returns the index of a bitwise-equal tensor it holds
    already, or appends a compact copy (a view is cloned, so its base's storage is not saved)."""

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self._by_key: dict[tuple, list[int]] = {}

    def add(self, t: Tensor) -> int:
        t = t.detach()
        key = _fingerprint(t)
        for i in self._by_key.get(key, ()):
            if _same(self.tensors[i], t):
                return i
        if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
            t = t.clone(memory_format=torch.contiguous_format)
        self.tensors.append(t)
        self._by_key.setdefault(key, []).append(len(self.tensors) - 1)
        return len(self.tensors) - 1

    def add_dict(self, sd: Mapping[str, Tensor]) -> dict[str, int]:
        return {k: self.add(v) for k, v in sd.items()}


def pack(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (plain weight dicts under :data:`WEIGHT_DICTS` and ``history``) in the stored
    layout: each weight dict maps names to indices into one list of unique ``tensors``."""
    store = TensorStore()
    out = {k: v for k, v in state.items() if k not in WEIGHT_DICTS and k != "history"}
    for k in WEIGHT_DICTS:
        if k in state:
            out[k] = store.add_dict(state[k])
    if "history" in state:
        out["history"] = {v: store.add_dict(sd) for v, sd in state["history"].items()}
    out["tensors"], out["format"] = store.tensors, FORMAT
    return out


def unpack(state: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`pack` (a checkpoint without ``format`` is returned as it is)."""
    if state.get("format") != FORMAT:
        return state
    ts = state["tensors"]
    out = {k: v for k, v in state.items() if k not in ("tensors", "format")}
    for k in WEIGHT_DICTS:
        if k in state:
            out[k] = {name: ts[i] for name, i in state[k].items()}
    if "history" in state:
        out["history"] = {v: {name: ts[i] for name, i in sd.items()} for v, sd in state["history"].items()}
    return out


def load(path: Path, map_location: Any = None) -> dict[str, Any]:
    """A checkpoint's ``state.pt``, unpacked."""
    return unpack(torch.load(path, weights_only=False, map_location=map_location))


def engine_rebuilt(st) -> bool:
    """The engine holds what :func:`resume` rebuilds without stored weights: the policy of now
    or one of the lag history's (through the mismatch knob)."""
    v = st.engine.version
    return v == int(st.budget.counters["updates"]) or v in st.behaviour.history


def state_of(st) -> dict[str, Any]:
    """The checkpoint of the :class:`~rlsuite.suite.train_state.TrainState` ``st``, unpacked
    (:func:`pack` stores it)."""
    out = {"model": trained_state(st.model), "opt": st.opt.state_dict(), "algo": st.algo.state_dict(),
           "budget": st.budget.state_dict(), "step": st.step_no, "cursor": st.cursor,
           "evals_done": st.evals_done, "entropy": st.entropy, "engine_version": st.engine.version,
           "kl_coef": st.kl_coef}
    if st.critic is not None:
        out["critic"] = st.critic.state_dict()
    if st.ref is not None and st.ref_refreshed:  # else it is the base, rebuilt on resume
        out["ref"] = st.ref.state_dict()
    if st.base_copy() is not None:
        out["base_sha256"] = st.base_sha256()
    if not engine_rebuilt(st):
        out["engine"] = st.engine.state()  # the behaviour weights (stale) as they are
    if st.behaviour.history:
        out["history"] = st.behaviour.history  # the current policy in it is stored once (pack)
    if st.ref_anchors:
        out["ref_anchors"] = dict(st.ref_anchors)
    if st.options_state():  # the shared options' state (curriculum, adaptive entropy coefficient)
        out["options"] = st.options_state()
    return out


def save(st, folder, parallel) -> None:
    """Write ``folder``'s ``checkpoint/`` for the state ``st`` (replaced atomically; the metrics
    rows up to it are made durable first) through the run's parallel mode."""
    parallel.save(st, folder, lambda: state_of(st))


def resume(st, folder, parallel, device, model_name: str) -> bool:
    """Load ``folder``'s checkpoint into ``st`` (False when there is none). A checkpoint whose
    base sha256 differs from the base this run rebuilt its frozen copies from is refused."""
    path = folder.file("checkpoint") / "state.pt"
    if not path.exists():
        return False
    ck = load(path, map_location=device)
    rebuilds_base = (st.ref is not None and "ref" not in ck) or st.init is not None or is_lora(st.model)
    if rebuilds_base and ck.get("base_sha256") is not None and ck["base_sha256"] != st.base_sha256():
        raise BadInput(f"{path}: the run started from a base model with other weights (sha256 "
                       f"{ck['base_sha256'][:12]}…, now {st.base_sha256()[:12]}… for model "
                       f"'{model_name}'); its frozen reference is rebuilt from the base, so it cannot "
                       f"resume exactly: restore that model or start the run afresh (remove {path.parent})")
    parallel.load(st, ck, path.parent)  # the trained weights, optimizer state, refreshed reference, history
    st.algo.load_state_dict(ck["algo"])
    st.budget.load_state_dict(ck["budget"])
    st.step_no, st.cursor, st.evals_done, st.entropy = ck["step"], ck["cursor"], ck["evals_done"], ck["entropy"]
    st.kl_coef = float(ck.get("kl_coef", st.algo.cfg.kl_coef))
    st.ref_anchors.clear()
    st.ref_anchors.update(ck.get("ref_anchors", {}))
    st.load_options_state(ck.get("options", {}))
    v = ck["engine_version"]
    if "engine" in ck:
        st.engine.load_weights(ck["engine"], v)
    else:  # the policy of version v, through the mismatch knob, as the behaviour sync loads it
        src = st.behaviour.history[v] if v in st.behaviour.history else hf_state(st.model)
        st.behaviour.load(src, v)
    return True


def state_sha256(sd: Mapping[str, Tensor]) -> str:
    """sha256 of a state dict's names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(sd):
        v = sd[k].detach()
        h.update(f"{k}|{v.dtype}|{tuple(v.shape)}|".encode())
        h.update(_bits(v).cpu().numpy())  # contiguous: hashed through the buffer protocol
    return h.hexdigest()


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def component_bytes(state: dict[str, Any]) -> dict[str, int]:
    """Bytes of tensor data by top-level entry of an unpacked checkpoint (either format): each
    storage counted once, under the first entry that holds it (in the order ``model``,
    ``critic``, ``opt``, ``history``, ``engine``, ``ref``, then the rest)."""
    first = ["model", "critic", "opt", "history", "engine", "ref"]
    order = [k for k in first if k in state] + [k for k in state if k not in first]
    seen: set[tuple[int, str]] = set()
    out: dict[str, int] = {}
    for k in order:
        n = 0
        for t in _tensors(state[k]):
            s = t.untyped_storage()
            key = (s.data_ptr(), str(t.device))
            if key not in seen:
                seen.add(key)
                n += s.nbytes()
        if n:
            out[k] = n
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rlsuite.suite.checkpoint RUN_DIR_OR_STATE_PT", file=sys.stderr)
        return 2
    p = Path(argv[0])
    path = p / "checkpoint" / "state.pt" if (p / "checkpoint").is_dir() else p / "state.pt" if p.is_dir() else p
    raw = torch.load(path, weights_only=False, map_location="cpu")
    parts = component_bytes(unpack(raw))
    print(f"{path}: {path.stat().st_size:,} bytes on disk (format {raw.get('format', 1)})")
    for k, v in parts.items():
        print(f"  {k:10s} {v:>15,} bytes  {v / 1e6:10.1f} MB")
    print(f"  {'total':10s} {sum(parts.values()):>15,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
