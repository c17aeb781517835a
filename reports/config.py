"""Report configuration and the error type the CLI turns into exit code 2.

Every knob of a report lives here, documented once under its field. Stability
thresholds have their own dataclass in `reports.stability` and are nested here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlsuite.reports.errors import ReportError
from rlsuite.reports.normalise import MODES as NORMALISE_MODES
from rlsuite.reports.normalise import NormaliseMode
from rlsuite.reports.stability import StabilityThresholds
from rlsuite.reports.stats import CI_CHOICES, CIMethod

__all__ = ["ReportConfig", "ReportError", "BUDGET_KEYS", "X_AXES"]

ScoreMode = Literal["final", "last-k"]

BUDGET_KEYS = ("prompts", "samples", "gen_tokens", "train_tokens", "updates", "flops", "wall_s")
"""Suffixes of the cumulative `budget/*` counters of the run-folder contract."""

X_AXES = ("step",) + tuple(f"budget/{k}" for k in BUDGET_KEYS)
"""Valid x-axes for curves, time-to-target and scaling fits."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportConfig:
    """All settings of one report; defaults are the published-table settings."""

    score: ScoreMode = "final"
    """How a run is scored: `final` = the final test eval at the matched budget;
    `last-k` = the mean of the last `k` val evals."""
    k: int = 3
    """Number of trailing val evals averaged when `score="last-k"`."""
    metric: str = "greedy_acc"
    """Eval metric (the part after `eval/<task>/`) used for scores, e.g. `pass@1`, `avg@8`."""
    normalise: NormaliseMode = "auto"
    """How each task's scores enter the aggregates across tasks (mean, IQM, median, optimality gap,
    the paired differences' "all tasks" rows; `rlsuite.reports.normalise`): `raw`; `gain` = s − b;
    `headroom` = (s − b) / (1 − b), b = the task's base (step 0) score; `auto`: headroom when the
    aggregates span > 1 task (gain if some score lies outside [0, 1]), raw for one task. Per-task
    tables stay raw. A task without a base (gain, headroom) or with b ≥ 1 (headroom) is refused."""
    per_dataset: bool | None = None
    """Battery tasks (a multi-dataset task whose evals log per-dataset variants `<metric>_<label>`
    of the scored metric, e.g. reasoning_gym's `greedy_acc_gcd`): True = every run of such a task
    becomes one scored row per dataset, task `<task>[<label>]`, scored (and its base taken) from
    `<metric>_<label>` (`rlsuite.reports.battery`); False = the pooled metric, one row per run;
    None (default) = True for runs whose spec lists >= 2 `task.datasets` (a mixture; `hops_toy`'s
    per-hop variants stay pooled), False elsewhere. True with no variant logged anywhere is
    refused. Applied by `build_report` (`battery.expand`); `score_runs` scores the RunSet given."""
    reps: int = 2000
    """Bootstrap resamples for every CI in the tables (>= 2000 for published tables)."""
    ci: CIMethod = "auto"
    """CI method of every interval of a mean over seeds (leaderboard cells, aggregates, paired
    differences): `percentile` or `bca` (`scipy.stats.bootstrap`), `t` (Student-t; Welch-
    Satterthwaite for stratified means), `studentized` (bootstrap-t), or `auto`: per n, the
    method with the best measured coverage (`rlsuite.reports.stats.CELL_COVERAGE` and
    `AGGREGATE_COVERAGE`, from benchmarks/report_scale/report_coverage.md). Stratified intervals
    have no BCa (`bca` gives percentile there); the IQM has no t (`t` gives studentized)."""
    confidence: float = 0.95
    """Confidence level of every interval."""
    seed: int = 0
    """Random state of every bootstrap (fixed, so tables are reproducible)."""
    x: str = "budget/samples"
    """x-axis of curves and time-to-target: `step` or any `budget/*` counter."""
    target: float | None = None
    """Time-to-target threshold on the smoothed val score; None = 80% of the best
    algorithm's mean score per task."""
    smooth: int = 3
    """Trailing window (in evals) of the moving average applied before time-to-target."""
    reference: str | None = None
    """Algorithm label that paired differences compare against; None = the best by IQM."""
    include_partial: bool = False
    """Score running/preempted/cancelled runs at their last eval (else they are listed
    as excluded)."""
    scaling_x: str = "budget/flops"
    """Compute axis of the sigmoid scaling fit."""
    scaling_skip_frac: float = 0.015
    """Fraction of each run's compute range dropped from the start before fitting. Default:
    ScaleRL's share (Khatri et al. 2025, "The Art of Scaling RL Compute", arXiv 2510.13786),
    which leaves the noisy first ~1.5k GPU-hours of a ~100k GPU-hour run out of its sigmoid fits;
    1.5k / 100k = 0.015. The step-0 eval (compute 0) is never fitted: it gives R0."""
    scaling_reps: int = 200
    """Bootstrap resamples over seeds for the fit parameters (each is one curve_fit)."""
    examples_per_algorithm: int = 3
    """Example completions shown per algorithm (from samples.jsonl)."""
    max_depth: int = 3
    """Maximum depth below the root at which run folders (with spec.json) are searched."""
    figures: bool = True
    """Draw figures (PNG + SVG); off makes a table-only report."""
    figure_formats: tuple[str, ...] = ("png", "svg")
    """File formats written for each figure; PNG is embedded in report.html."""
    stability: StabilityThresholds = field(default_factory=StabilityThresholds)
    """Thresholds of the stability classification."""
    comparisons: tuple[tuple[str, str, str, float], ...] = ()
    """The planned comparisons ``(a, b, direction, smallest_effect)`` (a sweep spec's or study's
    ``comparisons``; ``rlsuite report --comparisons FILE``): their Holm family is the report's
    confirmatory one, printed first (`tables.planned_table`); the all-pairs verdicts are exploratory."""
    checks: tuple[tuple, ...] = ()
    """The manipulation checks ``(arm, signal, agg, op, value, seeds, after)`` (the fields of
    :class:`rlsuite.sweeps.spec.Check`; a sweep spec's or study's ``checks``, read with its
    comparisons): evaluated on the report's runs (table `checks`), and a planned comparison whose
    arm fails one says so beside its verdict."""

    def __post_init__(self) -> None:
        if self.score not in ("final", "last-k"):
            raise ReportError(f"unknown score mode {self.score!r}; valid: final, last-k")
        if self.ci not in CI_CHOICES:
            raise ReportError(f"unknown CI method {self.ci!r}; valid: {', '.join(CI_CHOICES)}")
        if self.normalise not in NORMALISE_MODES:
            raise ReportError(f"unknown normalisation {self.normalise!r}; valid: {', '.join(NORMALISE_MODES)}")
        if self.per_dataset not in (None, True, False):
            raise ReportError(f"per_dataset must be True, False or None (automatic), got {self.per_dataset!r}")
        if self.k < 1:
            raise ReportError(f"k must be >= 1, got {self.k}")
        if self.reps < 10:
            raise ReportError(f"reps must be >= 10 (>= 2000 for published tables), got {self.reps}")
        if not 0.5 < self.confidence < 1:
            raise ReportError(f"confidence must be in (0.5, 1), got {self.confidence}")
        for name in ("x", "scaling_x"):
            if getattr(self, name) not in X_AXES:
                raise ReportError(f"unknown x-axis {getattr(self, name)!r} for {name}; "
                                  f"valid: {', '.join(X_AXES)}")
        if self.smooth < 1:
            raise ReportError(f"smooth must be >= 1 eval, got {self.smooth}")
        if not 0 <= self.scaling_skip_frac < 1:
            raise ReportError(f"scaling_skip_frac must be in [0, 1), got {self.scaling_skip_frac}")
        for c in self.comparisons:
            if len(c) != 4 or c[2] not in ("greater", "less", "two-sided") or not c[3] >= 0:
                raise ReportError(f"bad planned comparison {c!r}; expected (a, b, direction, smallest_effect) with "
                                  f"direction one of greater, less, two-sided and smallest_effect >= 0")
        for c in self.checks:
            if len(c) != 7 or c[2] not in ("mean", "final", "change", "rel_change") or c[3] not in (">=", "<="):
                raise ReportError(f"bad manipulation check {c!r}; expected (arm, signal, agg, op, value, seeds, "
                                  f"after) with agg one of mean, final, change, rel_change and op >= or <=")
        bad = set(self.figure_formats) - {"png", "svg", "pdf"}
        if bad:
            raise ReportError(f"unknown figure formats {sorted(bad)}; valid: png, svg, pdf")
