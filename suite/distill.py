"""On-policy distillation: a frozen teacher π_T scores the tokens the student π_θ sampled, and the
student is trained on the per-token reverse KL between the two (the entry ``opd``, and the term
``algo.distill_coef`` that any other entry adds to its own objective).

The definition (the one the peers share):

* the per-token reverse-KL sample on a sampled token ``y_t`` is ``k1_t = log π_θ(y_t) − log π_T(y_t)``
  (an estimate of KL(π_θ ‖ π_T) at that position);
* its negative is a per-token advantage, ``A_t = clamp(log π_T(y_t) − sg(log π_θ(y_t)), ±c)`` (``sg``:
  no gradient), taken at the log-probs of the forward being trained (the current π_θ);
* the loss is the policy-gradient surrogate of that advantage: verl's vanilla PPO loss against
  π_old (ratio clipped to ``1 ± ε``, dual clip 3 for A < 0), per token, aggregated like every other
  loss of the entry. On policy its gradient is ``−Σ_t A_t ∇log π_θ(y_t) = Σ_t (log π_θ − log π_T)(y_t)
  ∇log π_θ(y_t)``: the per-token (no future tokens) reverse-KL gradient.

Checked against verl 0.9.1 (``pip install verl==0.9.1``; ``verl/trainer/distillation/losses.py``
``distillation_loss`` with ``use_policy_gradient=True`` and ``loss_mode="k1"``: advantages
``−kl_penalty(log_probs, teacher_logprobs, "k1").detach()`` from the model output's current
log-probs, clamped to ``±loss_max_clamp`` = 10, through ``compute_policy_loss_vanilla`` with
``clip_ratio`` 0.2 and ``clip_ratio_c`` 3.0; ``distillation_ppo_loss`` adds it to the task's
policy loss times ``distillation_loss_coef`` when ``use_task_rewards``, alone otherwise) and
prime-rl 559b447 (``src/prime_rl/trainer/rl/loss.py`` ``ref_kl_loss_fn``: per token
``−(ref_logprobs − trainer_logprobs).detach()·π_θ/μ``, the teacher's log-probs shipped as
``ref_logprobs`` by ``orchestrator/algo/opd.py``; its trust region differs: tokens whose probability
fell more than 0.2 below μ's are dropped and ``1e-3·(log π_θ/μ)²`` is added; no clamp). slime
624b824 (``slime/backends/megatron_utils/loss.py`` ``apply_opd_kl_to_advantages``) adds the same
``−coef·(log π_old − log π_T)`` to the advantages of any estimator (π_old's log-probs, the current
ones on the first update of an on-policy step). Here the term is verl's.

The teacher (``algo.teacher``): a run folder (its ``final/``), a folder saved with
``save_pretrained``, a registered model (``rlsuite models``; an embedded one gets the task's warm
start when the student does) or a Hugging Face id; empty: a frozen copy of the model the run
starts from (its warm-started base), which makes the term a pull toward the base. It is loaded
once, frozen, and scored like the reference policy (:mod:`rlsuite.suite.scoring`, ``teacher_logp``;
FLOPs charged as ``score_teacher``). Its tokenizer must be the student's (the same token → id map):
the teacher scores the student's token ids, so anything else is refused at start (exit 2).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor, nn

from rlsuite.suite.errors import BadInput
from rlsuite.suite.ops import clipped_surrogate, masked_mean

CLIP_EPS = 0.2
"""ε of the term's clipped ratio (verl 0.9.1 ``DistillationLossConfig.clip_ratio``)."""
DUAL_CLIP = 3.0
"""Dual-clip bound for A < 0 (verl's ``clip_ratio_c`` default, read by ``compute_policy_loss_vanilla``)."""
ADV_CLAMP = 10.0
"""|A_t| bound (verl 0.9.1 ``DistillationLossConfig.loss_max_clamp``)."""


def reverse_kl_advantage(logp: Tensor, teacher_logp: Tensor, mask: Tensor,
                         clamp: Optional[float] = ADV_CLAMP) -> Tensor:
    """The distillation advantage ``A_t = clamp(log π_T − log π_θ, ±clamp)`` on policy tokens, without
    gradient. Shapes: logp, teacher_logp, mask [B, T] → [B, T] (0 off the mask); ``clamp`` None: no bound."""
    a = teacher_logp - logp.detach()
    if clamp is not None:
        a = a.clamp(-clamp, clamp)
    return a * mask


def distill_loss(logp: Tensor, old_logp: Tensor, teacher_logp: Tensor, mask: Tensor, clip_eps: float = CLIP_EPS,
                 clamp: Optional[float] = ADV_CLAMP) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token distillation loss: the clipped surrogate (ratio π_θ/π_old, ``1 ± clip_eps``, dual clip
    :data:`DUAL_CLIP`) of :func:`reverse_kl_advantage` at ``logp``. Shapes: logp, old_logp,
    teacher_logp, mask [B, T] → loss [B, T] (0 off the mask) and the surrogate's ``stats/*`` metrics
    plus ``distill/reverse_kl`` (masked mean of ``log π_θ − log π_T``, the k1 estimate of
    KL(π_θ ‖ π_T)) and ``distill/adv_clamped_frac`` (tokens whose advantage hit the clamp)."""
    adv = reverse_kl_advantage(logp, teacher_logp, mask, clamp)
    loss, m = clipped_surrogate(logp, old_logp, adv, mask, clip_eps, clip_eps, DUAL_CLIP)
    with torch.no_grad():
        k1 = logp.detach() - teacher_logp
        m["distill/reverse_kl"] = masked_mean(k1, mask)
        hit = (k1.abs() > clamp).float() if clamp is not None else torch.zeros_like(k1)
        m["distill/adv_clamped_frac"] = masked_mean(hit, mask)
    return loss, m


def loss_term(cfg, w: Tensor, logp: Tensor, old_logp: Optional[Tensor], teacher_logp: Optional[Tensor],
              mask: Tensor) -> Optional[tuple[Tensor, dict[str, Tensor]]]:
    """The trainer's ``algo.distill_coef`` term: ``coef · Σ w·ℓ_t`` (ℓ from :func:`distill_loss` with
    verl's ε, dual clip and clamp; ``w`` the entry's aggregation weights), or None when the coefficient
    is 0. Metrics under ``distill/`` (the surrogate's own ``stats/*`` renamed, so the entry's stay its own).
    Shapes: w, logp, old_logp, teacher_logp, mask [B, T] → a scalar."""
    if not getattr(cfg, "distill_coef", 0.0) or teacher_logp is None:
        return None
    loss_tok, m = distill_loss(logp, old_logp if old_logp is not None else logp.detach(), teacher_logp, mask)
    out = {k.replace("stats/", "distill/"): v for k, v in m.items()}
    return cfg.distill_coef * (w * loss_tok).sum(), out


# -- the teacher ---------------------------------------------------------------------------

def teacher_source(name: str) -> str:
    """Where ``algo.teacher`` loads from: a run folder's ``final/`` (given the run folder or
    ``final/`` itself), any other folder as given, else the name (a registered model or a hub id)."""
    p = Path(name)
    if p.is_dir() and (p / "final").is_dir() and not (p / "config.json").exists():
        return str(p / "final")
    return name


def teacher_name_problem(name: str) -> Optional[str]:
    """Why ``algo.teacher`` cannot name a teacher (checked at resolution, nothing loaded), or None."""
    from rlsuite.suite.models import MODELS, _looks_like_hub_id

    if not name or name in MODELS or _looks_like_hub_id(name):
        return None
    src = Path(teacher_source(name))
    if src.is_dir():
        return None if (src / "config.json").exists() else (
            f"algo.teacher={name}: the folder holds no saved model (no config.json, no final/); give a run "
            f"folder with final/, a folder saved with save_pretrained, or one of: {', '.join(MODELS.names())}")
    return (f"algo.teacher={name}: not a folder, a registered model or a Hugging Face id; give a run folder "
            f"with final/, a folder saved with save_pretrained, or one of: {', '.join(MODELS.names())}")


def tokenizer_problem(teacher_tok: Any, student_tok: Any) -> Optional[str]:
    """How the teacher's token → id map differs from the student's (None: identical)."""
    tv, sv = teacher_tok.get_vocab(), student_tok.get_vocab()
    if tv == sv:
        return None
    differ = sum(1 for k, i in sv.items() if tv.get(k) != i) + sum(1 for k in tv if k not in sv)
    return f"its tokenizer differs from the student's ({differ} of {max(len(tv), len(sv))} token ids map differently)"


def load_teacher(spec, task, student: nn.Module, student_tok: Any) -> nn.Module:
    """The frozen teacher of ``spec.algo.teacher`` (see the module docstring), on the student's device.
    ``BadInput`` (exit 2) when it cannot be loaded or its tokenizer differs from the student's."""
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.models import MODELS, load_model, load_pretrained

    name = spec.algo.teacher
    if not name:
        return copy.deepcopy(student).eval().requires_grad_(False)
    problem = teacher_name_problem(name)  # None for a registered model
    if problem:  # e.g. a resumed run whose teacher folder is on the machine that started it
        raise BadInput(problem)
    cfg = ModelConfig(name=name, dtype=spec.model.dtype, attn_implementation=spec.model.attn_implementation,
                      warm_start=spec.model.warm_start)
    if name in MODELS:
        model, tok, embedded = load_model(cfg)
        if embedded and spec.model.warm_start == "task":
            from rlsuite.suite.warmstart import warm_started

            warm_started(task, model, tok, name, torch.get_num_threads())
    elif os.path.isdir(teacher_source(name)) or "/" in name:
        model, tok = load_pretrained(teacher_source(name), cfg)
    else:
        raise BadInput(f"algo.teacher={name}: cannot be loaded")
    problem = tokenizer_problem(tok, student_tok)
    if problem is not None:
        raise BadInput(f"algo.teacher={name}: {problem}; the teacher scores the student's token ids, so it must "
                       f"share the student's tokenizer (model.name={spec.model.name}); valid: a teacher trained from "
                       f"the same base or one with the same tokenizer")
    return model.to(next(student.parameters()).device).eval().requires_grad_(False)


__all__ = ["ADV_CLAMP", "CLIP_EPS", "DUAL_CLIP", "distill_loss", "load_teacher", "loss_term", "reverse_kl_advantage",
           "teacher_name_problem", "teacher_source", "tokenizer_problem"]
