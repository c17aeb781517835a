"""The planned cost of a sweep, before anything runs: samples, FLOPs, disk and GPU-hours.

``rlsuite sweep run SPEC --dry-run`` prints one row per run and a total line from this module.
Everything here is arithmetic on resolved run specs (:class:`rlsuite.suite.config.RunSpec`) and model
*configs*: no weights are loaded, nothing is downloaded.

**Parameter counts** (:class:`Arch`) come from a model's config — the embedded ``tiny``
(:func:`rlsuite.suite.models.tiny_config`), the ``config.json`` of a local folder, of a fetched pinned
model or of a hub id already in the local Hugging Face cache, else the small table of known
architectures :data:`KNOWN_CONFIGS` (the bundled sweeps' hub ids). Dense Llama-family formula
(``llama``, ``mistral``, ``qwen2``, ``qwen3``), per layer with ``d`` = head_dim, ``H``/``K`` =
query/key-value heads: attention ``h·H·d + 2·h·K·d + H·d·h`` (+ ``H·d + 2·K·d`` q/k/v biases
for qwen2 or ``attention_bias``; + ``2·d`` q/k norms for qwen3), MLP ``3·h·I``, two RMSNorms
``2·h``; plus the final norm ``h``, the embedding ``V·h`` and the unembedding ``V·h`` unless
tied (then stored once). A model whose config is not available (an unknown hub id offline, a
folder without ``config.json``, another architecture) gets ``unknown`` sizes with the reason;
its run rows still show their samples.

**Samples** follow the run's budget (:mod:`rlsuite.suite.budget`: a run stops after the step that
crosses any limit): ``samples`` → ``ceil(samples / B)·B`` with ``B = prompts_per_step ×
group_size``; ``prompts`` and ``updates`` (``epochs × minibatches`` per step) → steps × B; with
several of them the smallest wins. ``gen_tokens``/``train_tokens``/``flops`` alone give the
fewest steps that can reach them (every completion at the length cap): an ``≥``. ``wall_s``
alone: unknown. Refill draws of filtering algorithms are not predicted (a ``samples`` budget
counts them, so it stays exact).

**FLOPs** use the trainer's formulas (:mod:`rlsuite.suite.budget`) with ``P`` = the non-embedding
parameters plus the unembedding matmul (:func:`rlsuite.suite.models.non_embedding_params`) and an
upper bound on the tokens of a sample: ``T = prompt_tokens + rollout.max_new_tokens`` (every
completion at the cap; ``prompt_tokens`` is an assumption, ``--prompt-tokens``, default
:data:`DEFAULT_PROMPT_TOKENS`; a multi-turn task adds ``(max_turns − 1) × max_obs_tokens`` of
observations). Per sample: rollout ``2·P·T``; the π_old scoring pass ``2·P·T`` (skipped only when
``rollout.old_logp=behaviour`` can alias it: on-policy settings and no value head); π_ref
``2·P·T`` when the algorithm needs ``ref_logp``, π_init likewise for ``init_logp``; training
``6·P·T·epochs``; a separate critic adds ``2·Pc·T + 6·Pc·T·epochs``. Evals, judges and anchors
(``ctx.charge``) are not included.

**Disk** follows the checkpoint layout of :mod:`rlsuite.suite.checkpoint`: the trainable models (the
policy, plus a separate critic when the algorithm uses ``critic=separate``; a value head is
negligible and left out) in ``model.dtype``; AdamW's two moments per trainable parameter, which
``torch.optim.AdamW`` keeps in the parameter's dtype (:data:`ADAM_MOMENTS`; so 2 × 2 bytes for a
bfloat16 policy, 2 × 4 for float32); the behaviour policy only where it lags the policy
(:func:`behaviour_copies`: one engine copy under ``rollout.sync=periodic`` when
``rollout.staleness`` k reaches the updates of a step, else it re-syncs every step;
``ceil(k / updates per step)`` earlier policies under ``sync=lag``); tied embeddings stored once;
no reference model (rebuilt from the base) unless the algorithm refreshes it
(``algo.refresh_every``, ggpo), then one copy. The final model is the policy in ``model.dtype``.
A run's peak is ``max(2·checkpoint, checkpoint + final)``: a checkpoint is written next to the
previous one before that is dropped (``RunFolder.replace_dir``), and the final model is written
while the last checkpoint exists. A completed run deletes its checkpoint unless
``train.keep_checkpoint`` is true (False when the field is absent), so it keeps ``final`` (or
``final + checkpoint``).

**GPU-hours** = FLOPs / throughput / 3600 at a stated per-GPU throughput (``--throughput``,
default :data:`DEFAULT_THROUGHPUT`: 40% MFU of an H100 SXM's 989 TFLOP/s dense bf16), the same
for any number of GPUs per run at perfect scaling.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per parameter of each ``model.dtype``."""
ADAM_MOMENTS = 2
"""AdamW's exp_avg and exp_avg_sq per trainable parameter, each in the parameter's dtype (what
``torch.optim.AdamW`` allocates, ``zeros_like(param)``; its ``step`` scalars are negligible)."""
H100_BF16_DENSE = 989e12
"""Peak dense bf16 tensor-core FLOP/s of an NVIDIA H100 SXM (no sparsity)."""
DEFAULT_MFU = 0.40
DEFAULT_THROUGHPUT = DEFAULT_MFU * H100_BF16_DENSE
"""Default per-GPU throughput of the GPU-hours (3.956e14 FLOP/s)."""
THROUGHPUT_NOTE = "40% MFU of an H100 SXM's 989 TFLOP/s dense bf16"
DEFAULT_PROMPT_TOKENS = 512
"""Assumed prompt tokens per sample (the prompts are not read by a dry run)."""

ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
             "num_key_value_heads", "vocab_size", "tie_word_embeddings")
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
"""``model_type``s the dense formula of :class:`Arch` covers."""


def _cfg(model_type, hidden, layers, inter, heads, kv, vocab, tied, **extra) -> dict:
    return dict(zip(ARCH_KEYS, (model_type, hidden, layers, inter, heads, kv, vocab, tied)), **extra)


_QWEN25_15B = _cfg("qwen2", 1536, 28, 8960, 12, 2, 151936, True)
_QWEN25_05B = _cfg("qwen2", 896, 24, 4864, 14, 2, 151936, True)
_SMOLLM2_135M = _cfg("llama", 576, 30, 1536, 9, 3, 49152, True, head_dim=64)
KNOWN_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen2.5-Math-1.5B": _QWEN25_15B,
    "Qwen/Qwen2.5-1.5B": _QWEN25_15B,
    "Qwen/Qwen2.5-1.5B-Instruct": _QWEN25_15B,
    "Qwen/Qwen2.5-0.5B": _QWEN25_05B,
    "Qwen/Qwen2.5-0.5B-Instruct": _QWEN25_05B,
    "Qwen/Qwen2.5-Math-7B": _cfg("qwen2", 3584, 28, 18944, 28, 4, 152064, False),
    "HuggingFaceTB/SmolLM2-135M": _SMOLLM2_135M,
    "HuggingFaceTB/SmolLM2-135M-Instruct": _SMOLLM2_135M,
    "smollm2-135m": _SMOLLM2_135M,  # the pinned model (suite/pinned_models.py), before it is fetched
}
"""Config fields (Hugging Face ``config.json`` names) of known hub ids and pinned models, for
when no ``config.json`` is on this machine (offline login nodes): the bundled sweeps' models."""


@dataclass(frozen=True)
class Arch:
    """A dense Llama-family decoder, from its config fields."""

    model_type: str
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int = 0
    """0: ``hidden // heads``."""
    qkv_bias: bool = False
    qk_norm: bool = False

    @classmethod
    def from_config(cls, d: Mapping[str, Any]) -> "Arch":
        """From ``config.json`` fields; ``ValueError`` naming what is missing or unsupported."""
        mt = d.get("model_type")
        if mt not in SUPPORTED:
            raise ValueError(f"architecture '{mt}' has no parameter formula here (supported: {', '.join(SUPPORTED)})")
        missing = [k for k in ARCH_KEYS[1:7] if not isinstance(d.get(k), int)]
        if missing:
            raise ValueError(f"its config lacks {', '.join(missing)}")
        return cls(model_type=mt, hidden=d["hidden_size"], layers=d["num_hidden_layers"],
                   intermediate=d["intermediate_size"], heads=d["num_attention_heads"],
                   kv_heads=d.get("num_key_value_heads") or d["num_attention_heads"], vocab=d["vocab_size"],
                   tied=bool(d.get("tie_word_embeddings", False)), head_dim=int(d.get("head_dim") or 0),
                   qkv_bias=mt == "qwen2" or bool(d.get("attention_bias", False)), qk_norm=mt == "qwen3")

    @property
    def d(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def per_layer(self) -> int:
        h, d, q, kv = self.hidden, self.d, self.heads, self.kv_heads
        attn = h * q * d + 2 * h * kv * d + q * d * h
        attn += (q * d + 2 * kv * d) if self.qkv_bias else 0
        attn += 2 * d if self.qk_norm else 0
        return attn + 3 * h * self.intermediate + 2 * h

    @property
    def embedding(self) -> int:
        return self.vocab * self.hidden

    @property
    def trunk(self) -> int:
        """The decoder without embeddings: the layers and the final norm."""
        return self.layers * self.per_layer + self.hidden

    @property
    def params(self) -> int:
        """Stored parameters, tied embeddings once (what ``save_pretrained`` writes)."""
        return self.trunk + self.embedding * (1 if self.tied else 2)

    @property
    def flops_params(self) -> int:
        """``P`` of the FLOPs formulas (:func:`rlsuite.suite.models.non_embedding_params`): everything but
        the input embedding, plus the unembedding matmul even when tied."""
        return self.trunk + self.embedding

    @property
    def critic_params(self) -> int:
        """Trainable parameters of a separate critic (a copy of the decoder with its embedding;
        the linear value head, ``h + 1``, is left out)."""
        return self.trunk + self.embedding

    @property
    def critic_flops_params(self) -> int:
        """``P_critic`` of the FLOPs formulas (:meth:`rlsuite.suite.models.Critic.n_params`)."""
        return self.trunk


# -- model configs without weights -----------------------------------------------------
def _read_config(path: Path) -> dict:
    return json.loads(path.read_text())


def model_config(name: str) -> tuple[Optional[dict], str]:
    """``(config fields, where they came from)``, or ``(None, why not)``; never loads weights
    and never touches the network."""
    from rlsuite.suite.models import CHARS, MODELS, SPECIAL, _looks_like_hub_id, tiny_config

    if name == "tiny":
        return tiny_config(len(SPECIAL) + len(CHARS)).to_dict(), "rlsuite.suite.models.tiny_config"
    if os.path.isdir(name):
        p = Path(name) / "config.json"
        return (_read_config(p), str(p)) if p.is_file() else (None, f"the folder {name} has no config.json")
    from rlsuite.suite.pinned_models import PINNED, model_dir

    if name in PINNED:
        p = model_dir(name) / "config.json"
        if p.is_file():
            return _read_config(p), str(p)
        if name in KNOWN_CONFIGS:
            return KNOWN_CONFIGS[name], "the built-in table of known architectures (not fetched yet)"
        return None, f"pinned model '{name}' is not fetched yet and not in the table of known architectures"
    if name in MODELS:
        return None, f"registered model '{name}' has no config this dry run can read"
    if _looks_like_hub_id(name):
        cached = _hub_cached_config(name)
        if cached is not None:
            return _read_config(Path(cached)), f"{cached} (Hugging Face cache)"
        if name in KNOWN_CONFIGS:
            return KNOWN_CONFIGS[name], "the built-in table of known architectures"
        return None, (f"hub id '{name}' is not in the local Hugging Face cache nor in the table of known "
                      f"architectures (a dry run never downloads; fetch its config.json or give a local folder)")
    return None, f"'{name}' is neither a registered model, a folder nor a hub id"


def _hub_cached_config(repo_id: str) -> Optional[str]:
    try:
        from huggingface_hub import try_to_load_from_cache

        p = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - no hub library or a malformed id: not cached
        return None
    return p if isinstance(p, str) else None


_ARCHS: dict[str, tuple[Optional[Arch], str]] = {}


def model_arch(name: str) -> tuple[Optional[Arch], str]:
    """``(Arch, source)`` of a model name, or ``(None, why its sizes are unknown)``; memoized."""
    if name not in _ARCHS:
        cfg, src = model_config(name)
        if cfg is None:
            _ARCHS[name] = (None, src)
        else:
            try:
                _ARCHS[name] = (Arch.from_config(cfg), src)
            except ValueError as e:
                _ARCHS[name] = (None, f"{e} (config from {src})")
    return _ARCHS[name]


# -- per-run arithmetic ----------------------------------------------------------------
def behaviour_copies(sync: str, staleness: int, updates_per_step: int) -> int:
    """Policy copies a checkpoint holds for the behaviour policy μ (:class:`rlsuite.suite.behaviour.BehaviourSync`,
    synced after each step of ``updates_per_step`` optimizer updates): ``periodic`` re-syncs once
    the engine lags more than k updates, so it lags at a checkpoint (one stored engine copy) only
    when k ≥ the updates of a step; ``lag`` keeps the step-boundary policies back to k updates ago
    (the current one is the policy itself): ``ceil(k / updates_per_step)``."""
    if staleness <= 0:
        return 0
    if sync == "lag":
        return math.ceil(staleness / max(updates_per_step, 1))
    return 1 if staleness >= updates_per_step else 0


def checkpoint_bytes(arch: Arch, dtype: str, separate_critic: bool = False, behaviour: int = 0,
                     refreshed_ref: bool = False) -> int:
    """One checkpoint: the trainable weights and their AdamW moments, all in ``dtype``
    (``(1 + ADAM_MOMENTS)`` × bytes per trainable parameter), + ``behaviour`` policy copies + a
    refreshed reference, each in ``dtype``; tied embeddings once; no frozen reference."""
    trainable = arch.params + (arch.critic_params if separate_critic else 0)
    copies = behaviour + (1 if refreshed_ref else 0)
    return (trainable * (1 + ADAM_MOMENTS) + copies * arch.params) * DTYPE_BYTES[dtype]


def rank_memory_bytes(arch: Arch, dtype: str, trainable: int, frozen_copies: int, behaviour: int, world_size: int,
                      sharded: bool) -> int:
    """The training state one rank holds, activations excluded: the trainable parameters, their
    gradients and AdamW's 2 moments, the frozen reference / initial policy copies and the
    behaviour-history copies, all in ``dtype`` and divided by the world size under
    ``dist.shard=fsdp`` (every rank holds all of it otherwise), + the rollout engine's full copy
    of the policy (never sharded)."""
    state = (trainable * (2 + ADAM_MOMENTS) + (frozen_copies + behaviour) * arch.params) * DTYPE_BYTES[dtype]
    return state // (world_size if sharded else 1) + arch.params * DTYPE_BYTES[dtype]


def final_bytes(arch: Arch, dtype: str) -> int:
    """The final model: the policy in ``dtype``, tied embeddings once."""
    return arch.params * DTYPE_BYTES[dtype]


def run_peak_bytes(ckpt: int, final: int) -> int:
    """A run's disk at its peak: the new checkpoint beside the old one, or the final model beside
    the last checkpoint."""
    return max(2 * ckpt, ckpt + final)


def gpu_hours(flops: float, throughput: float = DEFAULT_THROUGHPUT) -> float:
    """GPU-hours of ``flops`` at ``throughput`` FLOP/s per GPU."""
    return flops / throughput / 3600.0


def planned_steps(spec) -> tuple[Optional[int], str, str]:
    """``(steps, bound, why)`` of a run's budget: bound ``=`` (exact), ``≤`` (a token, FLOP or wall-clock
    limit may stop it earlier), ``≥`` (a token/FLOP budget alone; steps filled in by :func:`plan_run`)
    or ``?`` (unknown)."""
    r, t, lim = spec.rollout, spec.train, spec.budget.limits()
    per_step = {"samples": r.prompts_per_step * r.group_size, "prompts": r.prompts_per_step,
                "updates": t.epochs * t.minibatches}
    exact = {k: math.ceil(v / per_step[k]) for k, v in lim.items() if k in per_step}
    if exact:
        k = min(exact, key=exact.get)
        other = sorted(set(lim) - set(per_step))  # these may stop the run earlier
        return exact[k], ("≤" if other else "="), f"budget.{k}={lim[k]:g}"
    if any(k in lim for k in ("gen_tokens", "train_tokens", "flops")):
        return None, "≥", "token/FLOP budget"  # resolved by plan_run, which knows the tokens
    if lim:
        return None, "?", f"budget {', '.join(lim)} (wall-clock) cannot be predicted"
    return None, "?", "the run has no budget"


def _multi_turn(task_name: str) -> bool:
    from rlsuite.tasks.base import TASKS, Task

    try:
        cls = TASKS.get(task_name)
    except Exception:  # noqa: BLE001 - an unknown task cannot reach here (resolution refused it)
        return False
    return cls.make_env is not Task.make_env


@dataclass
class RunCost:
    """The planned cost of one run; ``None`` fields are unknown (``why`` says why)."""

    samples: Optional[int]
    bound: str
    tokens_per_sample: int
    flops: Optional[float] = None
    flops_by_kind: dict[str, float] = field(default_factory=dict)
    checkpoint: Optional[int] = None
    final: Optional[int] = None
    peak: Optional[int] = None
    kept: Optional[int] = None
    gpu_hours: Optional[float] = None
    rank_memory: Optional[int] = None
    """Training state one rank holds (:func:`rank_memory_bytes`)."""
    why: str = ""


def _algo(spec):
    from rlsuite import algorithms  # noqa: F401  (registration)
    from rlsuite.algorithms.base import ALGORITHMS

    return ALGORITHMS.get(spec.algo.name)(spec.algo)


def flops_per_sample(spec, arch: Arch, tokens: int) -> dict[str, int]:
    """FLOPs of one sample of ``tokens`` tokens, by kind of pass (the trainer's formulas)."""
    from rlsuite.suite.update_plan import old_logp_from_update, update_fields

    algo = _algo(spec)
    needs, r, epochs = algo.needs, spec.rollout, spec.train.epochs
    critic = (algo.critic or spec.model.critic) if "values" in needs else None
    P, Pc = arch.flops_params, arch.critic_flops_params
    out = {"rollout": 2 * P * tokens}
    on_policy = r.staleness == 0 and r.mismatch == "none" and r.top_p == 1.0 and r.top_k == 0
    aliased = (r.old_logp == "behaviour" and on_policy and critic in (None, "separate")
               and "old_sum_pi_sq" not in needs)  # π_old's Σπ²: the scoring pass runs
    fields = update_fields(needs, algo.critic or spec.model.critic)
    from_update = r.old_logp == "recompute" and old_logp_from_update(
        spec, algo, fields, r.prompts_per_step * r.group_size)  # π_old from the update's forward: no pass
    if not (aliased or from_update):
        out["score_old"] = 2 * P * tokens
    if "ref_logp" in needs:
        out["score_ref"] = 2 * P * tokens
    if "init_logp" in needs:
        out["score_init"] = 2 * P * tokens
    out["train"] = 6 * P * tokens * epochs
    if critic == "separate":
        out["score_critic"] = 2 * Pc * tokens
        out["train_critic"] = 6 * Pc * tokens * epochs
    return out


def uses_separate_critic(spec) -> bool:
    algo = _algo(spec)
    return "values" in algo.needs and (algo.critic or spec.model.critic) == "separate"


def plan_run(spec, arch: Optional[Arch], prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
             throughput: float = DEFAULT_THROUGHPUT, why_unknown: str = "") -> RunCost:
    """The planned cost of ``spec`` (a resolved :class:`~rlsuite.suite.config.RunSpec`) on ``arch``
    (None: sizes unknown, for the reason ``why_unknown``)."""
    r = spec.rollout
    B = r.prompts_per_step * r.group_size
    prompt = prompt_tokens + ((r.max_turns - 1) * r.max_obs_tokens if _multi_turn(spec.task.name) else 0)
    T = prompt + r.max_new_tokens
    steps, bound, why = planned_steps(spec)
    kinds = flops_per_sample(spec, arch, T) if arch is not None else None
    if steps is None and bound == "≥" and arch is not None:
        lim, epochs = spec.budget.limits(), spec.train.epochs
        per_step = {"gen_tokens": B * r.max_new_tokens, "train_tokens": B * T * epochs,
                    "flops": B * sum(kinds.values())}
        steps = min(math.ceil(v / per_step[k]) for k, v in lim.items() if k in per_step)
    samples = steps * B if steps is not None else None
    cost = RunCost(samples=samples, bound=bound, tokens_per_sample=T, why=why if samples is None else "")
    if arch is None:
        cost.why = why_unknown or "model sizes unknown"
        return cost
    dtype = spec.model.dtype
    algo = _algo(spec)
    per_step = spec.train.epochs * spec.train.minibatches  # optimizer updates per step
    every = getattr(spec.algo, "refresh_every", None)
    refreshed = "ref_logp" in algo.needs and every is not None and (steps is None or steps * per_step >= every)
    copies = behaviour_copies(r.sync, r.staleness, per_step)
    cost.checkpoint = checkpoint_bytes(arch, dtype, uses_separate_critic(spec), copies, refreshed)
    cost.final = final_bytes(arch, dtype)
    d = spec.dist
    frozen = int("ref_logp" in algo.needs) + int("init_logp" in algo.needs)
    cost.rank_memory = rank_memory_bytes(arch, dtype, arch.params + (arch.critic_params if uses_separate_critic(spec)
                                                                     else 0), frozen, copies,
                                         d.world_size, d.shard != "none")
    cost.peak = run_peak_bytes(cost.checkpoint, cost.final)
    cost.kept = cost.final + (cost.checkpoint if spec.train.keep_checkpoint else 0)
    if samples is not None:
        cost.flops_by_kind = {k: float(v * samples) for k, v in kinds.items()}
        cost.flops = float(sum(cost.flops_by_kind.values()))
        cost.gpu_hours = gpu_hours(cost.flops, throughput)
    return cost


# -- the dry-run table -----------------------------------------------------------------
def fmt_bytes(n: Optional[float]) -> str:
    """``1.25GiB``-style (binary units); ``unknown`` for None."""
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.2f}{unit}"
        n /= 1024.0
    raise AssertionError  # pragma: no cover


def fmt_sci(x: Optional[float]) -> str:
    """``1.23e18``-style; ``unknown`` for None."""
    if x is None:
        return "unknown"
    if x == 0:
        return "0"
    m, e = f"{x:.2e}".split("e")
    return f"{m}e{int(e)}"


def fmt_hours(h: Optional[float]) -> str:
    return "unknown" if h is None else (f"{h:.3g}" if h < 100 else f"{h:,.0f}")


def run_columns(c: RunCost) -> str:
    """The cost columns of one run row (tab-separated ``key=value``)."""
    s = "unknown" if c.samples is None else (f"{c.samples}" if c.bound == "=" else f"{c.bound}{c.samples}")
    return "\t".join([f"samples={s}", f"flops={fmt_sci(c.flops)}", f"ckpt={fmt_bytes(c.checkpoint)}",
                      f"final={fmt_bytes(c.final)}", f"gpu_h={fmt_hours(c.gpu_hours)}",
                      f"mem_rank={fmt_bytes(c.rank_memory)}"])


def sweep_totals(costs: list[RunCost], concurrency: int) -> dict[str, Any]:
    """Totals over the runs of known size. ``peak`` bounds the sweep's disk: every run's kept
    bytes plus, for the ``concurrency`` runs with the largest extra, their mid-run extra
    (``peak − kept``); ``kept`` is what stays after every run completed."""
    known = [c for c in costs if c.kept is not None]
    extra = sorted((c.peak - c.kept for c in known), reverse=True)
    with_flops = [c for c in costs if c.flops is not None]
    return {"runs": len(costs), "unknown": len(costs) - len(with_flops),
            "samples": sum(c.samples for c in costs if c.samples is not None),
            "flops": sum(c.flops for c in with_flops), "gpu_hours": sum(c.gpu_hours for c in with_flops),
            "kept": sum(c.kept for c in known), "kept_all_checkpoints": sum(c.final + c.checkpoint for c in known),
            "peak": sum(c.kept for c in known) + sum(extra[:max(concurrency, 1)]),
            "concurrency": min(max(concurrency, 1), len(known)) if known else 0}


def dry_run_lines(runs: Iterable, concurrency: int, concurrency_from: str,
                  throughput: float = DEFAULT_THROUGHPUT, prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> list[str]:
    """The ``--dry-run`` output: assumption lines (``# ...``), one row per run (the run id, its
    labels, then :func:`run_columns`) and the ``# total:`` line last."""
    runs = list(runs)
    costs, head = [], []
    for name in dict.fromkeys(r.model.name for r in runs):
        arch, src = model_arch(name)
        if arch is None:
            head.append(f"# model {name}: sizes unknown: {src}; its runs print 'unknown' FLOPs, disk and GPU-hours")
        else:
            head.append(f"# model {name}: {arch.model_type}, {arch.params:,} parameters "
                        f"({'tied' if arch.tied else 'untied'} embeddings; P = {arch.flops_params:,} in the FLOPs "
                        f"formulas), from {src}; no weights read")
    tp = "default: " + THROUGHPUT_NOTE if throughput == DEFAULT_THROUGHPUT else "--throughput"
    head += [f"# samples: from each run's budget (steps × prompts_per_step × group_size); FLOPs: the trainer's "
             f"2·P·T rollout and scoring passes + 6·P·T·epochs training per sample, T = {prompt_tokens} prompt tokens "
             f"(an assumption: --prompt-tokens; multi-turn tasks add (max_turns − 1) × max_obs_tokens) + "
             f"rollout.max_new_tokens (an upper bound: every completion at the cap); evals excluded",
             "# disk: ckpt = trainable models + AdamW's 2 moments per trainable parameter, in model.dtype (as "
             "torch keeps them), + lagging behaviour-policy copies (rollout.staleness > 0) and a refreshed "
             "reference; final = the policy in model.dtype; tied embeddings once, no frozen reference",
             f"# GPU-hours at {fmt_sci(throughput)} FLOP/s per GPU ({tp}; --throughput FLOP/s)",
             "# mem_rank: training state per rank (activations excluded): trainable weights + gradients + AdamW's 2 "
             "moments + frozen reference/initial copies + behaviour history, in model.dtype, ÷ dist.world_size "
             "under dist.shard=fsdp, + the rollout engine's full policy copy"]
    rows = []
    for r in runs:
        arch, src = model_arch(r.model.name)
        c = plan_run(r, arch, prompt_tokens, throughput, why_unknown=src)
        costs.append(c)
        rows.append(f"{r.run_id}\ttask={r.task.name}\talgo={r.algo.name}\tseed={r.seed}\tvariant={r.variant or '-'}"
                    f"\t{run_columns(c)}")
    t = sweep_totals(costs, concurrency)
    unk = f" ({t['unknown']} run(s) of unknown size left out)" if t["unknown"] else ""
    total = (f"# total: {t['runs']} runs\tsamples={t['samples']}\tflops={fmt_sci(t['flops'])}\t"
             f"gpu_h={fmt_hours(t['gpu_hours'])}{unk}\tdisk peak while running ≤ {fmt_bytes(t['peak'])} (every "
             f"final model + {t['concurrency']} runs at once mid-checkpoint, {concurrency_from})\tkept after "
             f"completion {fmt_bytes(t['kept'])} (checkpoints deleted; with train.keep_checkpoint=true "
             f"{fmt_bytes(t['kept_all_checkpoints'])})")
    return head + rows + [total]
