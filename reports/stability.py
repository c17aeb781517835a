"""Stability classification of runs (reports/METRICS.md §1.7, §4.5).

The trainer logs raw signals (loss finiteness, entropy, KL, truncation, reward, evals);
this module turns them into flags with configurable thresholds, so thresholds can
change without rerunning. A run is *unstable* if any flag holds (for its window); the
reasons say which flag, the signal, the threshold and where it first held. Unstable
runs stay in the aggregates (§4.5); the "stable k/n" column counts them.

Flags:
  1. `nonfinite`: the run diverged (status) or >= `nonfinite_steps` steps had a
     non-finite loss/grad (`stability/nonfinite`, `loss/total`, `loss/policy`).
  2. `reward_collapse`: the val eval score falls more than `reward_drop` below its
     running peak for `reward_drop_evals` consecutive evals.
  3. `reward_crash`: the training reward (moving average over `window_steps`) stays
     below `train_reward_frac` x its running peak for `window_steps` steps.
  4. `entropy_collapse` / `entropy_blowup`: `stats/entropy` below `entropy_min`
     (above `entropy_max`) for `window_steps` consecutive steps.
  5. `kl_blowup`: `stats/kl_ref` or `mismatch/kl` above `kl_max` for `window_steps` steps.
  6. `length_at_cap`: `len/truncated_frac` >= `truncated_frac_max`, or the mean response
     length within `cap_tolerance` of `rollout.max_new_tokens`, for `window_steps` steps.

Report tables: `stability_summary` (one row per algorithm, always: "stable in k/n runs" and
the flags that fired) and `flagged_runs` (the flagged runs with reasons; the report prints
"No flagged runs" instead of an empty table).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where it is used: `rlsuite run` imports this module (~0.8 s)
    import pandas as pd


@dataclass(frozen=True, kw_only=True, slots=True)
class StabilityThresholds:
    """Thresholds of the stability flags; None switches a flag off."""

    nonfinite_steps: int = 1
    """Number of steps with a non-finite loss or gradient that makes a run unstable."""
    reward_drop: float | None = 0.2
    """Absolute drop of the val eval score below its running peak that counts as collapse."""
    reward_drop_evals: int = 2
    """Consecutive evals the drop must hold for."""
    train_reward_frac: float | None = 0.5
    """Training reward crash: smoothed `reward/mean` below this fraction of its running peak
    (checked only once the peak is positive)."""
    entropy_min: float | None = 0.01
    """Token entropy (nats) below which the policy has collapsed."""
    entropy_max: float | None = None
    """Token entropy above which the policy has blown up (off by default)."""
    kl_max: float | None = 1.0
    """Bound on `stats/kl_ref` and `mismatch/kl`."""
    truncated_frac_max: float | None = 0.9
    """Fraction of truncated responses at which the length is pinned at the cap."""
    cap_tolerance: float = 0.02
    """Mean response length >= (1 - tolerance) x max_new_tokens also counts as pinned."""
    window_steps: int = 5
    """Consecutive training steps a per-step flag must hold for."""

    def __post_init__(self) -> None:
        for name in ("nonfinite_steps", "reward_drop_evals", "window_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class StabilityResult:
    """Verdict for one run: `stable` and the human-readable reasons when not."""

    stable: bool
    reasons: tuple[str, ...]


NONFINITE_COL = "_nonfinite"
"""Per-step bool column the loader adds: a `loss/*` value was NaN/Inf or
`stability/nonfinite` was set (NaN in a wide frame cannot tell "NaN" from "absent")."""


def first_window(mask: np.ndarray, window: int) -> int | None:
    """Index where the first run of >= `window` consecutive True values starts, else None.

    Shapes: mask (T,) bool.
    """
    mask = np.asarray(mask, dtype=bool)
    if window < 1 or mask.size < window:
        return None
    hits = np.convolve(mask.astype(np.int64), np.ones(window, dtype=np.int64), "valid") >= window
    return int(np.argmax(hits)) if hits.any() else None


def _steps(metrics: pd.DataFrame) -> np.ndarray:
    return metrics["step"].to_numpy() if "step" in metrics else np.arange(1, len(metrics) + 1)


def _col(metrics: pd.DataFrame, key: str) -> np.ndarray | None:
    if key not in metrics:
        return None
    import pandas as pd

    vals = pd.to_numeric(metrics[key], errors="coerce").to_numpy(dtype=float)
    return vals if np.isfinite(vals).any() or key.startswith(("loss/", "stability/")) else None


def _nonfinite(metrics: pd.DataFrame, state: str, reason: str | None, th: StabilityThresholds) -> list[str]:
    out = []
    if state == "diverged":
        why = (reason if isinstance(reason, str) and reason else "no reason given").replace(";", ",")
        out.append(f"nonfinite: status diverged ({why})")
    bad = np.zeros(len(metrics), dtype=bool)
    if NONFINITE_COL in metrics:  # computed by the loader from the raw rows
        bad |= metrics[NONFINITE_COL].fillna(False).to_numpy(dtype=bool)
    flag = _col(metrics, "stability/nonfinite")
    if flag is not None:
        bad |= np.nan_to_num(flag, nan=0.0) > 0
    for key in ("loss/total", "loss/policy"):
        vals = _col(metrics, key)
        if vals is not None:
            bad |= np.isinf(vals)
    if bad.sum() >= th.nonfinite_steps:
        first = int(_steps(metrics)[np.argmax(bad)])
        out.append(f"nonfinite: {int(bad.sum())} step(s) with NaN/Inf loss or grad, first at step {first}")
    return out


def _windowed(metrics: pd.DataFrame, key: str, mask_fn, window: int, what: str) -> list[str]:
    vals = _col(metrics, key)
    if vals is None:
        return []
    start = first_window(mask_fn(vals), window)
    if start is None:
        return []
    return [f"{what}: {key} for {window} steps from step {int(_steps(metrics)[start])}"]


def _per_step_flags(metrics: pd.DataFrame, max_new_tokens: float | None, th: StabilityThresholds) -> list[str]:
    w, out = th.window_steps, []
    if th.entropy_min is not None:
        out += _windowed(metrics, "stats/entropy", lambda v: v < th.entropy_min, w,
                         f"entropy_collapse (< {th.entropy_min:g})")
    if th.entropy_max is not None:
        out += _windowed(metrics, "stats/entropy", lambda v: v > th.entropy_max, w,
                         f"entropy_blowup (> {th.entropy_max:g})")
    if th.kl_max is not None:
        for key in ("stats/kl_ref", "mismatch/kl"):
            out += _windowed(metrics, key, lambda v: v > th.kl_max, w, f"kl_blowup (> {th.kl_max:g})")
    if th.truncated_frac_max is not None:
        out += _windowed(metrics, "len/truncated_frac", lambda v: v >= th.truncated_frac_max, w,
                         f"length_at_cap (truncated >= {th.truncated_frac_max:g})")
    if max_new_tokens and not any(r.startswith("length_at_cap") for r in out):
        cap = (1 - th.cap_tolerance) * float(max_new_tokens)
        out += _windowed(metrics, "len/response_mean", lambda v: v >= cap, w,
                         f"length_at_cap (mean length >= {cap:g} of cap {max_new_tokens:g})")
    return out


def _reward_crash(metrics: pd.DataFrame, th: StabilityThresholds) -> list[str]:
    vals = _col(metrics, "reward/mean")
    if th.train_reward_frac is None or vals is None:
        return []
    import pandas as pd

    w = th.window_steps
    smooth = pd.Series(vals).rolling(w, min_periods=w).mean().to_numpy()
    peak = np.fmax.accumulate(np.where(np.isfinite(smooth), smooth, -np.inf))
    mask = (peak > 0) & (smooth < th.train_reward_frac * peak)
    start = first_window(mask, w)
    if start is None:
        return []
    step = int(_steps(metrics)[start])
    return [f"reward_crash: reward/mean ({w}-step mean) < {th.train_reward_frac:g} x running peak "
            f"for {w} steps from step {step}"]


def _reward_collapse(eval_steps: np.ndarray, eval_scores: np.ndarray, th: StabilityThresholds) -> list[str]:
    if th.reward_drop is None or len(eval_scores) == 0:
        return []
    scores = np.asarray(eval_scores, dtype=float)
    peak = np.fmax.accumulate(np.where(np.isfinite(scores), scores, -np.inf))
    mask = np.isfinite(scores) & (scores < peak - th.reward_drop)
    start = first_window(mask, th.reward_drop_evals)
    if start is None:
        return []
    return [f"reward_collapse: val score > {th.reward_drop:g} below its running peak for "
            f"{th.reward_drop_evals} evals from step {int(eval_steps[start])}"]


def classify_run(
    metrics: pd.DataFrame,
    eval_steps: np.ndarray,
    eval_scores: np.ndarray,
    *,
    state: str,
    reason: str | None,
    max_new_tokens: float | None,
    thresholds: StabilityThresholds,
) -> StabilityResult:
    """Classify one run as stable or not, with reasons.

    Args:
        metrics: the run's training rows (columns `step` and metric keys), in step order.
        eval_steps, eval_scores: the run's val eval steps and scores, in step order.
        state: `status.json` state; `diverged` is always unstable.
        reason: `status.json` reason (quoted in the verdict).
        max_new_tokens: `rollout.max_new_tokens` for the length-at-cap rule (None: skip).
        thresholds: the thresholds.

    Shapes: metrics (S, M); eval_steps, eval_scores (E,).
    """
    reasons = _nonfinite(metrics, state, reason, thresholds)
    reasons += _reward_collapse(np.asarray(eval_steps), eval_scores, thresholds)
    reasons += _reward_crash(metrics, thresholds)
    reasons += _per_step_flags(metrics, max_new_tokens, thresholds)
    return StabilityResult(stable=not reasons, reasons=tuple(reasons))


def flag_names(reasons: str) -> set[str]:
    """Flag names in a "; "-joined reasons string ("entropy_collapse (< 0.01): ..." -> entropy_collapse)."""
    if not isinstance(reasons, str) or not reasons:
        return set()
    return {r.split(":")[0].split(" (")[0] for r in reasons.split("; ")}


STABILITY_SUMMARY_COLUMNS = ("algorithm", "stable_k", "stable_n", "stable", "flags")
FLAGGED_RUN_COLUMNS = ("task", "algorithm", "seed", "run_id", "state", "reasons")


def stability_summary(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per algorithm, always (all tasks pooled): stable k of n runs and the flags that fired.

    Args:
        scores: per-run rows with `algorithm`, `stable` (bool) and `reasons` ("; "-joined).

    Returns columns `STABILITY_SUMMARY_COLUMNS`: `stable` reads "stable in k/n runs"; `flags`
    lists "flag: runs" (a run counts once per flag) or "none".
    """
    import pandas as pd

    rows = []
    for alg, g in scores.groupby("algorithm", sort=True):
        k, n = int(g["stable"].astype(bool).sum()), len(g)
        counts = pd.Series([f for r in g["reasons"] for f in sorted(flag_names(r))], dtype=object).value_counts()
        flags = "; ".join(f"{f}: {int(c)}" for f, c in sorted(counts.items())) or "none"
        rows.append({"algorithm": alg, "stable_k": k, "stable_n": n, "stable": f"stable in {k}/{n} runs",
                     "flags": flags})
    return pd.DataFrame(rows, columns=list(STABILITY_SUMMARY_COLUMNS))


def flagged_runs(scores: pd.DataFrame) -> pd.DataFrame:
    """The runs with at least one flag, and why (empty when every run is stable).

    Returns columns `FLAGGED_RUN_COLUMNS`, sorted by task, algorithm, seed.
    """
    bad = scores[~scores["stable"].astype(bool)]
    return bad[list(FLAGGED_RUN_COLUMNS)].sort_values(
        ["task", "algorithm", "seed"], key=lambda c: c.astype(str)).reset_index(drop=True)
