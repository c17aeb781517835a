"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv 2505.22617), as verl 0.9.1's policy losses ``clip_cov`` and ``kl_cov``.

Both act on the few tokens whose centred covariance of advantage and log-probability is largest,
the tokens the paper shows drive the entropy collapse:

    Cov_it = (Â_it − mean Â) · (log π(y_it) − mean log π)     (means over the policy tokens)

* **Clip-Cov** (``clip_cov``): the PPO clipped surrogate (ε 0.2/0.2), except that
  ``k = max(⌊clip_cov_ratio · #tokens⌋, 1)`` tokens drawn uniformly at random from those with
  ``clip_cov_lb < Cov < clip_cov_ub`` (and not already clipped by the PPO clip) lose their loss
  and gradient: ``ℓ_it = max(−Â r, −Â clip(r, 1−ε_low, 1+ε_high)) · (1 − 1[selected])``.
* **KL-Cov** (``kl_cov``): the *unclipped* ``−Â·r`` (no PPO clip), plus ``ppo_kl_coef·|log r|`` on
  the ``k = max(⌊kl_cov_ratio · #tokens⌋, 1)`` tokens of largest Cov.

Defaults: verl's ``PolicyLossConfig`` (``clip_cov_ratio`` 2e-4, ``clip_cov_lb`` 1, ``clip_cov_ub`` 5,
``kl_cov_ratio`` 2e-4, ``ppo_kl_coef`` 0.1) and ``actor.clip_ratio*`` 0.2; aggregation ``token-mean``
(verl's ``loss_agg_mode`` default); no KL; GRPO's group z-score (verl's ``grpo`` estimator).

Where the selection is made (``cov_scope``): verl selects inside each call of the loss, on the
current log π (detached) over the rows of that call, i.e. per micro-batch, so its result depends
on the micro-batch size. The suite's trainer promises that accumulation over micro-batches gives
the full-batch gradient (a contract test), so the default ``batch`` selects once per step in
``advantages``, over the whole rollout batch, on π_old's log-probs; at π_θ = π_old (every update
with ``train.epochs = minibatches = 1`` and ``micro_batch_size = 0``, the defaults) this is exactly
verl's call on that batch. ``call`` is verl's rule itself (per call, current log π).

Clip-Cov's random draw uses ``ctx.generator("clip_cov")`` (verl: ``torch.randperm`` on the global
RNG), over the candidates in row-major order, as verl (so only the draw's random numbers differ).
The means are verl's ``masked_mean`` (``Σ/(n + 1e-8)``) for Clip-Cov and plain means for KL-Cov, as
verl. KL-Cov does not clamp the log-ratio (as verl); Clip-Cov's surrogate is
``rlsuite.suite.ops.clipped_surrogate``, which clamps it to ±20 (verl does not: different only beyond |log r| > 20).

``on_policy_pg`` is False for Clip-Cov: even at π_θ = π_old the selected tokens get no gradient
(the point of the method). KL-Cov's penalty ``|log r|`` has zero gradient at r = 1, so it keeps
the plain policy gradient there.

Metrics: Clip-Cov reports the clipped surrogate's ``stats/*`` (``clip_frac``, ``clip_frac_low``,
``clip_frac_high``, ``approx_kl`` = verl's ``ppo_kl``) and ``algo/clip_cov/cov_clip_frac`` (verl's
``pg_clipfrac``: the share of tokens dropped by the covariance rule); KL-Cov reports
``stats/approx_kl``, ``algo/kl_cov/ppo_kl_abs`` (verl's ``ppo_kl``, the mean |log r|) and
``algo/kl_cov/penalised_frac``.

Fidelity: ``code`` — verl 0.9.1 ``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``
(adapted there from PRIME-RL/Entropy-Mechanism-of-RL); loss and gradient checked on the same inputs
(``tests/algorithms/test_clip_cov.py``, ``test_kl_cov.py``). [ASSUMPTION] the default ``cov_scope = batch`` (see above).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import AggMode
from rlsuite.suite.ops import approx_kl, clipped_surrogate, masked_mean
from rlsuite.suite.types import Batch, Forward

CovScope = Literal["batch", "call"]


def _verl_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's ``masked_mean``: ``Σ x·m / (Σ m + 1e-8)``."""
    return (x * mask).sum() / (mask.sum() + 1e-8)


@torch.no_grad()
def clip_cov_drop(logp, old_logp, adv, mask, eps_low: float, eps_high: float, ratio: float, lb: float, ub: float,
                  generator: Optional[torch.Generator]) -> torch.Tensor:
    """[B, T] 0/1: the tokens Clip-Cov drops (verl ``clip_cov``): ``k`` random candidates with lb < Cov < ub,
    not PPO-clipped, ``k = max(int(ratio·Σm), 1)``."""
    r = torch.exp(logp - old_logp)
    clipped = (-adv * r.clamp(1 - eps_low, 1 + eps_high) > -adv * r) & (mask > 0)
    cov = (adv - _verl_mean(adv, mask)) * (logp - _verl_mean(logp, mask))
    cand = torch.nonzero((cov > lb) & (cov < ub) & (mask > 0) & ~clipped)  # row-major, as verl
    k = max(int(ratio * mask.sum().item()), 1)
    drop = torch.zeros_like(mask)
    if len(cand):
        pick = cand[torch.randperm(len(cand), generator=generator)[:min(k, len(cand))]]
        drop[pick[:, 0], pick[:, 1]] = 1.0
    return drop


@torch.no_grad()
def kl_cov_pick(logp, adv, mask, ratio: float) -> torch.Tensor:
    """[B, T] 0/1: the ``max(1, int(n·ratio))`` policy tokens of largest Cov (verl ``kl_cov``)."""
    valid = mask > 0
    pick = torch.zeros_like(mask)
    n = int(valid.sum())
    if n == 0:
        return pick
    a, lp = adv[valid], logp[valid]
    cov = (a - a.mean()) * (lp - lp.mean())
    idx = torch.nonzero(valid.reshape(-1), as_tuple=True)[0][torch.topk(cov, max(1, int(n * ratio))).indices]
    pick.view(-1)[idx] = 1.0
    return pick


@dataclass(frozen=True, kw_only=True)
class ClipCovConfig(GRPOConfig):
    ranges = {"clip_cov_ratio": "(0, 1]", "clip_cov_lb": "(-inf, inf)", "clip_cov_ub": "(-inf, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_cov_ratio: float = 0.0002
    """Share of the policy tokens dropped (at least one), verl ``policy_loss.clip_cov_ratio``."""
    clip_cov_lb: float = 1.0
    """Lower covariance bound of the candidates (exclusive), verl ``clip_cov_lb``."""
    clip_cov_ub: float = 5.0
    """Upper covariance bound of the candidates (exclusive), verl ``clip_cov_ub``."""
    cov_scope: CovScope = "batch"
    """``batch``: select once per step on π_old over the rollout batch; ``call``: verl's per-call rule."""
    aggregation: AggMode = "token-mean"
    kl_coef: float = 0.0


@register
class ClipCov(GRPO):
    name = "clip_cov"
    old_logp_before_update = True  # its advantages pick the tokens to drop from the covariance of log π_old and A
    summary = "PPO clip, plus a few random high-covariance (Â, log π) tokens dropped from the loss (verl clip_cov)."
    citation = ("Cui et al. 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, "
                "arXiv:2505.22617; verl 0.9.1 compute_policy_loss_clip_cov")
    fidelity = "code"
    assumptions = ("default cov_scope = batch: the tokens are selected once per step on π_old over the rollout "
                   "batch (verl selects per loss call on the current π_θ; the same at π_θ = π_old)",)
    switches = ("clip_cov_ratio", "cov_scope")
    on_policy_pg = False
    inert = {"clip_cov_ub": "a cap: binds only on tokens with Cov > 2.5, which the contract batch does not have "
                            "(largest 1.95); covered by tests/algorithms/test_clip_cov.py"}
    tune_knob = None
    Config = ClipCovConfig
    cfg: ClipCovConfig

    def _drop(self, logp, old_logp, adv, mask, ctx: Context) -> torch.Tensor:
        c = self.cfg
        return clip_cov_drop(logp, old_logp, adv, mask, c.clip_eps_low, c.clip_eps_high, c.clip_cov_ratio,
                             c.clip_cov_lb, c.clip_cov_ub, ctx.generator("clip_cov"))

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        out = super().advantages(batch, ctx)
        if self.cfg.cov_scope != "batch":
            return out
        drop = self._drop(batch.old_logp, batch.old_logp, out.adv, batch.loss_mask, ctx)
        return dataclasses.replace(out, extras={**out.extras, "clip_cov_drop": drop})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        mask = batch.loss_mask
        loss, metrics = clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, mask, self.cfg.clip_eps_low,
                                          self.cfg.clip_eps_high)
        drop = (batch.extras["clip_cov_drop"] if self.cfg.cov_scope == "batch"
                else self._drop(fwd.logp.detach(), batch.old_logp, batch.adv, mask, ctx))
        metrics["algo/clip_cov/cov_clip_frac"] = masked_mean(drop, mask)
        return loss * (1 - drop), metrics


@dataclass(frozen=True, kw_only=True)
class KLCovConfig(AlgoConfig):
    ranges = {"kl_cov_ratio": "(0, 1]", "ppo_kl_coef": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    kl_cov_ratio: float = 0.0002
    """Share of the policy tokens penalised (at least one), verl ``policy_loss.kl_cov_ratio``."""
    ppo_kl_coef: float = 0.1
    """Coefficient of ``|log π − log π_old|`` on the selected tokens, verl ``policy_loss.ppo_kl_coef``."""
    cov_scope: CovScope = "batch"
    """``batch``: select once per step on π_old over the rollout batch; ``call``: verl's per-call rule."""
    scale_by_std: bool = True
    """Divide the group-centred reward by the group std (GRPO z-score)."""
    aggregation: AggMode = "token-mean"


@register
class KLCov(GRPO):
    name = "kl_cov"
    old_logp_before_update = True  # its advantages pick the KL-penalised tokens from the covariance of log π_old and A
    summary = "Unclipped −Â·r, plus a |log r| penalty on the top-covariance (Â, log π) tokens (verl kl_cov)."
    citation = ("Cui et al. 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, "
                "arXiv:2505.22617; verl 0.9.1 compute_policy_loss_kl_cov")
    fidelity = "code"
    assumptions = ("default cov_scope = batch: the tokens are selected once per step on π_old over the rollout "
                   "batch (verl selects per loss call on the current π_θ; the same at π_θ = π_old)",)
    switches = ("kl_cov_ratio", "ppo_kl_coef", "cov_scope")
    tune_knob = None
    Config = KLCovConfig
    cfg: KLCovConfig

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        out = super().advantages(batch, ctx)
        if self.cfg.cov_scope != "batch":
            return out
        pick = kl_cov_pick(batch.old_logp, out.adv, batch.loss_mask, self.cfg.kl_cov_ratio)
        return dataclasses.replace(out, extras={**out.extras, "kl_cov_pick": pick})

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        mask = batch.loss_mask
        log_ratio = fwd.logp - batch.old_logp
        pick = (batch.extras["kl_cov_pick"] if self.cfg.cov_scope == "batch"
                else kl_cov_pick(fwd.logp.detach(), batch.adv, mask, self.cfg.kl_cov_ratio))
        loss = -batch.adv * torch.exp(log_ratio) + pick * self.cfg.ppo_kl_coef * log_ratio.abs()
        with torch.no_grad():
            metrics = {"stats/approx_kl": approx_kl(fwd.logp, batch.old_logp, mask),
                       "algo/kl_cov/ppo_kl_abs": masked_mean(log_ratio.abs(), mask),
                       "algo/kl_cov/penalised_frac": masked_mean(pick, mask)}
        return loss * mask, metrics
