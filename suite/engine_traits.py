"""What each rollout engine can do that the settings depend on: one table, declared once.

The engine classes (``suite/engines/``) take their ``traits`` from :data:`TRAITS`, and
:func:`rlsuite.suite.config.check_ranges` validates ``rollout.engine`` against the same entries,
so no check lists engine names of its own. This module imports nothing heavy (no torch): the
checks run at resolution, before a model or an engine is built.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineTraits:
    """The capabilities of one ``rollout.engine`` that cross-field checks need."""

    row_rng: bool
    """Samples with the row-invariant noise of ``rollout.rng=row`` (a row's tokens do not depend on
    the other rows of the batch, so data-parallel ranks sample exactly what one process would)."""
    layerwise_sync: bool
    """Takes the policy's full weights pushed layer by layer (what sharded training,
    ``dist.shard=fsdp``, sends it)."""
    untruncated_logprobs: bool
    """Reports μ's log-probs under the untruncated distribution even with top-p/top-k set (an engine
    without it reports only the truncated log-probs)."""
    multi_process: bool
    """Runs one copy per training process (``dist.world_size > 1``)."""


_KV = EngineTraits(row_rng=True, layerwise_sync=True, untruncated_logprobs=True, multi_process=True)

TRAITS: dict[str, EngineTraits] = {
    "auto": _KV,
    "kv": _KV,
    "native": _KV,
    "native_bf16": _KV,
    "onednn": _KV,
    "s3r": EngineTraits(row_rng=False, layerwise_sync=True, untruncated_logprobs=True, multi_process=True),
    "hf": EngineTraits(row_rng=False, layerwise_sync=False, untruncated_logprobs=True, multi_process=True),
    "vllm": EngineTraits(row_rng=False, layerwise_sync=False, untruncated_logprobs=False, multi_process=False),
}
"""``rollout.engine`` → its traits. ``auto`` (the kv sampler on the architectures it supports, else
HF ``generate``) is checked at resolution as the kv sampler; once the model is loaded,
``suite/checks.py`` checks the engine it resolved to again (``row_rng``, ``layerwise_sync``)."""


def engines_with(trait: str) -> list[str]:
    """The ``rollout.engine`` settings that have ``trait``, in the table's order (``auto`` first)."""
    return [k for k, t in TRAITS.items() if getattr(t, trait)]
