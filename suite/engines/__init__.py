"""Rollout engines: one protocol (:class:`RolloutEngine`, in :mod:`rlsuite.suite.engines.base`), one
module per engine, and the factory that resolves ``rollout.engine``.

- ``kv`` (:mod:`rlsuite.suite.engines.kv`): the hand-written KV-cached sampler (llama, mistral, qwen2);
- ``native`` (:mod:`rlsuite.suite.engines.native`): the kv sampler with its forward and token loop in C++;
- ``s3r`` (:mod:`rlsuite.suite.engines.speculative`): self-sparse speculative sampling, μ's distribution exactly;
- ``hf`` (:mod:`rlsuite.suite.engines.hf`): HF ``generate``, any causal LM;
- ``vllm`` (:mod:`rlsuite.suite.engines.vllm`): vLLM on a CUDA GPU (the ``vllm`` extra).
"""

from rlsuite.suite.engines.base import KV_ARCHITECTURES, GenOutput, NoStats, RolloutEngine, SamplingParams, left_pad
from rlsuite.suite.engines.factory import EngineInfo, auto_kind, engine_class, make_engine, resolve_engine
from rlsuite.suite.engines.sampling import RowNoise, sample_step, truncate_logits

__all__ = ["KV_ARCHITECTURES", "EngineInfo", "GenOutput", "NoStats", "RolloutEngine", "RowNoise", "SamplingParams",
           "auto_kind", "engine_class", "left_pad", "make_engine", "resolve_engine", "sample_step", "truncate_logits"]
