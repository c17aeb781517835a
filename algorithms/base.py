"""The algorithm entry: a frozen config of the paper's knobs plus hooks with fixed signatures.

An algorithm is a subclass of :class:`Algorithm` registered in ``ALGORITHMS`` (see
``algorithms/grpo.py`` for a complete example). The shared trainer calls the hooks in this
order every step, and never branches on the algorithm's name:

==========================  ==========================================================
hook                        contract (defaults in this class)
==========================  ==========================================================
``needs``                   set of extra inputs the entry requires (:data:`NEEDS`);
                            the trainer computes only those and refuses at start (exit 2)
                            what the chosen backends cannot produce
``sample_prompts(ctx)``     → list of train-split indices for this step, or None for the
                            trainer's seeded uniform draw of ``rollout.prompts_per_step``
``before_rollout(ctx)``     → list of :class:`Behaviour` (weights + the sample rows each
                            one draws), or None for the current policy for every sample
``rewards(group, ctx)``     → ``[G]`` rewards of one prompt group (default: the task grade)
``replay(ctx)``             → a :class:`~suite.types.Rollout` of stale rows to train on again
                            this step (appended after the fresh rows with their group ids
                            shifted; their μ log-probs and policy versions stay their own, so
                            π_old is re-scored for them), or None
``revise(groups, ctx)``     → a :class:`Revision` (a second, feedback-conditioned round of
                            sampling: which first answer of each group the task's verifier
                            feedback is about, and which rows enter the batch), or None
``advantages(batch, ctx)``  → :class:`AdvOut` with ``adv [B, T]`` (and ``returns``)
``filter(batch, ctx)``      → ``[B]`` bool keep-mask or None; the trainer's refill loop
                            draws more batches (bounded by ``rollout.max_refill_tries``);
                            discarded samples are charged to the budget
``loss(fwd, batch, ctx)``   → (per-token loss ``[B, T]``, metrics); the trainer aggregates
                            with ``cfg.aggregation`` using a global normaliser
``value_loss(fwd, batch,    → (per-token value loss ``[B, T]``, metrics); only called when
ctx)``                      ``"values"`` is in ``needs``
``after_update(ctx)``       called after every optimizer update (e.g. reference refresh)
``state_dict()`` /          algorithm state saved in checkpoints
``load_state_dict(d)``
==========================  ==========================================================

KL to a reference policy is generic: every config carries ``kl_coef``, ``kl_estimator``
and ``kl_where``; the trainer loads π_ref only when ``kl_coef > 0`` and applies the term as a
loss (``+β·k`` per token, aggregated with the rest) or in the reward (``r_t −= β·k`` on
policy tokens, with π_old's log-probs; sequence rewards get ``−β·Σ_t k``).

Algorithm configs hold only the algorithm's knobs with paper defaults; learning rates, G,
batch and lengths come from the task/model preset (:mod:`suite.config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Optional, Sequence

import torch
from torch import Tensor

from suite.aggregation import AggMode
from suite.registry import Registry
from suite.types import Batch, Forward, Rollout

#: Inputs an algorithm may declare in ``needs``. Policy-forward outputs: ``entropy``,
#: ``hidden``, ``attn_stat``; batch fields: ``old_logp`` (π_old scoring pass), ``values``
#: (a critic), ``topk`` (behaviour top-K log-probs from the rollout), ``behav_attn_stat``
#: (the sampler's attention statistic), ``behav_hidden``, ``anchor`` (a greedy decode of the
#: current policy per prompt, given to ``rewards`` as ``Group.anchors``; charged to the budget).
#: ``ref_logp`` is implied by ``kl_coef > 0`` and may also be declared; ``init_logp``: log-probs
#: under a frozen copy of the initial policy (for KL-to-initial metrics when π_ref is refreshed).
NEEDS = frozenset({"entropy", "hidden", "attn_stat", "old_logp", "ref_logp", "init_logp", "values", "topk",
                   "behav_attn_stat", "behav_hidden", "anchor"})

Fidelity = Literal["code", "paper", "abstract", "description"]


@dataclass(frozen=True, kw_only=True)
class AlgoConfig:
    """Fields every algorithm has (the generic KL term and the aggregation mode)."""

    name: str = ""
    """Registry name of the algorithm (set by the registry; not a knob)."""
    aggregation: AggMode = "token-mean"
    """Loss aggregation mode (suite.aggregation); each entry sets its paper's default."""
    kl_coef: float = 0.0
    """β of the KL to the reference policy (0 = no reference model is loaded)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator (suite.ops.kl_estimate)."""
    kl_where: Literal["loss", "reward"] = "loss"
    """Apply the KL as a loss term or subtract it from the reward."""

    ranges: ClassVar[dict[str, str]] = {"kl_coef": "[0, inf)"}
    """The declared range of every numeric field (``int``/``float``, also inside ``Optional`` and
    ``tuple``): field name → interval, e.g. ``{"clip_eps_low": "[0, 1]", "tis_cap": "(0, inf)"}``
    (:class:`suite.config.Range`; ``inf`` = unbounded). A class-level mapping, not a dataclass
    field, so it is in no run id. Each subclass declares its own numeric fields (and any whose
    range it changes); the mappings are merged over the MRO. Resolution (``--set``, ``--config``,
    sweeps) refuses a value outside its range with exit 2 (``algo.<field> must be …, got v``); NaN
    and ±inf are refused for every float field; ``None`` of an ``Optional`` field is always valid.
    ``__post_init__`` keeps only cross-field checks. Every range must admit the default, the
    ``tune_knob`` values and every value of the bundled sweeps; ``tests/contract/test_config_ranges.py``
    checks that every numeric field of every entry has one and tries values outside it."""

    def __post_init__(self) -> None:
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be ≥ 0, got {self.kl_coef}")


@dataclass(frozen=True)
class Behaviour:
    """A behaviour policy for part of a rollout batch (``before_rollout``).

    ``state``: parameter tensors to load into the rollout engine (a full or partial state
    dict of the policy), or None for the engine's current weights; ``rows``: the sample rows
    ``[0, B)`` it generates. ``id`` ends up in ``Rollout.behaviour_id``.
    """

    id: int
    rows: tuple[int, ...]
    state: Optional[Mapping[str, Tensor]] = None


#: Row kinds of a batch with a feedback round (``Rollout.stage``): the first group on the
#: prompt, the feedback-conditioned group on prompt + answer + feedback, and the latter's
#: responses re-placed after the original prompt (their μ is still the feedback-conditioned one).
STAGES = ("first", "feedback", "recontext")


@dataclass(frozen=True)
class Revision:
    """A second, feedback-conditioned round of sampling (``revise``; FBOS-RL).

    ``sources``: one entry per prompt group — the index ``0..G−1`` of the first-round completion
    the task's verifier feedback (``Task.feedback``) is about, or −1 for no second group on that
    prompt. For each source the trainer builds ``Task.revision_prompt(example, completion,
    feedback)``, samples G completions from it (charged to the budget like any rollout),
    grades them on the original example, and puts the rows named in ``stages`` (:data:`STAGES`)
    into the batch. ``detail``: the feedback's detail, passed to ``Task.feedback``.
    """

    sources: tuple[int, ...]
    stages: frozenset[str] = frozenset(STAGES)
    detail: str = "full"

    def __post_init__(self) -> None:
        if not self.stages or set(self.stages) - set(STAGES):
            raise ValueError(f"Revision.stages must be a non-empty subset of {STAGES}, got {sorted(self.stages)}")


@dataclass(frozen=True)
class Group:
    """One prompt's completions, given to ``rewards(group, ctx)``.

    ``scores [G]`` are the task's grades; ``completions`` the decoded texts; ``example`` the
    task's example object; ``parsed`` the task's parsed answers; ``lengths [G]`` policy tokens
    per completion; ``truncated [G]`` bool, hit ``max_new_tokens`` without EOS;
    ``grade(text) → float``: the task's own grader for this prompt (task-aware judges use it, so
    ``algorithms/`` imports no task); ``anchors``: reference responses for this prompt (the
    current policy's greedy decode), present when the entry ``needs`` ``"anchor"``.
    """

    prompt: str
    example: Any
    completions: tuple[str, ...]
    parsed: tuple[Optional[str], ...]
    scores: Tensor
    lengths: Optional[Tensor] = None
    truncated: Optional[Tensor] = None
    grade: Optional[Callable[[str], float]] = None
    anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdvOut:
    """Output of ``advantages``: ``adv [B, T]`` (0 off the loss mask), ``returns [B, T]`` for
    critics, and metrics. ``extras`` are stored into ``batch.extras`` for the loss.
    ``loss_mask [B, T]``, when given, replaces the batch's loss mask for the update (the
    aggregation normaliser included) — e.g. DAPO's overlong filtering drops truncated samples."""

    adv: Tensor
    returns: Optional[Tensor] = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Tensor] = field(default_factory=dict)
    loss_mask: Optional[Tensor] = None


@dataclass
class Context:
    """What hooks may read, and the one thing they may do (``charge`` extra compute).

    step: the current step (1-based; 0 before training); progress: ∈ [0, 1] of the binding
    budget; entropy: the last measured token-mean policy entropy (None before the first
    update); max_new_tokens, group_size, prompts_per_step: from the run spec; n_train: size
    of the task's train split; seed: the run seed; policy: the trained model (read-only by
    convention; ``before_rollout`` may read its parameters); generator(stream): a fresh
    ``torch.Generator`` seeded by (seed, stream, step); charge(kind, tokens, params): add
    ``2·params·tokens`` FLOPs of an extra pass (``kind`` names it in the metrics);
    refresh_reference(): copy the current policy into π_ref (needs ``ref_logp`` in ``needs``).
    """

    step: int
    progress: float
    entropy: Optional[float]
    max_new_tokens: int
    group_size: int
    prompts_per_step: int
    n_train: int
    seed: int
    policy: Any
    generator: Callable[[str], torch.Generator]
    charge: Callable[[str, int, int], None]
    refresh_reference: Callable[[], None] = lambda: None


class Algorithm:
    """Base class of every entry; subclasses set the metadata and override hooks."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    fidelity: ClassVar[Fidelity] = "code"
    assumptions: ClassVar[tuple[str, ...]] = ()
    switches: ClassVar[tuple[str, ...]] = ()
    """Config fields that are the paper's ablation switches."""
    group_relative: ClassVar[bool] = False
    """Advantages are zero when all rewards of a group are equal (checked by contract tests)."""
    on_policy_pg: ClassVar[bool] = True
    """With π_θ = π_old = μ the gradient equals the plain policy gradient −A·∇log π under the
    entry's aggregation (checked by contract tests)."""
    tune_knob: ClassVar[Optional[tuple[str, tuple]]] = None
    """The one algorithm knob ``rlsuite sweep tune`` grids over next to the learning rate, with
    its candidate values (None: learning rate only)."""
    inert: ClassVar[dict[str, str]] = {}
    """Config fields that deliberately change neither rewards, advantages, filter nor loss on
    their own, with the reason (the "live knobs" contract test skips them)."""
    Config: ClassVar[type[AlgoConfig]] = AlgoConfig

    def __init__(self, cfg: AlgoConfig) -> None:
        self.cfg = cfg

    # -- declarations ------------------------------------------------------------------
    @property
    def needs(self) -> frozenset[str]:
        """Extra inputs required (subset of :data:`NEEDS`); ``ref_logp`` when kl_coef > 0."""
        return frozenset({"ref_logp"}) if self.cfg.kl_coef > 0 else frozenset()

    @property
    def critic(self) -> Optional[str]:
        """Critic kind the entry requires (``head``, ``mlp_head``, ``mlp_head_detached``,
        ``separate``), or None to use ``model.critic``. Only read when ``values`` is needed."""
        return None

    @property
    def aggregation(self) -> AggMode:
        """The loss aggregation mode the trainer applies (default: ``cfg.aggregation``)."""
        return self.cfg.aggregation

    # -- hooks with defaults -----------------------------------------------------------
    def sample_prompts(self, ctx: Context) -> Optional[list[int]]:
        return None

    def before_rollout(self, ctx: Context) -> Optional[list[Behaviour]]:
        return None

    def rewards(self, group: Group, ctx: Context) -> Tensor:
        return group.scores

    def revise(self, groups: Sequence[Group], ctx: Context) -> Optional[Revision]:
        return None

    def replay(self, ctx: Context) -> Optional[Rollout]:
        return None

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        raise NotImplementedError(f"{type(self).__name__} must define advantages()")

    def filter(self, batch: Batch, ctx: Context) -> Optional[Tensor]:
        return None

    def loss(self, fwd: Forward, batch: Batch, ctx: Context) -> tuple[Tensor, dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must define loss()")

    def value_loss(self, fwd: Forward, batch: Batch, ctx: Context) -> tuple[Tensor, dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} declares 'values' but no value_loss()")

    def after_update(self, ctx: Context) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    # -- metadata for `rlsuite list` ---------------------------------------------------
    @classmethod
    def describe(cls) -> dict[str, Any]:
        cfg = cls.Config()
        fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "name"}
        return {
            "name": cls.name,
            "summary": cls.summary,
            "citation": cls.citation,
            "fidelity": cls.fidelity,
            "assumptions": list(cls.assumptions),
            "switches": {k: fields[k] for k in cls.switches},
            "needs": sorted(cls(cfg).needs),
            "defaults": fields,
        }


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", "rlsuite.algorithms")


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: register an algorithm under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    ALGORITHMS.register(cls.name, cls)
    return cls
