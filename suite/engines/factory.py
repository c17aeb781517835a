"""Which engine a ``rollout.engine`` setting names, what it can do, and building it.

``auto`` is the fastest exact engine the model and device support, by capability (never by
timing): for the architectures of the KV forward (:data:`KV_ARCHITECTURES`), the native engine
where it serves (CPU, fp32 weights, a supported activation: :func:`rlsuite.suite.engines.native.supported`,
and a C++ compiler and ninja to build its step: :func:`rlsuite.suite.engines.native.toolchain`; its
matmuls run on oneDNN-packed weights where oneDNN serves), else the oneDNN engine where it serves
(CPU, fp32 weights, a torch build with oneDNN's linear kernels:
:func:`rlsuite.suite.engines.onednn.supported`), else the kv sampler; HF ``generate`` for any other
architecture (:func:`auto_kind`). All of them sample by the same rules; their logits agree to
float rounding. The trainer asks the resolved engine (its class's ``capabilities`` and ``traits``,
:mod:`rlsuite.suite.engine_traits`), never its name; a run records the resolved kind in
``spec.json`` and ``env.json`` (``resolved``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsuite.suite.engines.base import KV_ARCHITECTURES
from rlsuite.suite.engine_traits import EngineTraits
from rlsuite.suite.errors import BadInput

KV_KINDS = ("kv", "native", "native_bf16", "onednn", "s3r")
"""The settings whose engine is the hand-written KV forward (Llama-style models only)."""


def auto_kind(model) -> str:
    """What ``rollout.engine=auto`` is for ``model`` on its current device and dtype."""
    if getattr(model.config, "model_type", None) not in KV_ARCHITECTURES:
        return "hf"
    from rlsuite.suite.engines import native, onednn

    if native.supported(model) is None and native.toolchain() is None:
        return "native"
    return "onednn" if onednn.supported(model) is None else "kv"


def engine_class(kind: str, model) -> type:
    """The engine class of ``rollout.engine=kind`` for ``model`` (imports only that engine)."""
    if kind == "auto":
        kind = auto_kind(model)
    if kind == "vllm":
        from rlsuite.suite.engines.vllm import VLLMEngine  # imports vllm itself; BadInput when it or a GPU is missing

        return VLLMEngine
    if kind == "s3r":
        from rlsuite.suite.engines.speculative import S3RSampler

        return S3RSampler
    if kind == "native":
        from rlsuite.suite.engines.native import NativeKVSampler  # builds its C++ step on first use

        return NativeKVSampler
    if kind == "native_bf16":
        from rlsuite.suite.engines.native import NativeBF16KVSampler

        return NativeBF16KVSampler
    if kind == "onednn":
        from rlsuite.suite.engines.onednn import OneDNNKVSampler

        return OneDNNKVSampler
    if kind == "kv":
        from rlsuite.suite.engines.kv import KVSampler

        return KVSampler
    from rlsuite.suite.engines.hf import HFGenerateEngine

    return HFGenerateEngine


@dataclass(frozen=True)
class EngineInfo:
    """A resolved ``rollout.engine``: its class, what it records, what it can do."""

    cls: type
    capabilities: frozenset[str]
    traits: EngineTraits
    kind: str
    """The resolved ``rollout.engine`` value (``auto`` resolved: :func:`auto_kind`)."""

    @property
    def row_rng(self) -> bool:
        return self.traits.row_rng


def resolve_engine(kind: str, model) -> EngineInfo:
    """The engine ``kind`` would build for ``model``, checked before any is built: BadInput
    when the architecture is not one the KV forward supports, or when vLLM or a GPU is missing."""
    arch = getattr(model.config, "model_type", None)
    if kind in KV_KINDS and arch not in KV_ARCHITECTURES:
        raise BadInput(f"rollout.engine={kind} supports {', '.join(KV_ARCHITECTURES)} models, "
                       f"not '{arch}'; use rollout.engine=hf or auto")
    if kind == "vllm":
        from rlsuite.suite.engines.vllm import require_vllm

        require_vllm()  # BadInput (exit 2) when vllm or a CUDA device is missing
    cls = engine_class(kind, model)
    return EngineInfo(cls, frozenset(cls.capabilities), cls.traits, auto_kind(model) if kind == "auto" else kind)


def make_engine(kind: str, model, tokenizer, rollout=None):
    """``kv`` / ``native`` / ``native_bf16`` / ``onednn`` / ``hf`` / ``s3r`` / ``vllm`` / ``auto``
    (:func:`auto_kind`). A LoRA policy is given to the engine as a merged copy, a plain HF model
    (:func:`rlsuite.suite.lora.plain`); its syncs load merged weights (:func:`rlsuite.suite.lora.hf_state`)."""
    from rlsuite.suite.lora import plain

    cls = engine_class(kind, model)
    model = plain(model)
    if kind == "vllm":
        return cls(model, tokenizer, rollout)
    if kind == "s3r":
        kw = dict(gamma=rollout.s3r_gamma, sink=rollout.s3r_sink, window=rollout.s3r_window) if rollout else {}
        return cls(model, tokenizer, **kw)
    return cls(model, tokenizer)
