"""Pure tensor math shared by algorithms: masked statistics, group baselines, KL estimators,
the clipped surrogate, GAE and the clipped value loss.

Argument names are the same everywhere: ``logp``, ``old_logp``, ``ref_logp``, ``adv``,
``mask`` (the loss mask), ``rewards``, ``group_ids``, ``values``. Shapes use the symbols of
:mod:`rlsuite.suite.types`. No function here reads a config object.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3", "abs", "k1+", "k2+", "k3+", "abs+"]


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x·mask over ``dim`` (all dims if None). Shapes: x, mask [B, T]."""
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of x over mask = 1 (0 when the mask is empty). Shapes: x, mask [B, T]."""
    return masked_sum(x, mask, dim) / mask.sum(dim).clamp(min=1)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the masked entries of x (Bessel-corrected like verl's ``masked_var``)."""
    mean = masked_mean(x, mask)
    n = mask.sum()
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased and n > 1:
        var = var * n / (n - 1)
    return var


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(x − mean)/std over mask = 1 tokens of the whole batch (verl ``masked_whiten``).

    Statistics are computed in float64 and the result is returned in ``x``'s dtype. When all
    masked values are equal the mean is exactly that value and the variance exactly 0, so the
    centred part is exactly 0 (``rsqrt(var + eps)`` would otherwise amplify the rounding
    residual of the mean about 10⁴ times): the output is 0 with ``shift_mean``; with
    ``shift_mean=False`` (the mean added back after scaling, as verl) it is the common value
    itself, i.e. such a batch comes back unchanged.

    Shapes: x, mask [B, T] → [B, T]; masked-out entries are returned as 0.
    """
    x64, m64 = x.to(torch.float64), mask.to(torch.float64)
    mean, var = masked_mean(x64, m64), masked_var(x64, m64)
    with torch.no_grad():
        sel, xd = mask > 0, x64.detach()
        lo = torch.where(sel, xd, torch.inf).amin() if xd.numel() else xd.new_tensor(torch.inf)
        hi = torch.where(sel, xd, -torch.inf).amax() if xd.numel() else xd.new_tensor(-torch.inf)
        equal = lo == hi  # False for an empty mask (inf vs −inf)
    mean = torch.where(equal, lo, mean)
    var = torch.where(equal, torch.zeros_like(var), var)
    out = (x64 - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return (out * m64).to(x.dtype)


def group_all_equal(values: Tensor, group_ids: Tensor) -> Tensor:
    """Per-sample flag: every value of its group is equal (True for a singleton group).

    Args: values [B]; group_ids [B] long (any labels). Returns [B] bool; NaN never counts as equal.
    """
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    v = values.detach()
    lo = torch.full(counts.shape, torch.inf, dtype=v.dtype, device=v.device).scatter_reduce(0, inv, v, "amin")
    hi = torch.full(counts.shape, -torch.inf, dtype=v.dtype, device=v.device).scatter_reduce(0, inv, v, "amax")
    return (lo == hi)[inv]


def _group_stats64(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """float64 per-sample (mean, unbiased std, flag: a group of ≥ 2 whose rewards are all equal)."""
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    r = rewards.to(torch.float64)
    n = counts.to(torch.float64)
    mean = torch.zeros_like(n).index_add_(0, inv, r) / n
    with torch.no_grad():
        rd = r.detach()
        lo = torch.full_like(n, torch.inf).scatter_reduce(0, inv, rd, "amin")
        hi = torch.full_like(n, -torch.inf).scatter_reduce(0, inv, rd, "amax")
        equal = lo == hi
    mean = torch.where(equal, lo, mean)  # an all-equal group: exactly the common value …
    sq = torch.zeros_like(n).index_add_(0, inv, (r - mean[inv]) ** 2)
    std = torch.sqrt(sq / (n - 1).clamp(min=1))
    std = torch.where(equal, torch.zeros_like(std), std)  # … and a std of exactly 0
    single = counts == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return mean[inv], std[inv], (equal & ~single)[inv]


def group_mean_std(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample mean and unbiased std of its group's rewards.

    Computed in float64, returned in the rewards' dtype. A group whose rewards are all equal
    gets exactly that value as its mean and exactly 0 as its std (so ``R − mean`` is exactly 0).
    Args: rewards [B] float; group_ids [B] long (any labels).
    Returns: (mean [B], std [B]); a singleton group gets mean 0 and std 1 (verl convention).
    """
    mean, std, _ = _group_stats64(rewards, group_ids)
    return mean.to(rewards.dtype), std.to(rewards.dtype)


def group_normalised_advantage(
    rewards: Tensor, group_ids: Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO outcome advantage ``(R − mean_G R) / (std_G R + eps)`` (or mean-only).

    Computed in float64, returned in the rewards' dtype. A group of ≥ 2 whose rewards are all
    equal gets an advantage of exactly 0 (dividing by ``std + eps`` would otherwise amplify
    the rounding residual of its mean about 10⁶ times).
    Reference: Shao et al. 2024 (arXiv 2402.03300) §4.1.2; verl ``compute_grpo_outcome_advantage``.
    Shapes: rewards [B], group_ids [B] → [B].
    """
    mean, std, equal = _group_stats64(rewards, group_ids)
    adv = rewards.to(torch.float64) - mean
    if scale_by_std:
        adv = adv / (std + eps)
    return torch.where(equal, torch.zeros_like(adv), adv).to(rewards.dtype)


def broadcast_to_tokens(seq_values: Tensor, mask: Tensor) -> Tensor:
    """[B] per-sequence values → [B, T] on the mask (0 elsewhere)."""
    return seq_values[:, None] * mask


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: KLEstimator) -> Tensor:
    """Per-token estimate of KL(π‖π_ref) from sampled-token log-probs, ``d = logp − ref_logp``.

    k1 = d; k2 = ½d²; k3 = exp(−d) + d − 1 (Schulman's low-variance estimator; clamped to
    [−10, 10] as in verl ``kl_penalty``); abs = |d| (verl's ``abs``). A ``+`` suffix (verl 0.9.1's
    straight-through variants) keeps the estimator's value but takes k2's gradient, the one whose
    expectation is the gradient of the KL: ``k2 − sg(k2) + sg(value)``; ``k2+`` is k2 itself.
    Shapes: [B, T] → [B, T].
    """
    base = kind[:-1] if kind.endswith("+") else kind
    d = logp - ref_logp
    if base == "k1":
        value = d
    elif base == "k2":
        value = 0.5 * d.square()
    elif base == "k3":
        value = (torch.exp(-d) + d - 1).clamp(-10.0, 10.0)
    elif base == "abs":
        value = d.abs()
    else:
        raise ValueError(f"unknown KL estimator '{kind}'; valid: k1, k2, k3, abs and k1+, k2+, k3+, abs+")
    if not kind.endswith("+") or base == "k2":
        return value
    k2 = 0.5 * d.square()
    return k2 - k2.detach() + value.detach()


def approx_kl(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``stats/approx_kl``: the masked mean of ``log π_old − log π`` per token (verl's ``ppo_kl``,
    OpenRLHF's ``ppo_kl``), detached. [B, T] → scalar."""
    with torch.no_grad():
        return masked_mean(-(logp - old_logp).clamp(-20.0, 20.0), mask)


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate per token, with optional dual clip (verl ``compute_policy_loss_vanilla``).

    ``L1 = −A·r``, ``L2 = −A·clip(r, 1−ε_low, 1+ε_high)``, ``L = max(L1, L2)``; with dual clip
    ``c`` and A < 0: ``L = min(L, −A·c)``. The log-ratio is clamped to ±20 before exp.

    Shapes: logp, old_logp, adv, mask [B, T] → loss [B, T] (0 off the mask) and metrics
    (``stats/clip_frac``, ``stats/clip_frac_low``, ``stats/clip_frac_high``,
    ``stats/dual_clip_frac``, ``stats/approx_kl``, ``stats/ratio_{mean,min,max}``; detached).
    Reference: Schulman et al. 2017 Eq. (7); dual clip: Ye et al. 2020 (arXiv 1912.09729).
    """
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(l1, l2)
    dual = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        cap = -adv * dual_clip
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
    with torch.no_grad():
        m = mask.bool()
        low = (ratio < 1.0 - eps_low) & (adv < 0) & m
        high = (ratio > 1.0 + eps_high) & (adv > 0) & m
        big = torch.finfo(ratio.dtype).max
        metrics = {
            "stats/clip_frac": masked_mean((l2 > l1).float(), mask),
            "stats/clip_frac_low": masked_mean(low.float(), mask),
            "stats/clip_frac_high": masked_mean(high.float(), mask),
            "stats/dual_clip_frac": masked_mean(dual.float(), mask),
            "stats/approx_kl": masked_mean(-log_ratio, mask),
            "stats/ratio_mean": masked_mean(ratio, mask),
            "stats/ratio_min": torch.where(m, ratio, big).min() if m.any() else ratio.new_tensor(1.0),
            "stats/ratio_max": torch.where(m, ratio, -big).max() if m.any() else ratio.new_tensor(1.0),
        }
    return loss * mask, metrics


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the masked response tokens (reverse scan).

    ``δ_t = r_t + γ V_{t+1} − V_t``, ``Â_t = δ_t + γ λ_t Â_{t+1}``, ``returns = Â + V``.
    Masked positions (padding, prompt, observations) are skipped: the next value and the
    running Â carry across them (verl ``compute_gae_advantage_return``). The value after the
    last policy token is 0 (terminal). ``lam`` may be a scalar or a per-token ``[B, T]`` tensor
    (a state-dependent λ, as CompPO's gate uses).

    Shapes: token_rewards, values, mask [B, T] → (adv [B, T], returns [B, T]), 0 off the mask.
    Reference: Schulman et al. 2015 (arXiv 1506.02438) Eq. (16).
    """
    B, T = mask.shape
    lam_t = lam if isinstance(lam, Tensor) else torch.full_like(values, float(lam))
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    last = torch.zeros(B, dtype=values.dtype, device=values.device)
    adv = torch.zeros_like(values)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        cur = delta + gamma * lam_t[:, t] * last
        last = torch.where(m > 0, cur, last)
        next_value = torch.where(m > 0, values[:, t], next_value)
        adv[:, t] = last
    adv = adv * mask
    return adv, (adv + values) * mask


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token ``½·max((V − R)², (clip(V, V_old ± c) − R)²)`` (verl ``compute_value_loss``).

    ``value/clip_frac`` keeps verl's ``vf_clipfrac`` meaning (the clipped term is the one that
    binds) but counts a token only when V is really outside the band, ``|V − V_old| > c`` and
    ``l2 > l1``: ``V_old + (V − V_old)`` need not round back to V, so comparing the losses alone
    would count unclipped tokens whose l2 exceeds l1 by a rounding error.
    Shapes: [B, T] → loss [B, T] and metrics (``value/clip_frac``).
    """
    l1 = (values - returns).square()
    if clip is None:
        return 0.5 * l1 * mask, {"value/clip_frac": values.new_tensor(0.0)}
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    l2 = (clipped - returns).square()
    with torch.no_grad():
        outside = (values - old_values).abs() > clip
        frac = masked_mean((outside & (l2 > l1)).float(), mask)
    return 0.5 * torch.maximum(l1, l2) * mask, {"value/clip_frac": frac}


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dim, in float32 (float64 kept). Shapes: [..., V] → [...]."""
    logp = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """``1 − Var(R − V)/Var(R)`` over the mask (NaN when Var(R) = 0)."""
    var_r = masked_var(returns, mask)
    return 1 - masked_var(returns - values, mask) / var_r if var_r > 0 else values.new_tensor(float("nan"))


def off_policy_sequence_mask(adv: Tensor, logp: Tensor, behav_logp: Tensor, mask: Tensor, delta: float) -> Tensor:
    """Off-policy sequence masking (OPSM; DeepSeek-V3.2, arXiv 2512.02556, eq. 9): 0 on a token whose
    advantage is negative and whose sequence's mean ``log μ − log π`` over the mask exceeds
    ``delta``, 1 elsewhere (TRL 1.16.0 ``GRPOTrainer.get_off_policy_mask``: keep where ``A ≥ 0`` or
    ``KL ≤ δ``; slime ``compute_opsm_mask``, per token of a per-token advantage).

    ``logp`` is detached here. Shapes: adv, logp, behav_logp, mask [B, T] → [B, T] (float, every
    position; a row without mask tokens has KL 0)."""
    m = mask.to(logp.dtype)
    kl = ((behav_logp - logp.detach()) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    return ((adv >= 0) | (kl <= delta)).to(logp.dtype)


def top_entropy_mask(entropy: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """The high-entropy minority (Wang et al. 2025, arXiv 2506.01939): True on the mask tokens whose
    entropy is at least the ``1 − quantile`` quantile of the mask tokens' entropies (``torch.quantile``,
    linear interpolation; ties at the threshold are kept), as TRL 1.16.0
    ``GRPOTrainer.get_high_entropy_mask`` with ``top_entropy_quantile = quantile``: 1 keeps every
    token, 0 the highest-entropy one(s). Shapes: entropy, mask [B, T] → [B, T] bool (False off the
    mask, and everywhere when the mask is empty)."""
    sel = mask > 0
    vals = entropy.detach()[sel].float()
    if vals.numel() == 0:
        return torch.zeros_like(sel)
    threshold = torch.quantile(vals, 1.0 - quantile)
    return (entropy.detach().float() >= threshold) & sel


# -- turn-level estimators (multi-turn episodes: ``Batch.turn_id``, ``Batch.turn_states``) ----------

def turn_counts(turn_id: Tensor, loss_mask: Tensor) -> Tensor:
    """Policy turns per row: 1 + the largest ``turn_id`` on a policy token (0 for a row without any).

    Args: turn_id [B, T] long (−1 on prompt/padding); loss_mask [B, T]. Returns [B] long.
    """
    on = loss_mask > 0
    return torch.where(on, turn_id, torch.full_like(turn_id, -1)).amax(-1).clamp(min=-1) + 1


def turns_to_tokens(turn_values: Tensor, turn_id: Tensor, loss_mask: Tensor) -> Tensor:
    """Per-turn values ``[B, N]`` → per-token ``[B, T]``: every policy token of turn ``k`` of row ``b``
    gets ``turn_values[b, k]``; 0 off the loss mask (prompt, observations, padding) and on tokens
    whose turn is outside ``0..N−1``.

    Args: turn_values [B, N]; turn_id [B, T] long; loss_mask [B, T]. Returns [B, T] (dtype of turn_values).
    """
    n = turn_values.shape[1]
    inside = (turn_id >= 0) & (turn_id < n)
    vals = turn_values.gather(1, turn_id.clamp(0, max(n - 1, 0)))
    return torch.where(inside, vals, torch.zeros_like(vals)) * loss_mask.to(vals.dtype)


def discounted_turn_returns(rewards: Tensor, n_turns: Tensor, width: int, gamma: float) -> Tensor:
    """Discounted return at every turn of a sparse outcome reward paid after the last turn:
    ``G[b, k] = γ^(n_b − 1 − k) · R_b`` for ``k < n_b``, 0 beyond (GiGPO's Eq. 5 with all step
    rewards 0 but the last).

    Args: rewards [B]; n_turns [B] long; width N ≥ max n_turns; gamma ∈ [0, 1]. Returns [B, N].
    """
    k = torch.arange(width, device=rewards.device)[None, :]
    left = n_turns[:, None] - 1 - k  # turns after turn k
    disc = torch.full(left.shape, float(gamma), dtype=rewards.dtype, device=rewards.device).pow(left.clamp(min=0))
    return torch.where(left >= 0, disc * rewards[:, None], torch.zeros((), dtype=rewards.dtype))
