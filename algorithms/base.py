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
``task_problems(cfg,        (a classmethod, at resolution) → what the configuration cannot do
task)``                     with the chosen task class, one line each; refused (exit 2)
``sample_prompts(ctx)``     → list of train-split indices for this step, or None for the
                            trainer's seeded uniform draw of ``rollout.prompts_per_step``
``before_rollout(ctx)``     → list of :class:`Behaviour` (weights + the sample rows each
                            one draws), or None for the current policy for every sample
``rewards(group, ctx)``     → ``[G]`` rewards of one prompt group (default: the task grade)
``replay(ctx)``             → a :class:`~rlsuite.suite.types.Rollout` of stale rows to train on again
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
policy tokens, with π_old's log-probs; sequence rewards get ``−β·Σ_t k``); ``loss.kl_is_weight``
weights the loss term by π/π_old. The other options every entry shares (``loss.opsm_delta``,
``loss.top_entropy_quantile``, ``loss.entropy_coef``/``entropy_target``,
``rollout.filter_zero_variance``, ``rollout.retire_pass_rate``) also act around the hooks, in the
trainer (:mod:`rlsuite.suite.loss_options`, :mod:`rlsuite.suite.curriculum`): an entry needs no
code for them.

Algorithm configs hold only the algorithm's knobs with paper defaults; learning rates, G,
batch and lengths come from the task/model preset (:mod:`rlsuite.suite.config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional, Sequence

from torch import Tensor

from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.hooks import NEEDS, STAGES, AdvOut, Behaviour, Context, Group, Revision  # noqa: F401  (the hook contract, re-exported)
from rlsuite.suite.registry import Registry
from rlsuite.suite.types import Batch, Forward, Rollout

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
    kl_estimator: Literal["k1", "k2", "k3", "abs", "k1+", "k2+", "k3+", "abs+"] = "k3"
    """Per-token KL estimator (suite.ops.kl_estimate; ``+``: straight-through with k2's gradient)."""
    kl_where: Literal["loss", "reward"] = "loss"
    """Apply the KL as a loss term or subtract it from the reward."""
    kl_target: Optional[float] = None
    """Adaptive KL coefficient (Ziegler et al. 2019; verl's ``kl_ctrl.type=adaptive``): after each
    step β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·B/horizon), KL the batch's mean per-sequence
    token-mean estimate at π_old, B the step's samples; None = a fixed β (``kl_coef``)."""
    kl_horizon: int = 10000
    """The adaptive controller's horizon in samples (read only with ``kl_target``)."""
    distill_coef: float = field(default=0.0, metadata={"identity": "when_set"})
    """λ of the on-policy distillation term (:mod:`rlsuite.suite.distill`): ``+λ·ℓ_t`` per token,
    aggregated like the policy loss, with ℓ the clipped surrogate of the advantage
    ``clamp(log π_teacher − log π_θ, ±10)`` on the sampled tokens (verl 0.9.1's distillation loss;
    the entry ``opd`` is this term alone); 0 = off, no teacher loaded (in the run id only when set)."""
    teacher: str = field(default="", metadata={"identity": "when_set"})
    """The distillation teacher, read when ``distill_coef > 0`` and by ``opd``: a run folder (its
    ``final/``), a folder saved with ``save_pretrained``, a registered model (an embedded one gets the
    task's warm start when the student does) or a Hugging Face id; its tokenizer must be the
    student's. Empty: a frozen copy of the model the run starts from (in the run id only when set)."""

    ranges: ClassVar[dict[str, str]] = {"kl_coef": "[0, inf)", "kl_target": "(0, inf)", "kl_horizon": "[1, inf)",
                                        "distill_coef": "[0, inf)"}
    """The declared range of every numeric field (``int``/``float``, also inside ``Optional`` and
    ``tuple``): field name → interval, e.g. ``{"clip_eps_low": "[0, 1]", "tis_cap": "(0, inf)"}``
    (:class:`rlsuite.suite.config.Range`; ``inf`` = unbounded). A class-level mapping, not a dataclass
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
    not_group_relative: ClassVar[str] = ""
    """Why an entry's advantages are *not* a function of its group's rewards alone (a critic, a
    batch baseline, a per-token shaping term), in one line; required exactly when the entry at its
    defaults is not ``group_relative``: ``tests/contract/test_advantage_normalisers.py`` checks that
    the two agree for every registered entry and prints this reason beside its exemption."""
    on_policy_pg: ClassVar[bool] = True
    """With π_θ = π_old = μ the gradient equals the plain policy gradient −A·∇log π under the
    entry's aggregation (checked by contract tests)."""
    tune_knob: ClassVar[Optional[tuple[str, tuple]]] = None
    """The one algorithm knob ``rlsuite sweep tune`` grids over next to the learning rate, with
    its candidate values (None: learning rate only); ``"a+b"`` sets fields ``a`` and ``b`` to each
    value (both clip bounds at once: ``"clip_eps_low+clip_eps_high"``)."""
    own_mismatch_weight: ClassVar[str] = ""
    """How the entry itself weights or masks by π/μ (the engine's μ), when it does: then the
    trainer-level correction ``loss.is_correction`` is refused for it (the two would weight twice)."""
    old_logp_before_update: ClassVar[bool] = False
    """``advantages`` or ``filter`` read ``batch.old_logp`` (π_old) on freshly sampled rows (on-policy
    or from a lagging engine). When False (most entries), a step whose update is one forward of the
    whole batch at the weights before the update (one epoch, one minibatch, one micro-batch) takes
    π_old from that forward instead of a scoring pass of its own: the same tensor, computed once
    (``Scorer.from_update``, :mod:`rlsuite.suite.scoring`). Rows a ``replay`` hook brings back always
    get the scoring pass. A contract test checks every False entry: its advantages and filter are the
    same with ``old_logp`` absent. An entry whose reading depends on its config overrides it with a
    property (OTB's ``energy``)."""
    inert: ClassVar[dict[str, str]] = {}
    """Config fields that deliberately change neither rewards, advantages, filter nor loss on
    their own, with the reason (the "live knobs" contract test skips them)."""
    Config: ClassVar[type[AlgoConfig]] = AlgoConfig

    def __init__(self, cfg: AlgoConfig) -> None:
        self.cfg = cfg

    # -- declarations ------------------------------------------------------------------
    @property
    def needs(self) -> frozenset[str]:
        """Extra inputs required (subset of :data:`NEEDS`); ``ref_logp`` when kl_coef > 0,
        ``teacher_logp`` when distill_coef > 0."""
        return (frozenset({"ref_logp"}) if self.cfg.kl_coef > 0 else frozenset()) | (
            frozenset({"teacher_logp"}) if self.cfg.distill_coef > 0 else frozenset())

    @property
    def anchors_per_prompt(self) -> int:
        """Responses per prompt the trainer samples from the frozen base when ``needs`` holds
        ``ref_anchor`` (read only then)."""
        return 1

    @property
    def critic(self) -> Optional[str]:
        """Critic kind the entry requires (``head``, ``mlp_head``, ``mlp_head_detached``,
        ``separate``), or None to use ``model.critic``. Only read when ``values`` is needed."""
        return None

    @property
    def aggregation(self) -> AggMode:
        """The loss aggregation mode the trainer applies (default: ``cfg.aggregation``)."""
        return self.cfg.aggregation

    @classmethod
    def task_problems(cls, cfg: AlgoConfig, task: type) -> list[str]:
        """What this configuration cannot do with the task class ``task`` (one line each, naming the
        field and the valid options), e.g. reward components the task's grades do not carry;
        resolution refuses them (exit 2, nothing written). Default: nothing."""
        return []

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
        """``adv [B, T]`` (and ``returns``) of a batch: per sequence broadcast to its tokens, per token,
        or **per turn** (the turn-level slot, for multi-turn tasks): a row is one whole episode,
        ``batch.turn_id [B, T]`` names the turn of every token (observations carry the turn they
        follow and are off the loss mask) and ``batch.turn_states[b][k]`` the hashable environment
        state turn ``k`` acted in (``Environment.state()``; None where the task exposes none).
        An estimator builds per-turn values ``[B, N]`` and maps them onto the tokens with
        :func:`rlsuite.suite.ops.turns_to_tokens` (:func:`~rlsuite.suite.ops.turn_counts`,
        :func:`~rlsuite.suite.ops.discounted_turn_returns`); GiGPO (``algorithms/gigpo.py``) is the first."""
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
