"""AGRO — "RL-finetuning LLMs from on- and off-policy data with a single algorithm" (Tang,
Cohen, Zhang, Valko, Munos et al., arXiv 2503.19612, AISTATS 2026).

Generation consistency (Theorem 1): at the optimum of ``E[R] − β·KL(π‖π_ref)`` the KL-adjusted
sequence reward ``U(y) = R(y) − β·log(π_θ(y|x)/π_ref(y|x))`` equals ``β·log Z(x)`` for every y.
The update, for G samples from *any* behaviour μ (on- or off-policy, no importance weights):

    g = (1/G)·Σ_i sg(U_i − Ū)·∇log π_θ(y_i|x),    Ū = mean_G U

Its fixed point is the consistency condition whatever μ is; on-policy it is the usual
KL-regularised policy gradient with a group-mean baseline. ``∇log π_θ(y_i|x)`` is the full
sequence log-prob, hence ``seq-mean-token-sum`` (per-token ``−sg(Â_i)·log π_θ(y_it)``, summed
over the sequence, averaged over sequences).

Differs from GGPO (``algorithms/ggpo.py``, which it shares the code with) by: 1. the arithmetic
mean contrast instead of log-mean-exp; 2. no reference refresh (π_ref fixed);
3. ``seq-mean-token-sum`` aggregation. Differs from GRPO by the contrast of U instead of a
z-score of R, no ratio/clip, and β inside the advantage instead of a KL loss.

Fidelity: ``abstract`` (plus secondary summaries); the core update is reconstructed from the
stated principle, see ``assumptions``. Metrics under ``algo/agro/``.

Source of the defaults (search tools, 2026-12-01): Tang, Cohen, Zhang, Valko, Munos, arXiv
2503.19612 (v2, Mar 2025; AISTATS 2026, OpenReview v8n0UHCu8R): the abstract and secondary
summaries (alphaxiv, chatpaper) were read; no code found. There the name expands to "Any-Generation
Reward Optimization". Stated: generation consistency, a sample-based policy gradient with
convergence guarantees, on- and off-policy data, MATH with Llama-3-8B (about +7% per alphaxiv).
No default (β, G, learning rate, aggregation) is stated in what was read: β 0.05 (inherited from
GGPO) and seq-mean-token-sum stay assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from rlsuite.algorithms.base import register
from rlsuite.algorithms.ggpo import GGPO, GGPOConfig
from rlsuite.suite.aggregation import AggMode


@dataclass(frozen=True, kw_only=True)
class AGROConfig(GGPOConfig):
    contrast: Literal["log_mean_exp", "mean"] = "mean"
    """Group baseline of U: arithmetic mean (AGRO) or Gibbs free energy (GGPO)."""
    refresh_every: Optional[int] = None
    """Copy π_θ into π_ref every T optimizer updates (null = never, AGRO's fixed reference)."""
    aggregation: AggMode = "seq-mean-token-sum"


@register
class AGRO(GGPO):
    name = "agro"
    not_group_relative = "contrast of the KL-adjusted U = R − β·Σ log(π_old/π_ref) (zero when π_ref = π_old, checked)"
    summary = "Mean contrast of the KL-adjusted sequence reward: one update for on- and off-policy data."
    citation = ("Tang, Cohen, Zhang, Valko, Munos et al. 2025, RL-finetuning LLMs from on- and off-policy data "
                "with a single algorithm, arXiv:2503.19612 (AISTATS 2026)")
    fidelity = "abstract"
    assumptions = (
        "Core update reconstructed from the stated principle: g = (1/G)·Σ_i sg(U_i − Ū)·∇log π_θ(y_i|x).",
        "U_i = R_i − β·Σ_t(log π_old − log π_ref): the sequence log-ratio uses π_old (the policy at rollout).",
        "β not known; 0.05 as GGPO's range 0.01–0.1; the generic kl_coef stays 0.",
        "Aggregation not known; seq-mean-token-sum because the gradient uses the full sequence log-prob.",
        "Off-policy data is trained without importance weights (the paper's point); μ never enters the loss.",
        "A singleton group has zero advantage (its mean is its own U).",
    )
    Config = AGROConfig
    cfg: AGROConfig
