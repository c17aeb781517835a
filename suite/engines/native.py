"""``rollout.engine=native``: the kv sampler with its forward and token loop in C++ (CPU, fp32).

At the sizes of the embedded default and the CPU benchmarks a decode step is a few dozen
small tensor ops whose cost is the per-op round trip (Python, the dispatcher, a temporary
each), not arithmetic: the eager step of the vs_trl model (hidden 128, batch 32) takes about
1.2 ms for 34 MFLOP. :class:`NativeKVSampler` keeps everything of :class:`~rlsuite.suite.engines.kv.KVSampler`
(prefill, shared-prompt prefill, the sampling rules, stop handling, row compaction, weight sync)
and moves two things to ``suite/native/kv_decode.cpp``:

* the forward of new tokens (one per row in decoding, the prompt in a prefill): RMSNorm, RoPE,
  the cache write, attention over the cached keys (its (row, head) pairs across torch's
  threads) and the SwiGLU activation are loops (AVX-512 where the CPU has it, checked at run
  time; plain loops and ATen's kernels elsewhere), and the matmuls run on copies of the weights
  made once per weight sync (:attr:`NativeKVSampler.packed`): oneDNN's inner product on weights
  packed in its blocked layout where oneDNN serves (the ``onednn`` engine's kernel, called through
  the dispatcher; SmolLM2-135M, batch 8, 1 thread, AMD EPYC: a decode step 44–50 ms against the
  onednn engine's 61 and 88–90 on MKL's GEMM), else MKL GEMMs on weights transposed to
  ``[in, out]`` (172 vs 287 µs for the step's matmuls on the vs_trl shape at 2 threads, against
  ``at::linear`` on ``[out, in]``);
* the token loop (``generate_loop``) in the common case — noise from a ``torch.Generator`` or
  greedy, no top-p/top-k, no stop strings, no top-K outputs, no attention statistic: the same
  ATen ops on the same generator as :func:`~rlsuite.suite.engines.sampling.sample_step` and the tracker, so it
  samples exactly what the Python loop over the same step samples (tested bit for bit), with
  no Python per token. Other settings run the Python loop over the C++ step.

The packed or transposed copies double the engine's weight memory.

Numerics: fp32 throughout like the eager step, but not bit-identical to it (other summation
orders in the norms, the attention softmax and the GEMMs; differences of order 1e-6 in the logits,
tested against the HF forward), so it is its own engine value and its runs have their own
run ids. The AVX-512 and the plain loops differ at the same order (the exp, the summation
order), so a run's numbers depend on the CPU as MKL's already do. Prompts (prefills) up to
``long_prefill`` slots run through the same C++ forward, several tokens per sequence at once;
longer ones, and calls that need the attention statistic (``behav_attn_stat``), go through the
eager forward.

Built on first use with ``torch.utils.cpp_extension`` (a C++ compiler and ninja; about 16 s
once, then cached under ``$RLSUITE_CACHE/native/<digest>/``, the digest of the source, torch
version and flags; the build reads its own copy of the source there, so checkouts at other paths
(a study's worktree, a clone) share one build instead of rebuilding it in turn); compiled with
``-O3`` (and ``-fopenmp`` on Linux, sharing torch's OpenMP runtime) and no ``-march`` — the
AVX-512 code sits in functions picked at run time — so a cache shared across machines stays valid.
Refused with one message where it cannot serve: a CUDA device or non-fp32 weights (use
``rollout.engine=kv``), an activation other than SiLU/GELU/ReLU, or no compiler / ninja.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from rlsuite.suite.errors import BadInput
from rlsuite.suite.engines.base import KV_ARCHITECTURES, GenOutput, SamplingParams, _TensorTracker
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engine_traits import TRAITS

SOURCE = Path(__file__).parent.parent / "native" / "kv_decode.cpp"
ACTIVATIONS = {"silu": 0, "swish": 0, "gelu": 1, "gelu_pytorch_tanh": 2, "gelu_new": 2, "relu": 3}
"""``config.hidden_act`` values the C++ step implements (→ its activation code)."""

_EXT = None


def _ninja() -> Optional[str]:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # the PyPI wheel (a dependency): its binary may sit outside PATH

        return os.path.join(ninja.BIN_DIR, "ninja")
    except ImportError:
        return None


def cxx_compiler() -> Optional[str]:
    """The C++ compiler torch's builders can use: ``$CXX``, else ``c++``, ``g++`` or ``clang++``
    from PATH (None when there is none)."""
    return os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


def toolchain() -> Optional[str]:
    """Why this machine cannot build the C++ step (None when a C++ compiler and ninja are found)."""
    if cxx_compiler() is None:
        return "no C++ compiler (g++, clang++ or $CXX) was found"
    if _ninja() is None:
        return "ninja was not found (pip install ninja)"
    return None


def staged_source(code: bytes, digest: str) -> Path:
    """The extension's source copied into its build folder ``$RLSUITE_CACHE/native/<digest>/``
    (written once, atomically; never rewritten, so its mtime stays older than the build's objects).
    torch's build files name the source by its path: built from a checkout's own path, every
    checkout at another path (a worktree, a clone) would rebuild the cached extension, and the
    next one again."""
    from rlsuite.suite.cache import cache_root
    from rlsuite.suite.runfolder import atomic_write_text

    dest = cache_root() / "native" / digest / SOURCE.name
    if not dest.is_file() or dest.read_bytes() != code:
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(dest, code.decode("utf-8"), durable=False)
    return dest


def load_extension():
    """The compiled module (built once per process; cached on disk by source, torch version and
    build flags)."""
    global _EXT
    if _EXT is not None:
        return _EXT
    # torch.utils.cpp_extension builds with $CXX, else `c++`: point $CXX at g++/clang++ where
    # only those exist
    cxx = cxx_compiler()
    if cxx is None:
        raise BadInput("rollout.engine=native compiles its decode step with a C++ compiler (g++, clang++ or $CXX), "
                       "and none was found; install one or use rollout.engine=kv")
    os.environ.setdefault("CXX", cxx)
    nj = _ninja()
    if nj is None:
        raise BadInput("rollout.engine=native builds its decode step with ninja, which was not found "
                       "(pip install ninja); or use rollout.engine=kv")
    if shutil.which("ninja") is None:  # cpp_extension runs `ninja` from PATH
        os.environ["PATH"] = os.path.dirname(nj) + os.pathsep + os.environ.get("PATH", "")
    from torch.utils.cpp_extension import load

    # OpenMP on Linux (the extension then shares torch's OpenMP runtime, as inductor's compiled
    # kernels do); elsewhere only the simd pragmas
    cflags = ["-O3", "-fopenmp" if sys.platform.startswith("linux") else "-fopenmp-simd"]
    ldflags = ["-fopenmp"] if "-fopenmp" in cflags else []
    code = SOURCE.read_bytes()
    digest = hashlib.sha256(code + torch.__version__.encode() + " ".join(cflags).encode()).hexdigest()[:12]
    try:
        src = staged_source(code, digest)
        _EXT = load(name=f"rlsuite_kv_decode_{digest}", sources=[str(src)], build_directory=str(src.parent),
                    extra_cflags=cflags, extra_ldflags=ldflags, verbose=False)
    except Exception as e:  # a failed build: the compiler's own error lines, and the way out
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ": error" in ln or ": fatal error" in ln] or lines[-3:] or [type(e).__name__]
        raise BadInput(f"rollout.engine=native could not build {SOURCE.name}: {' | '.join(errors[:5])}; "
                       f"use rollout.engine=kv") from e
    return _EXT


def supported(model) -> Optional[str]:
    """Why the native step cannot serve ``model`` (None when it can)."""
    arch = getattr(model.config, "model_type", None)
    if arch not in KV_ARCHITECTURES:
        return f"'{arch}' models (it supports {', '.join(KV_ARCHITECTURES)}; use rollout.engine=hf or auto)"
    p = next(model.parameters())
    if p.device.type != "cpu":
        return f"a model on {p.device.type} (the native decode step is for the CPU; use rollout.engine=kv)"
    if p.dtype != torch.float32:
        return f"{p.dtype} weights (the native decode step is fp32; use rollout.engine=kv)"
    act = getattr(model.config, "hidden_act", "silu")
    if act not in ACTIVATIONS:
        return f"the activation {act!r} (supported: {', '.join(sorted(ACTIVATIONS))}; use rollout.engine=kv)"
    return None


class NativeKVSampler(KVSampler):
    """:class:`~rlsuite.suite.engines.kv.KVSampler` whose forward (prefills up to ``long_prefill`` slots,
    decode steps) and token loop run in C++ (see the module docstring)."""

    traits = TRAITS["native"]

    def __init__(self, model, tokenizer) -> None:
        why = supported(model)
        if why is not None:
            raise BadInput(f"rollout.engine=native cannot serve {why}")
        self._ext = load_extension()
        self._act_code = ACTIVATIONS[getattr(model.config, "hidden_act", "silu")]
        from rlsuite.suite.engines.onednn import supported as dnn_supported

        self._dnn = dnn_supported(model) is None  # oneDNN's packed inner product serves (see `packed`)
        super().__init__(model, tokenizer)

    simd = True
    """Run the AVX-512 loops where the CPU has them (False: the plain loops and ATen's kernels,
    which every CPU runs; the tests run both)."""

    def _sources(self) -> list[Optional[Tensor]]:
        """The tensors of ``_flat`` before transposing: per layer (ln1, qkv_w, qkv_b, o_w, o_b,
        ln2, gu_w, gu_b, down_w, down_b), then the LM head."""
        return [t for layer in self._layers for t in layer] + [self.w["lm_head.weight"]]

    _TRANSPOSED = (1, 3, 6, 8)
    """Positions within a layer's ten tensors that the C++ step takes transposed ([in, out]:
    the layout its GEMMs run fastest on, see kv_decode.cpp)."""

    def _transposed(self, i: int) -> bool:
        return i % 10 in self._TRANSPOSED or i == len(self._layers) * 10  # the LM head too

    packed: Optional[bool] = None
    """The matmuls' weights: ``True`` oneDNN-packed ``[out, in]`` copies (the inner product the
    ``onednn`` engine runs, called from C++), ``False`` transposed ``[in, out]`` copies for
    MKL's GEMM; ``None`` (default): packed wherever oneDNN serves the model
    (:func:`rlsuite.suite.engines.onednn.supported`), by capability like ``auto``. SmolLM2-135M at
    batch 8, 1 thread: the LM head 4.3 ms packed vs 14.0 ms through MKL (``decode_bound.md``)."""

    def _use_packed(self) -> bool:
        return self._dnn if self.packed is None else bool(self.packed)

    def _copy(self, i: int, t: Tensor) -> Tensor:
        """The C++ step's copy of source tensor ``i`` (see :attr:`packed`)."""
        if not self._transposed(i):
            return t.contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(t.contiguous()) if self._packed else t.t().contiguous()

    def _fuse(self) -> None:
        super()._fuse()
        self._packed = self._use_packed()
        empty = torch.empty(0)
        flat = [empty if t is None else self._copy(i, t) for i, t in enumerate(self._sources())]
        self._flat, self._head_t = flat[:-1], flat[-1]

    def _refresh(self) -> None:
        """An in-place weight load: the transposed copies are refreshed in place, the packed ones
        packed again (a reorder cannot write into an existing tensor); the other entries are the
        engine's own tensors, already updated."""
        for i, (t, dst) in enumerate(zip(self._sources(), self._flat + [self._head_t])):
            if t is None:
                continue
            if self._transposed(i) and self._packed:
                if i == len(self._flat):
                    self._head_t = self._copy(i, t)
                else:
                    self._flat[i] = self._copy(i, t)
            elif self._transposed(i):
                dst.copy_(t.t())
            elif dst.data_ptr() != t.data_ptr():
                dst.copy_(t)

    long_prefill = 256
    """Prefills wider than this many slots run through the eager forward: the C++ attention is
    quadratic loops where SDPA's fused kernel wins on long prompts (tiny model, 2 threads: the
    C++ prefill 0.38 vs 1.04 ms at 4 × 6 tokens, 9.3 vs 11.8 ms at 8 × 128, 33.8 vs 31.4 ms at
    4 × 512)."""

    native_loop = True
    """Run the token loop in C++ where it can (False: always the Python loop; the tests compare
    the two)."""

    def _decode(self, params: SamplingParams, generator, want_attn: bool, limits: list[int], cache: list[list[Tensor]],
                logits: Tensor, attn: Optional[Tensor], key_mask: Tensor, next_pos: Tensor, W: int) -> GenOutput:
        """The token loop in C++ (``generate_loop``: sampling, stop bookkeeping, row compaction
        and the decode step in one call, no Python per token) where it has the Python loop's
        exact semantics: noise from a ``torch.Generator`` (or greedy), no top-p/top-k, no stop
        strings, no top-K outputs, no attention statistic. Anything else: the Python loop."""
        plain = (self.native_loop and not want_attn and not params.stop_strings and not params.topk
                 and params.top_p >= 1.0
                 and not (params.top_k and params.top_k < logits.shape[-1])
                 and (isinstance(generator, torch.Generator) or (generator is None and params.temperature == 0))
                 and torch.get_default_dtype() == torch.float32)  # sample_step's torch.rand draws in it
        if not plain:
            return super()._decode(params, generator, want_attn, limits, cache, logits, attn, key_mask, next_pos, W)
        stop = torch.tensor(sorted(set(params.stop_ids)), dtype=torch.long)
        toks, lps, count, eos = self._ext.generate_loop(
            logits, next_pos, key_mask.bool().contiguous(), W, max(limits) if limits else 0,
            torch.tensor(limits, dtype=torch.long), stop, float(params.temperature), generator,
            float(self.compact_frac),
            [c for layer in cache for c in layer], *self._model_args())
        return _TensorTracker.assemble(params, count, eos, toks, lps, lps)  # no truncation: trunc_logp = logp

    def _model_args(self) -> tuple:
        """The C++ functions' model arguments: (layers, embedding, final norm, head [in, out] or
        packed, RoPE cos, signed sin, heads, key/value heads, head dim, eps, activation code, simd,
        packed)."""
        cos_t, sin_t = self._rope_table
        return (self._flat, self.w["embed_tokens.weight"], self.w["norm.weight"], self._head_t, cos_t, sin_t,
                self.n_heads, self.n_kv, self.head_dim, float(self.eps), self._act_code, self.simd, self._packed)

    def _forward(self, ids: Tensor, pos: Tensor, cache: list[list[Tensor]], start: int, allowed: Tensor,
                 key_mask: Tensor, want_attn: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        if want_attn or (ids.shape[1] > 1 and start + ids.shape[1] > self.long_prefill):
            return super()._forward(ids, pos, cache, start, allowed, key_mask, want_attn)
        # the key mask itself: the C++ step applies the causal rule and lets a query see itself,
        # which is what `allowed` encodes
        logits = self._ext.decode(ids, pos, key_mask.bool().contiguous(), start, [c for layer in cache for c in layer],
                                  *self._model_args())
        return logits, None


def bf16_supported() -> Optional[str]:
    """Why oneDNN's bf16 inner product cannot run here (None when it can): it needs a CPU with
    bf16 instructions (AVX-512-BF16 or AMX; oneDNN refuses the reorder elsewhere)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return "this torch build has no oneDNN linear kernels"
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(16, 16, dtype=torch.bfloat16))
        torch.ops.mkldnn._linear_pointwise(torch.ones(2, 16, dtype=torch.bfloat16), w, None, "none", [], "")
    except RuntimeError as e:
        return f"oneDNN refused bf16 on this CPU ({str(e).splitlines()[0][:120]})"
    return None


class NativeBF16KVSampler(NativeKVSampler):
    """``rollout.engine=native_bf16`` (opt-in): :class:`NativeKVSampler` whose matmuls run in bf16
    on bf16 copies of the weights packed for oneDNN (activations cast to bf16 at each matmul,
    accumulation and outputs fp32; norms, RoPE, attention and sampling stay fp32). A decode step
    of a real-size model reads half the bytes. μ is then a low-precision sampler: π_old (the fp32
    trainer's) differs from it, ``mismatch/*`` report the gap and ``loss.is_correction`` corrects
    it (``benchmarks/decode_bound.py`` and ``benchmarks/bf16_engine.py`` measure both)."""

    traits = TRAITS["native_bf16"]
    packed = True

    def __init__(self, model, tokenizer) -> None:
        why = bf16_supported()
        if why is not None:
            raise BadInput(f"rollout.engine=native_bf16 cannot run: {why}; use rollout.engine=native")
        super().__init__(model, tokenizer)

    def _copy(self, i: int, t: Tensor) -> Tensor:
        if not self._transposed(i):
            return t.contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(t.detach().to(torch.bfloat16).contiguous())
