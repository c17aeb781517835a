"""3PO — Perturbed Parameter Policy Optimisation: exploration in parameter space.

Each rollout step draws K Gaussian perturbations of the policy's weights,
``ε_k ~ N(0, (σ·rms(W))²)`` per tensor of the chosen subset (independent draws; ``antithetic``: ±ε pairs),
regenerated from (seed, step, k) rather than stored, and generates with θ + ε_k through the
``before_rollout`` hook (the trained weights are never touched; the engine's copy is restored
bit-identically after each behaviour). Grouping strategies (switch ``grouping``):
``mixed`` — the G responses of a prompt are split across the K perturbations; ``per_group`` —
each prompt gets its whole group from one perturbation; ``partial`` — a fraction of each group
comes from θ itself, the rest is split across the perturbations.
Advantage: the group z-score (GRPO). Update of the unperturbed θ with truncated importance
sampling back to it: per token ``w = min(π_old(y_t)/π_{θ+ε_k}(y_t), C)`` (detached) times the
PPO-clip surrogate (``loss = ppo``) or the CISPO form (``loss = cispo``). σ fixed, or adapted
multiplicatively towards a target KL(π_{θ+ε}‖π_θ) measured on the rollouts (algorithm state).
FLOPs equal GRPO's at the same batch and recompute setting (the perturbation adds no pass).

Differs from GRPO by: 1. rollouts from perturbed weights; 2. TIS back to θ; 3. no KL.
Fidelity: ``description`` — written before the paper was found (see below); the closest documented
analogue then was PSN-RLVR (Bai et al., arXiv 2602.02555, abstract only).

Source of the defaults (search tools, 2026-12-01): the paper is Venkatkrishna, Daheim, Gurevych,
"Parameter Exploration for RLVR via Variational Learning", arXiv 2608.09805 (3PO = its family
B3PO / M3PO / C3PO); authors' code github.com/insait-institute/C3PO (a verl fork; its README and
two stored versions of verl/recipes/run_rl.sh were read, not the paper's text, of which only a
third-party summary was read). The mechanism differs, so only the knobs that map are compared:
  * noise: the source samples weights from an IVON variational posterior, per weight
    σ = 1/sqrt(λ(h + δ)) with λ = ESS = 1e9 (main results; up to 1e10 for Qwen2.5-Math per the
    summary), h initialised at 1e-3 and then learned, δ = weight decay 1e-6, i.e. about 1e-3 absolute
    at the start; the entry uses a fixed σ = 0.02 × rms(W) on 2-D weight matrices (which
    parameters IVON perturbs was not checked in the code). Kept: the suite has no IVON optimizer.
  * antithetic: the source draws independent z ~ N(0, I), the default since the fidelity issue;
    ``antithetic = True`` (±ε pairs, the entry's first default) is the reconstruction's switch.
  * grouping: C3PO splits each group of G rollouts across N perturbations and computes advantages
    over the pooled group = ``grouping = mixed``; the README's example N = 4 (= ``n_perturb``),
    G = 16 (G is a trainer setting; suite default 8).
  * IS: the source corrects at sequence level (verl rollout_correction: rollout_is = sequence,
    threshold 2, rejection rollout_rs = seq_sum_k1, bypass mode); the entry uses the per-token
    TIS min(π_old/π_{θ+ε}, C = 2): the cap agrees, the level differs (flagged).
  * PPO clip 0.2 / 0.2, no KL, no entropy bonus: agree. Launch: 32 prompts a step, one update per
    batch, temperature 1.0, max response 3072, AdamW LR 1e-6 for the GRPO baseline (IVON lr 1.0).
The class attributes ``citation`` and ``fidelity`` still say the paper was not found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Behaviour, Context, register
from rlsuite.algorithms.cispo import cispo_loss
from rlsuite.suite.ops import broadcast_to_tokens, clipped_surrogate, group_normalised_advantage, masked_mean
from rlsuite.suite.types import Batch, Forward


def assign_rows(n_groups: int, group_size: int, k: int, grouping: str, unperturbed_frac: float) -> list[int]:
    """Behaviour id (0 = θ, 1..k = θ + ε_k) of every row ``g·G + j`` of the batch."""
    ids = []
    n_plain = round(unperturbed_frac * group_size) if grouping == "partial" else 0
    for g in range(n_groups):
        for j in range(group_size):
            if grouping == "per_group":
                ids.append(1 + g % k)
            elif j < n_plain:
                ids.append(0)
            else:
                ids.append(1 + (j - n_plain) % k)
    return ids


def perturbation(params: dict[str, torch.Tensor], sigma: float, k: int, antithetic: bool,
                 gen_for) -> dict[str, torch.Tensor]:
    """θ + ε_k for perturbation index k ≥ 1; antithetic pairs (1, 2), (3, 4)… share |ε|."""
    seed_index, sign = ((k + 1) // 2, 1.0 if k % 2 else -1.0) if antithetic else (k, 1.0)
    gen = gen_for(seed_index)
    out = {}
    for name, w in params.items():
        rms = w.detach().float().pow(2).mean().sqrt()
        noise = torch.randn(w.shape, generator=gen).to(w.device, w.dtype)
        out[name] = w.detach() + sign * sigma * rms.to(w.dtype) * noise
    return out


@dataclass(frozen=True, kw_only=True)
class ThreePOConfig(AlgoConfig):
    ranges = {"sigma": "[0, inf)", "n_perturb": "[1, inf)", "unperturbed_frac": "[0, 1]", "tis_cap": "(0, inf)",
              "clip_eps_low": "[0, inf)", "clip_eps_high": "[0, inf)",
              "target_kl": "(0, inf)", "sigma_lr": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    sigma: float = 0.02
    """Perturbation scale relative to each tensor's RMS (0 recovers the base algorithm)."""
    n_perturb: int = 4
    """K perturbed copies per rollout step."""
    antithetic: bool = False
    """Use ±ε pairs (variance reduction; the source draws independent z ~ N(0, I), the default)."""
    grouping: Literal["mixed", "per_group", "partial"] = "mixed"
    """How rows are assigned to perturbations (see the module docstring)."""
    unperturbed_frac: float = 0.25
    """grouping = partial: share of each group generated by θ itself."""
    subset: Literal["linear", "all", "norm"] = "linear"
    """Parameters perturbed: 2-D weight matrices, every tensor, or only norm weights."""
    tis_cap: Optional[float] = 2.0
    """Truncated-IS cap C on π_old/π_{θ+ε} (null = no IS correction)."""
    loss: Literal["ppo", "cispo"] = "ppo"
    """Surrogate after the IS weight."""
    clip_eps_low: float = 0.2
    """ε_low of the PPO clip (unused by CISPO)."""
    clip_eps_high: float = 0.2
    """ε_high of the PPO clip (or of the CISPO truncation)."""
    sigma_mode: Literal["fixed", "adaptive"] = "fixed"
    """Keep σ, or adapt it towards ``target_kl``."""
    target_kl: float = 0.02
    """Target KL(π_{θ+ε}‖π_θ) on rollouts for the adaptive σ."""
    sigma_lr: float = 0.2
    """Step of the multiplicative σ adaptation."""


@register
class ThreePO(Algorithm):
    name = "3po"
    old_logp_before_update = True  # its advantages weight by π_old/μ (the perturbed tokens)
    summary = "Rollouts from perturbed weight copies (antithetic), grouped by strategy, TIS back to θ."
    citation = ("Venkatkrishna, Daheim, Gurevych 2026, 3PO: Perturbed Parameter Policy Optimization, arXiv:2608.09805 "
                "(code: insait-institute/C3PO); analogue: Bai et al. 2026, PSN-RLVR, arXiv:2602.02555")
    fidelity = "description"
    own_mismatch_weight = "its loss weights by the truncated ratio back from the perturbed behaviour μ = π_{θ+ε}"
    assumptions = (
        "ε_k ~ N(0, (σ·rms(W))²) per tensor on 2-D weight matrices, σ = 0.02, K = 4 antithetic",
        "advantage: the group z-score within the prompt group, whatever the source",
        "TIS weight min(π_old/π_{θ+ε}, C), C = 2, multiplying the PPO-clip surrogate",
        "adaptive σ: σ ← σ·exp(η·(KL* − KL)/KL*), KL measured on the rollouts",
    )
    switches = ("sigma", "grouping", "antithetic", "tis_cap", "loss", "sigma_mode", "subset")
    group_relative = True
    tune_knob = ("sigma", (0.01, 0.02, 0.05))
    inert = {"unperturbed_frac": "used only with grouping = partial",
             "sigma_mode": "adapts σ for later rollouts (algorithm state), not this batch's loss",
             "target_kl": "used only with sigma_mode = adaptive", "sigma_lr": "used only with sigma_mode = adaptive",
             "n_perturb": "changes which rows come from which copy (before_rollout), not the loss on a given batch",
             "antithetic": "changes the rollout weights (before_rollout), not the loss on a given batch",
             "subset": "changes the rollout weights (before_rollout), not the loss on a given batch",
             "sigma": "scales the rollout weights (before_rollout), not the loss on a given batch",
             "grouping": "assigns rows to copies (before_rollout), not the loss on a given batch"}
    Config = ThreePOConfig
    cfg: ThreePOConfig

    def __init__(self, cfg: ThreePOConfig) -> None:
        super().__init__(cfg)
        self.sigma = cfg.sigma

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp"}

    def _params(self, policy) -> dict[str, torch.Tensor]:
        named = dict(policy.named_parameters())
        if self.cfg.subset == "all":
            return named
        if self.cfg.subset == "norm":
            return {n: p for n, p in named.items() if p.dim() == 1 and "norm" in n}
        emb = policy.get_input_embeddings().weight
        return {n: p for n, p in named.items() if p.dim() == 2 and p is not emb}

    def before_rollout(self, ctx: Context) -> Optional[list[Behaviour]]:
        if self.sigma <= 0 or ctx.policy is None:
            return None
        k = self.cfg.n_perturb
        ids = assign_rows(ctx.prompts_per_step, ctx.group_size, k, self.cfg.grouping, self.cfg.unperturbed_frac)
        params = self._params(ctx.policy)
        out = []
        for b in sorted(set(ids)):
            rows = tuple(i for i, x in enumerate(ids) if x == b)
            state = None if b == 0 else perturbation(params, self.sigma, b, self.cfg.antithetic,
                                                     lambda s: ctx.generator(f"3po-{s}"))
            out.append(Behaviour(b, rows, state))
        return out

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv = broadcast_to_tokens(group_normalised_advantage(batch.rewards, batch.group_id), batch.loss_mask)
        mask = batch.loss_mask
        ratio = torch.exp((batch.old_logp - batch.behav_logp).clamp(-20, 20))
        w = ratio.clamp(max=self.cfg.tis_cap) if self.cfg.tis_cap is not None else torch.ones_like(ratio)
        pert = (batch.behaviour_id > 0).float()[:, None] * mask
        kl = float(masked_mean(batch.behav_logp - batch.old_logp, pert)) if pert.any() else 0.0
        metrics = {"algo/3po/sigma": self.sigma, "algo/3po/kl_perturbed": kl,
                   "algo/3po/is_weight_mean": float(masked_mean(w, mask)),
                   "algo/3po/is_weight_max": float((w * mask).max()),
                   "algo/3po/tis_clip_frac": float(masked_mean((ratio > (self.cfg.tis_cap or math.inf)).float(), mask)),
                   "algo/3po/malformed_frac": sum(p is None for p in batch.parsed) / max(1, len(batch.parsed))}
        if self.cfg.sigma_mode == "adaptive" and pert.any():
            step = self.cfg.sigma_lr * (self.cfg.target_kl - kl) / self.cfg.target_kl
            self.sigma = float(min(1.0, max(1e-5, self.sigma * math.exp(max(-1.0, min(1.0, step))))))
        return AdvOut(adv=adv, extras={"tis_weight": w.detach() * mask}, metrics=metrics)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        w = batch.extras["tis_weight"]
        if self.cfg.loss == "cispo":
            loss, m = cispo_loss(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask, None, self.cfg.clip_eps_high)
        else:
            loss, m = clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                        self.cfg.clip_eps_low, self.cfg.clip_eps_high)
        return w * loss, m

    def state_dict(self) -> dict:
        return {"sigma": self.sigma}

    def load_state_dict(self, state: dict) -> None:
        self.sigma = float(state["sigma"])
