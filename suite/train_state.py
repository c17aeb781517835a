"""The training state: what a step changes and a checkpoint keeps, with one owner.

:class:`TrainState` holds the trained models (the policy; the critic where the entry needs
values) and their AdamW optimizer, the frozen reference π_ref and initial policy, the rollout
engine and the behaviour policy μ it samples with (:class:`rlsuite.suite.behaviour.BehaviourSync`:
staleness, the lag history, the mismatch knob), the algorithm entry (its ``state_dict`` is
checkpointed), the budget, the loop's counters (step, data cursor, evals done, last entropy),
the KL coefficient β (:mod:`rlsuite.suite.kl_control`), the reference anchors of
``ref_anchor`` entries, and the state of the options every entry shares: the retired prompts of
the curriculum (:class:`rlsuite.suite.curriculum.Curriculum`) and the entropy bonus's coefficient
(:class:`rlsuite.suite.loss_options.EntropyControl`), checkpointed as :meth:`TrainState.options_state`.

The trainer (:mod:`rlsuite.suite.trainer`) owns it and runs the loop over it; checkpointing
(:func:`rlsuite.suite.checkpoint.save`, :func:`rlsuite.suite.checkpoint.resume`) and the parallel
modes (:mod:`rlsuite.suite.parallel`, :mod:`rlsuite.suite.sharding`) take it instead of the
trainer. It knows the critic kinds in one place (:attr:`TrainState.value_head`,
:attr:`TrainState.separate_critic`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Optional

import torch
from torch import nn

from rlsuite.suite.budget import Budget
from rlsuite.suite.checkpoint import state_sha256
from rlsuite.suite.curriculum import Curriculum
from rlsuite.suite.loss_options import EntropyControl
from rlsuite.suite.lora import BaseView, hf_state, is_lora, plain
from rlsuite.suite.models import Critic
from rlsuite.suite.prompts import seed_for


@dataclasses.dataclass(eq=False)
class TrainState:
    """The models, optimizer, behaviour policy, counters and KL coefficient of one run."""

    model: nn.Module
    """The policy π (trained)."""
    engine: Any
    """The rollout engine (:class:`rlsuite.suite.engines.RolloutEngine`); its weights are μ's."""
    behaviour: Any
    """When and with what the engine's weights catch up (:class:`rlsuite.suite.behaviour.BehaviourSync`)."""
    algo: Any
    """The algorithm entry (:class:`rlsuite.algorithms.base.Algorithm`); its state is checkpointed."""
    budget: Budget
    ref: Optional[nn.Module] = None
    """π_ref, frozen: the base until an algorithm refreshes it (:meth:`refresh_reference`)."""
    init: Optional[nn.Module] = None
    """The initial policy, frozen (KL-to-initial metrics); rebuilt identically on resume."""
    teacher: Optional[nn.Module] = None
    """The distillation teacher π_T, frozen (``teacher_logp`` in ``needs``; :func:`rlsuite.suite.distill.load_teacher`,
    set by the trainer); reloaded from ``algo.teacher`` on resume, never checkpointed."""
    critic: Optional[Critic] = None
    opt: Optional[torch.optim.Optimizer] = None
    """AdamW over the policy and the critic (built after the parallel mode lays the models out)."""
    step_no: int = 0
    cursor: int = 0
    """Prompts drawn so far from the seeded passes over the train split."""
    evals_done: int = 0
    entropy: Optional[float] = None
    """The last update's mean entropy (``Context.entropy``)."""
    kl_coef: float = 0.0
    """β of the KL term; moves with ``algo.kl_target`` (:func:`rlsuite.suite.kl_control.adapt`)."""
    ref_refreshed: bool = False
    """π_ref is no longer the base (checkpoints keep it)."""
    ref_anchors: dict[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """``ref_anchor`` entries: the base's samples by train index (filled by the rollout stage)."""
    base_sha: Optional[str] = dataclasses.field(default=None, repr=False)
    """sha256 of the base π_ref / π_init copy (:meth:`base_sha256`, computed when first needed)."""
    curriculum: Optional[Curriculum] = None
    """The group filter and retired prompts (``rollout.filter_zero_variance``, ``rollout.retire_pass_rate``)."""
    entropy_control: Optional[EntropyControl] = None
    """The entropy bonus's coefficient (``loss.entropy_coef``, ``loss.entropy_target``)."""

    @classmethod
    def build(cls, spec, algo, model: nn.Module, engine, behaviour, device: torch.device,
              n_train: int = 0) -> "TrainState":
        """The state at step 0: frozen copies of the base for π_ref / π_init where the entry needs
        them, and a critic whose initial weights depend on the seed only (``n_train``: the train
        split's size, for the curriculum)."""
        needs = algo.needs
        frozen = lambda: copy.deepcopy(model).eval().requires_grad_(False)  # noqa: E731
        if is_lora(model):  # the policy with its adapters disabled: the frozen base, shared (suite/lora.py)
            frozen = lambda: BaseView(model)  # noqa: E731
        st = cls(model=model, engine=engine, behaviour=behaviour, algo=algo, budget=Budget(spec.budget.limits()),
                 ref=frozen() if "ref_logp" in needs else None, init=frozen() if "init_logp" in needs else None,
                 kl_coef=float(algo.cfg.kl_coef), curriculum=Curriculum(spec.rollout, n_train),
                 entropy_control=EntropyControl(spec.loss))
        if "values" in needs:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed_for(spec.seed, "critic") % 2**63)
                st.critic = Critic(model, algo.critic or spec.model.critic).to(device)
        return st

    def build_optimizer(self, optim, fused: bool) -> list[float]:
        """AdamW over the policy's trainable parameters (``optim.lr``) and the critic's
        (``optim.critic_lr``); returns the groups' base learning rates (the schedule scales them)."""
        o = optim
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": o.lr}]
        if self.critic is not None:
            groups.append({"params": list(self.critic.parameters()), "lr": o.critic_lr})
        self.opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                     weight_decay=o.weight_decay, **({"fused": True} if fused else {}))
        return [g["lr"] for g in self.opt.param_groups]

    # -- the shared options' state (checkpointed) ---------------------------------------
    def options_state(self) -> dict[str, Any]:
        """The state of the options every entry shares, for the checkpoint (empty when none has any)."""
        out = {"curriculum": self.curriculum.state_dict(), "entropy": self.entropy_control.state_dict()}
        return {k: v for k, v in out.items() if v}

    def load_options_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`options_state` (a checkpoint without it: the options' initial state)."""
        self.curriculum.load_state_dict(state.get("curriculum", {}))
        self.entropy_control.load_state_dict(state.get("entropy", {}))

    # -- the critic kinds, in one place -------------------------------------------------
    @property
    def value_head(self) -> Optional[nn.Module]:
        """The head the actor's forward computes values with (a critic other than ``separate``)."""
        return self.critic.head if self.critic is not None and self.critic.mode != "separate" else None

    @property
    def separate_critic(self) -> Optional[Critic]:
        """The critic when it is a model of its own (``separate``: its own forward, its own FLOPs)."""
        return self.critic if self.critic is not None and self.critic.mode == "separate" else None

    # -- the reference and the base ----------------------------------------------------
    def refresh_reference(self) -> None:
        """Copy the current policy into π_ref (algorithms with periodic reference refresh)."""
        if self.ref is None:
            raise RuntimeError("refresh_reference() needs a reference model: declare 'ref_logp' in needs")
        if isinstance(self.ref, BaseView):  # LoRA: π_ref leaves the shared base, a merged copy of its own
            self.ref = plain(self.model)  # a frozen merged copy of its own
        else:
            self.ref.load_state_dict(hf_state(self.model))
        self.ref_refreshed = True

    def base_copy(self) -> Optional[nn.Module]:
        """A frozen copy of the base the run started from (π_init, or π_ref before any refresh)."""
        if self.init is not None:
            return self.init
        if is_lora(self.model):  # the base under the adapters (a LoRA checkpoint holds the adapters only)
            return BaseView(self.model)
        return self.ref if self.ref is not None and not self.ref_refreshed else None

    def base_sha256(self) -> Optional[str]:
        """sha256 of the base's weights (a resume whose base loads other weights is refused)."""
        if self.base_sha is None and self.base_copy() is not None:
            self.base_sha = state_sha256(self.base_copy().state_dict())
        return self.base_sha


__all__ = ["TrainState"]
