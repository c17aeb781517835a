"""IS-GRPO — σ-proportional prompt sampling with importance weights (a reconstruction).

Ge, Yin, Liang, Zhang 2026, "Why GRPO Needs Normalization: A Local-Curvature Perspective on
Adaptive Gradients", arXiv 2601.23135: prompt q's gradient curvature scales with its reward std
σ_q, so GRPO's ``(R − mean)/σ_q`` is a prompt-wise step η/σ_q. IS-GRPO (absent from v1) is rebuilt
as importance sampling ∝ that constant (N = train-split size, σ̂ a checkpointed per-prompt table):

    P(q) ∝ max(σ̂_q, σ_min)^α,   w_q = 1/(N·P(q)),   Â_i = w_q·(R_i − mean_G R) / mean_batch(w)

E[update] = the uniform-prompt REINFORCE-with-baseline gradient; per-sample scale σ̄/σ̂_q.
Differs from GRPO (``algorithms/grpo.py``; its loss and defaults ε 0.2, β 0.04 are kept) by:
  1. ``sample_prompts`` draws prompts ∝ σ̂^α (``alpha = 0``: uniform); σ̂ is updated from each
     batch in ``after_update``, so sampling and weighting see the same P.
  2. Mean-only advantage × IS weight (``is_weight``, ``renormalise``; ``scale_by_std`` gives GRPO's
     arm, ``reinforce`` with ``baseline=group_mean`` the unnormalised one).
``reading = response`` — the alternative reading [ASSUMPTION]: IS over responses. Prompts are drawn
uniformly; the previous step's groups are trained on again (the ``replay`` hook) with the truncated
sequence weight ``ρ_i = min(π_old(y_i)/μ(y_i), c)``, their baseline and σ estimated from the
ρ-weighted rewards (:func:`weighted_group_advantage`), ``Â_i = ρ_i·(R_i − m_ρ)/σ_ρ``; fresh groups get
GRPO's z-score.
Fidelity ``abstract``; [ASSUMPTION]s (= ``ISGRPO.assumptions``): prompt-level IS, P ∝ σ̂^α, w = 1/(N·P);
σ̂ = last batch's unbiased group std (or EMA); unseen σ̂ 0.5, floor 0.05; w / batch mean; draws with
replacement; GRPO's loss/defaults; orthogonality = mean |cos| of per-prompt Σ A·h per micro-batch.

Source of the defaults (search tools, 2026-12-01): the v1 abstract and introduction of arXiv
2601.23135 (arxiv.org/html/2601.23135v1), the workshop abstracts (OpenReview H7z33FHMI7,
vzEKOkeYvi) and an author's publication page; no code and no later version found. IS-GRPO appears
in none of them, so no default here can be checked: α, σ_min, σ_prior, the IS weight and the
response reading are reconstructions, and ε 0.2, β 0.04 are the suite's GRPO defaults. The
abstract's setting (GSM8K and MATH; GRPO vs unnormalised REINFORCE) maps to ``scale_by_std``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.ops import (broadcast_to_tokens, group_all_equal, group_mean_std, group_normalised_advantage,
                               masked_sum)
from rlsuite.suite.types import Batch, Forward, Rollout


def prompt_probs(sigma_hat: torch.Tensor, alpha: float, sigma_min: float) -> torch.Tensor:
    """``P(q) ∝ max(σ̂_q, σ_min)^α``. Shapes: [N] → [N]."""
    s = sigma_hat.clamp(min=sigma_min) ** alpha
    return s / s.sum()


def weighted_group_advantage(rewards: torch.Tensor, group_ids: torch.Tensor, w: torch.Tensor,
                             scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """``(R − m_w)/(σ_w + eps)`` with the group's w-weighted mean and std
    (``m_w = Σ wR/Σ w``, ``σ_w² = Σ w(R − m_w)²/Σ w · n/(n−1)``; w ≡ 1 gives GRPO's z-score).
    Computed in float64, returned in the rewards' dtype; a group whose rewards are all equal
    (a singleton included) gets exactly 0. Shapes: [B], [B], [B] → [B]."""
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    r, n, w = rewards.to(torch.float64), counts.to(torch.float64), w.to(torch.float64)
    sw = torch.zeros_like(n).index_add_(0, inv, w)
    m = torch.zeros_like(n).index_add_(0, inv, w * r) / sw
    var = torch.zeros_like(n).index_add_(0, inv, w * (r - m[inv]) ** 2) / sw * n / (n - 1).clamp(min=1)
    centred = r - m[inv]
    adv = centred / (var.sqrt()[inv] + eps) if scale_by_std else centred
    return torch.where(group_all_equal(rewards, group_ids), torch.zeros_like(adv), adv).to(rewards.dtype)


def feature_orthogonality(hidden, adv, mask, group_id) -> Optional[torch.Tensor]:
    """Mean |cos| between per-prompt vectors ``Σ_{i∈q,t} A·h`` ([B,T,H], [B,T], [B,T], [B] → scalar)."""
    v = ((adv * mask)[..., None] * hidden.float()).sum(1)  # [B, H]
    _, inv = torch.unique(group_id, return_inverse=True)
    V = torch.zeros(int(inv.max()) + 1, v.shape[-1], dtype=v.dtype, device=v.device).index_add_(0, inv, v)
    U = torch.nn.functional.normalize(V[V.norm(dim=-1) > 0], dim=-1)
    return ((U @ U.T).abs().sum() - len(U)) / (len(U) * (len(U) - 1)) if len(U) >= 2 else None


@dataclass(frozen=True, kw_only=True)
class ISGRPOConfig(GRPOConfig):
    ranges = {"alpha": "[0, inf)", "sigma_min": "(0, inf)", "sigma_prior": "[0, inf)", "ema_decay": "[0, 1]",
              "response_cap": "(0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    scale_by_std: bool = False
    """Divide by the group std (True: GRPO's σ-normalised arm)."""
    alpha: float = 1.0
    """Sampler temperature: P ∝ σ̂^α (0 = uniform)."""
    is_weight: bool = True
    """Multiply the advantage by w_q = 1/(N·P(q))."""
    renormalise: bool = True
    """Divide w by its batch mean."""
    sigma_min: float = 0.05
    """Floor of σ̂ in the sampler."""
    sigma_prior: float = 0.5
    """σ̂ of prompts never seen."""
    sigma_source: Literal["last", "ema"] = "last"
    """σ̂ from the prompt's last batch, or an exponential running mean."""
    ema_decay: float = 0.5
    """Decay of the running mean (sigma_source = ema)."""
    with_replacement: bool = True
    """Draw prompts with replacement (exact IS weight)."""
    orthogonality: bool = False
    """Log the feature-orthogonality statistic (needs last-layer hidden states)."""
    reading: Literal["prompt", "response"] = "prompt"
    """IS over prompts (σ̂-proportional sampler × w_q) or over responses (uniform prompts; the previous
    step's groups re-used with truncated sequence weights; σ from the weighted rewards). The response
    reading always divides by σ (``scale_by_std``, ``alpha`` and the prompt weights act only in the prompt reading)."""
    response_cap: float = 2.0
    """c: truncation of the re-used responses' weight min(π_old(y)/μ(y), c) (reading = response)."""


@register
class ISGRPO(GRPO):
    name = "is_grpo"
    summary = "GRPO with prompts sampled ∝ within-prompt reward std and the mean-only advantage × IS weight."
    citation = ("Ge, Yin, Liang, Zhang 2026, Why GRPO Needs Normalization: A Local-Curvature Perspective on "
                "Adaptive Gradients, arXiv:2601.23135")
    fidelity = "abstract"
    own_mismatch_weight = "it weights replayed rows by their sequence ratio π_old/μ"
    assumptions = (
        "prompt-level IS: P(q) ∝ max(σ̂_q, σ_min)^α, w_q = 1/(N·P(q)) (the v1 paper does not describe IS-GRPO)",
        "σ̂_q = unbiased within-group reward std of the prompt's last batch (or an EMA, sigma_source)",
        "unseen prompts get σ̂ = sigma_prior = 0.5; σ̂ floored at sigma_min = 0.05",
        "w renormalised by its batch mean (renormalise); prompts drawn with replacement so w is exact",
        "loss and defaults as GRPO (clip 0.2, k3 KL β 0.04, seq-mean-token-mean)",
        "orthogonality statistic = mean |cos| of per-prompt Σ A·h (last-layer hidden) per micro-batch",
        "response reading: the previous step's groups re-used once, sequence weight min(π_old/μ, c = 2) on the "
        "advantage, baseline and σ from the weighted rewards with the n/(n−1) correction")
    switches = ("alpha", "scale_by_std", "is_weight", "renormalise", "sigma_source", "sigma_min", "sigma_prior",
                "reading")
    inert = {**dict.fromkeys(("alpha", "is_weight", "renormalise", "sigma_min", "sigma_prior", "sigma_source",
                              "ema_decay", "with_replacement"), "acts via sample_prompts and the σ̂ table: a fresh "
                             "entry samples uniformly (w ≡ 1); see its hand tests in tests/unit/"),
             "orthogonality": "metric only",
             **dict.fromkeys(("reading", "response_cap"), "acts through the replay hook (a fresh entry has no "
                             "stale groups yet); see its hand tests in tests/unit/")}
    tune_knob = ("alpha", (0.5, 1.0))
    Config = ISGRPOConfig
    cfg: ISGRPOConfig

    def __init__(self, cfg: ISGRPOConfig) -> None:
        super().__init__(cfg)
        self.sigma: Optional[torch.Tensor] = None  # [N] σ̂ table, NaN = unseen
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (prompt idx, σ) not yet applied
        self.buffer: Optional[Rollout] = None  # reading = response: last step's fresh rows (CPU)
        self.n_replayed = 0  # rows appended by replay() to the current batch

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | ({"hidden"} if self.cfg.orthogonality else set())

    def _probs(self, n: int) -> torch.Tensor:
        if self.sigma is None or len(self.sigma) != n:
            self.sigma = torch.full((n,), float("nan"))
        sig = torch.nan_to_num(self.sigma, nan=self.cfg.sigma_prior)
        return prompt_probs(sig, self.cfg.alpha, self.cfg.sigma_min)

    def sample_prompts(self, ctx: Context) -> Optional[list[int]]:
        if self.cfg.reading == "response":
            return None  # the trainer's uniform draw
        repl = self.cfg.with_replacement or ctx.prompts_per_step > ctx.n_train
        return torch.multinomial(self._probs(ctx.n_train), ctx.prompts_per_step, repl,
                                 generator=ctx.generator("is_grpo/prompts")).tolist()

    def replay(self, ctx: Context) -> Optional[Rollout]:
        self.n_replayed = self.buffer.batch_size if self.cfg.reading == "response" and self.buffer is not None else 0
        return self.buffer if self.n_replayed else None

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        if self.cfg.reading == "response":
            return self._response_advantages(batch, ctx)
        c = self.cfg
        adv = group_normalised_advantage(batch.rewards, batch.group_id, c.scale_by_std)  # [B]
        idx = batch.example_idx.long().cpu()
        p = self._probs(ctx.n_train)
        w_raw = 1.0 / (ctx.n_train * p[idx])  # [B] exact IS weight of each sample's prompt
        w = w_raw / w_raw.mean() if c.renormalise else w_raw
        adv = adv * w.to(adv) if c.is_weight else adv
        std = group_mean_std(batch.rewards, batch.group_id)[1]
        self.pending.append((idx, std.detach().float().cpu()))  # applied in after_update
        m = {"sigma_mean": std.mean(), "is_weight_mean": w_raw.mean(), "is_weight_max": w_raw.max(),
             "sampler_entropy": -(p * p.log()).sum(), "seen_frac": (~self.sigma.isnan()).float().mean()}
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask),
                      metrics={f"algo/is_grpo/{k}": float(v) for k, v in m.items()})

    def _response_advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        """Fresh rows: GRPO's z-score; re-used rows (the last ``n_replayed``): ρ·(R − m_ρ)/σ_ρ."""
        c, n = self.cfg, batch.batch_size - self.n_replayed
        self._probs(ctx.n_train)  # the σ̂ table (logged, and kept for a switch back to the prompt reading)
        adv = group_normalised_advantage(batch.rewards, batch.group_id)  # [B] (fresh rows kept)
        m: dict[str, float] = {"replayed_rows": float(self.n_replayed)}
        if self.n_replayed:
            log_rho = masked_sum(batch.old_logp - batch.behav_logp, batch.loss_mask, -1)[n:]  # [B_old]
            rho = torch.exp(log_rho.clamp(max=math.log(c.response_cap)))
            adv[n:] = rho * weighted_group_advantage(batch.rewards[n:], batch.group_id[n:], rho)
            m.update({"rho_mean": float(rho.mean()), "rho_min": float(rho.min()),
                      "rho_truncated_frac": float((log_rho > math.log(c.response_cap)).float().mean())})
        fresh = batch.select(torch.arange(n, device=batch.tokens.device))
        self.buffer = Rollout(**{f.name: _cpu(getattr(fresh, f.name)) for f in dataclasses.fields(Rollout)})
        idx = fresh.example_idx.long().cpu()
        std = group_mean_std(fresh.rewards, fresh.group_id)[1]
        self.pending.append((idx, std.detach().float().cpu()))
        m["sigma_mean"] = float(std.mean())
        return AdvOut(adv=broadcast_to_tokens(adv, batch.loss_mask),
                      metrics={f"algo/is_grpo/{k}": v for k, v in m.items()})

    def after_update(self, ctx: Context) -> None:
        for idx, std in self.pending:  # σ̂ update once per step, after the batch was weighted
            old, d = self.sigma[idx], self.cfg.ema_decay
            ema = torch.where(old.isnan(), std, d * old + (1 - d) * std)
            self.sigma[idx] = std if self.cfg.sigma_source == "last" else ema
        self.pending = []

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        loss, metrics = super().loss(fwd, batch, ctx)
        o = feature_orthogonality(fwd.hidden.detach(), batch.adv, batch.loss_mask, batch.group_id) \
            if self.cfg.orthogonality and fwd.hidden is not None else None
        if o is not None:
            metrics["algo/is_grpo/orthogonality"] = o
        return loss, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "pending": list(self.pending), "buffer": self.buffer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sigma, self.pending = state.get("sigma"), list(state.get("pending", []))
        self.buffer = state.get("buffer")


def _cpu(v: Any) -> Any:
    return v.detach().cpu() if isinstance(v, torch.Tensor) else v
