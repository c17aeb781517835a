"""``rollout.engine=onednn``: the kv sampler with its matmuls through oneDNN on weights packed
once per weight sync (CPU).

A rollout's decode step multiplies a few rows (the batch) by every weight matrix, so it reads
all the weights once per token and its speed is the memory bandwidth's. ATen's fp32 CPU matmul
(MKL's sgemm on ``[out, in]`` weights) packs its operand again on every call and, on the AMD
EPYC the real-model benchmarks ran on, streamed the weights at 3–6 GB/s where a copy reaches
9–16 GB/s (the LM head of a 49,152-token vocabulary at batch 8: 25–38 ms vs 9–15 ms through
oneDNN); :class:`OneDNNKVSampler` keeps every rule of :class:`~rlsuite.suite.engines.kv.KVSampler`
(prefill sharing, sampling, stop handling, row compaction, weight sync) and runs the forward's
matmuls (q/k/v, output, gate/up, down, LM head) with oneDNN's inner product
(``torch.ops.mkldnn._linear_pointwise``) on copies of the weights reordered into its blocked
layout (``torch.ops.mkldnn._reorder_linear_weight``) at every weight load. Measured in
``benchmarks/rollout.py --model`` and ``benchmarks/vs_trl.py --model``.

Numerics: fp32, but other GEMM kernels than the kv engine's (another summation order), so its
logits differ from kv's and the HF forward's by float rounding (about 1e-6 relative; tested), it
is its own engine value with its own run ids, and, like MKL's, its numbers depend on the CPU.
The packed copies double the engine's weight memory. Refused with one message where oneDNN is
not there (a torch build without it), on a CUDA device, or with non-fp32 weights.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engine_traits import TRAITS
from rlsuite.suite.errors import BadInput


def supported(model) -> Optional[str]:
    """Why the oneDNN engine cannot serve ``model`` (None when it can)."""
    p = next(model.parameters())
    if p.device.type != "cpu":
        return f"a model on {p.device.type} (oneDNN's packed matmuls are for the CPU; use rollout.engine=kv)"
    if p.dtype != torch.float32:
        return f"{p.dtype} weights (the oneDNN engine is fp32; use rollout.engine=kv)"
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return "this torch build (it has no oneDNN linear kernels; use rollout.engine=kv)"
    return None


class OneDNNKVSampler(KVSampler):
    """:class:`~rlsuite.suite.engines.kv.KVSampler` whose matmuls run through oneDNN on packed weights."""

    traits = TRAITS["onednn"]

    def __init__(self, model, tokenizer) -> None:
        why = supported(model)
        if why is not None:
            raise BadInput(f"rollout.engine=onednn cannot serve {why}")
        self._packed: dict[int, Tensor] = {}
        super().__init__(model, tokenizer)

    def _matmul_weights(self) -> list[Tensor]:
        """The weights the forward multiplies by: per layer q/k/v, output, gate/up and down, then
        the LM head (the tied embedding's tensor when tied)."""
        layers = [t for layer in self._layers for t in (layer[1], layer[3], layer[6], layer[8])]
        return layers + [self.w["lm_head.weight"]]

    def _fuse(self) -> None:
        super()._fuse()
        self._packed = {id(t): torch.ops.mkldnn._reorder_linear_weight(t) for t in self._matmul_weights()}

    def _refresh(self) -> None:
        """An in-place weight load: the weights are packed again (new packed tensors: the reorder
        cannot write into the old ones, and copying into them would cost one more pass)."""
        for t in self._matmul_weights():
            self._packed[id(t)] = torch.ops.mkldnn._reorder_linear_weight(t)

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        packed = self._packed.get(id(weight))
        if packed is None:  # pragma: no cover - every matmul of the forward has a packed copy
            return torch.nn.functional.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
