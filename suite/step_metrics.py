"""Step 7's metric rows: the rollout statistics of a step and the merge of micro-batch metrics
(gathered over data-parallel ranks first)."""

from __future__ import annotations

import torch

from rlsuite.suite.ops import kl_estimate, masked_mean
from rlsuite.suite.types import Batch


def s_kl(cfg, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """The configured per-token KL estimator of KL(π‖π_ref)."""
    return kl_estimate(logp, ref_logp, cfg.kl_estimator)



def rollout_metrics(b: Batch, group_size: int, updates: float, algo_cfg) -> dict[str, float]:
    """Reward, advantage, group, length, staleness, mismatch and KL statistics of the first
    draw of a step (``updates``: the optimizer updates so far; ``algo_cfg``: its KL knobs)."""
    G = group_size
    m = b.loss_mask
    L = m.sum(-1)
    sc = b.scores.view(-1, G) if b.batch_size % G == 0 else b.scores[None]
    same = (sc == sc[:, :1]).all(-1)
    term = ~b.truncated.to(L.device)
    ok = (b.scores >= 1).to(L.device)  # a binary task's correct responses (score 1 of 0/1)
    out = {
        "reward/mean": float(b.scores.mean()), "reward/std": float(b.scores.std()) if b.batch_size > 1 else 0.0,
        "reward/min": float(b.scores.min()), "reward/max": float(b.scores.max()),
        "reward/shaped_mean": float(b.rewards.mean()),
        "adv/mean": float(masked_mean(b.adv, m)), "adv/std": float(b.adv[m > 0].std()) if m.sum() > 1 else 0.0,
        "adv/min": float(b.adv[m > 0].min()) if m.any() else 0.0,
        "adv/max": float(b.adv[m > 0].max()) if m.any() else 0.0,
        "adv/zero_frac": float(((b.adv.abs() * m).sum(-1) == 0).float().mean()),
        "group/zero_std_frac": float(same.float().mean()),
        "group/all_correct_frac": float((same & (sc[:, 0] >= 1)).float().mean()),
        "group/all_wrong_frac": float((same & (sc[:, 0] <= 0)).float().mean()),
        "group/mixed_frac": float((~same).float().mean()),
        "len/response_mean": float(L.mean()), "len/response_min": float(L.min()), "len/response_max": float(L.max()),
        "len/terminated_mean": float(L[term].mean()) if term.any() else float("nan"),
        "len/truncated_frac": float(b.truncated.float().mean()),
        "len/correct_mean": float(L[ok].float().mean()) if ok.any() else float("nan"),
        "len/wrong_mean": float(L[~ok].float().mean()) if (~ok).any() else float("nan"),
        "len/prompt_mean": float((b.attn_mask.sum(-1) - L).float().mean()),
        "offpolicy/staleness_mean": float((updates - b.policy_version).float().mean()),
        "offpolicy/staleness_max": float((updates - b.policy_version).max()),
    }
    if b.values is not None:
        out["value/mean"] = float(masked_mean(b.values, m))
    if b.old_logp is not None:  # else the trainer adds them after the update (π_old from its forward)
        out.update(old_logp_metrics(b, algo_cfg))
    return out


def old_logp_metrics(b: Batch, algo_cfg) -> dict[str, float]:
    """The statistics of π_old among :func:`rollout_metrics`: its gap to μ (``mismatch/*``) and its
    KL to the reference (``stats/kl_ref``, when ``b.ref_logp`` is set)."""
    m = b.loss_mask
    # re-contextualised rows (stage 2) differ from μ by design: their prompt changed
    mm = m if b.stage is None else m * (b.stage != 2)[:, None]
    d = (b.old_logp - b.behav_logp) * mm
    out = {"mismatch/kl": float(masked_mean(b.behav_logp - b.old_logp, mm)),
           "mismatch/logp_abs_diff_mean": float(masked_mean(d.abs(), mm)),
           "mismatch/logp_abs_diff_max": float(d.abs().max())}
    ratio = torch.exp(d)[mm > 0]
    if ratio.numel():
        out.update({"mismatch/ratio_mean": float(ratio.mean()), "mismatch/ratio_min": float(ratio.min()),
                    "mismatch/ratio_max": float(ratio.max())})
    if b.ref_logp is not None:
        out["stats/kl_ref"] = float(masked_mean(s_kl(algo_cfg, b.old_logp, b.ref_logp), m))
    return out



NORMS = ("stats/grad_norm", "stats/critic_grad_norm")
"""Per-update gradient norms (after the ranks' gradients are summed: the same on every rank): the
mean over the step's updates."""


def merge(acc: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Combine micro-batch metrics: ``*_min``/``*_max`` by min/max, ``loss/*`` summed (they are
    already weighted shares of the aggregated loss), the rest weighted by normaliser share."""
    out = {}
    for k, vals in acc.items():
        xs = [v for v, _ in vals]
        if k.endswith("_min"):
            out[k] = min(xs)
        elif k.endswith("_max"):
            out[k] = max(xs)
        elif k.startswith("loss/"):
            n_updates = max(1, len(acc.get("stats/grad_norm", [])))
            out[k] = sum(xs) / n_updates
        elif k in NORMS:
            out[k] = sum(xs) / len(xs)
        else:
            wsum = sum(w for _, w in vals)
            out[k] = sum(v * w for v, w in vals) / wsum if wsum > 0 else sum(xs) / len(xs)
    return out



def gather_ranks(acc: dict[str, list[tuple[float, float]]], world) -> dict[str, list[tuple[float, float]]]:
    """Every data-parallel rank's micro-batch metrics ``acc`` (``(value, normaliser share)`` lists),
    in rank order, as one process accumulates them before :func:`merge`; the gradient norms
    (:data:`NORMS`, the same on every rank) stay this rank's. In one process, ``acc`` itself."""
    if not world.active:
        return acc
    gathered = world.all_gather_object({k: v for k, v in acc.items() if k not in NORMS})
    return {k: (acc[k] if k in NORMS else [x for g in gathered for x in g.get(k, [])])
            for k in dict.fromkeys([*acc, *(k for g in gathered for k in g)])}
