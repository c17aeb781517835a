"""Reporting statistics as pure functions (reports/METRICS.md §4; rliable conventions).

Data convention (rliable, Agarwal et al. 2021, arXiv 2108.13264): one array per
algorithm, `scores: (R, T)` = runs (seeds) x tasks. Ragged data (a task with fewer
seeds) is NaN-padded; NaN means "no run", so every function works on the finite
entries of each task column. Aggregates weight tasks equally and follow rliable 1.2.0's
`rliable/metrics.py` definitions (mean of per-task means; IQM of all run x task scores
pooled; median over tasks of the per-task mean; optimality gap over all scores).

The modules, by concern (every name is re-exported here, so ``from rlsuite.reports.stats import
X`` works for all of them):

- ``intervals``: `bootstrap_ci`: one sample's mean (or IQM) with a percentile or BCa bootstrap
  CI (scipy.stats.bootstrap), a Student-t CI, or a studentized (bootstrap-t) CI; `auto` picks
  the method per n from the measured coverage table `CELL_COVERAGE`. `stratified_interval`:
  aggregates across tasks (mean, IQM, median, optimality gap) with a stratified bootstrap (runs
  resampled within each task; §4.3): percentile, Student-t with Welch-Satterthwaite df (mean
  only) or studentized bootstrap; `auto` uses `AGGREGATE_COVERAGE`. `paired_difference`: mean
  of x - y over shared seeds, stratified paired bootstrap (or t); `interaction_contrast` builds
  the 2x2 contrast per seed and does the same.
- ``aggregates``: the aggregates (`AGGREGATES`, `iqm`), the stratified resampler,
  `probability_of_improvement` / `poi_interval`: P(X > Y) as a normalised Mann-Whitney U per
  task averaged over tasks, CI from independent stratified bootstraps (§4.4);
  `performance_profile` / `profile_interval`: F(tau) = fraction of scores > tau (§4.4).
- ``tests``: `t_test`, `randomization_p`, `holm`, `holm_levels`: the tests behind the report's
  verdicts (the small-sample rule of every comparison is ``reports/smallsample.py``).
- ``power``: `minimum_detectable_difference`, `mdd_from_test`, `seeds_needed`: the power of each
  comparison.
- ``coverage``: the measured coverage tables (data: ``reports/coverage.json``), the `auto`
  choice (`choose_method`, `resolve_method`) and the footers that report it.
- ``base``: `Interval`, `Columns`, the CI method names.

All intervals are `Interval(point, low, high)`. A single observation gives a NaN CI
(there is nothing to resample; the table shows "n/a"); identical observations give a
zero-width CI. Percentile/BCa bootstrap CIs over 3-5 seeds under-cover (`CELL_COVERAGE`,
measured by benchmarks/report_scale.py, results in `COVERAGE_FILE`).

A test that patches a module constant (``PAIRWISE_MAX``, ``RANDOMIZATION_EXACT_MAX``) patches it
in the module that reads it (``rlsuite.reports.stats.aggregates``, ``...tests``), not here.
"""

from rlsuite.reports.stats.base import (Aggregate, CIMethod, CI_CHOICES, CI_METHODS, CI_NAMES, Columns, Interval,
                                        NAN_INTERVAL)
from rlsuite.reports.stats.coverage import (AGGREGATE_COVERAGE, CELL_COVERAGE, COVERAGE_DATA, COVERAGE_DISTS,
                                            COVERAGE_FILE, CoverageTable, PREFERENCE, UNDER_COVERAGE_NOTE,
                                            aggregate_coverage_table, choose_method, coverage_note, coverage_row,
                                            load_coverage, resolve_method)
from rlsuite.reports.stats.aggregates import (AGGREGATES, PAIRWISE_MAX, agg_iqm, agg_mean, agg_median,
                                              agg_optimality_gap, agg_pooled_median, columns, iqm, percentile_ci,
                                              performance_profile, poi_interval, probability_of_improvement,
                                              profile_interval, resample_columns)
from rlsuite.reports.stats.intervals import (CONSTANT_RTOL, STRATIFIED_METHODS, aggregate_coverage_note, bootstrap_ci,
                                             difference_interval, interaction_contrast, paired_difference,
                                             satterthwaite, stratified_interval, stratified_method, t_interval,
                                             two_level_interval, unpaired_difference, variance_terms)
from rlsuite.reports.stats.tests import (RANDOMIZATION_DRAWS, RANDOMIZATION_EXACT_MAX, TTest, holm, holm_levels,
                                         randomization_p, t_test, t_test_interval)
from rlsuite.reports.stats.power import (mdd_from_test, minimum_detectable_difference, seeds_needed)

# private helpers that other report modules and tests import from here (reports/smallsample.py, reports/tables.py,
# tests/reports/test_reports_stats.py)
from rlsuite.reports.stats.aggregates import _aligned as _aligned, _poi as _poi
from rlsuite.reports.stats.base import _sps as _sps

__all__ = ["Aggregate", "CIMethod", "CI_CHOICES", "CI_METHODS", "CI_NAMES", "Columns", "Interval", "NAN_INTERVAL",
           "AGGREGATE_COVERAGE", "CELL_COVERAGE", "COVERAGE_DATA", "COVERAGE_DISTS", "COVERAGE_FILE", "CoverageTable",
           "PREFERENCE", "UNDER_COVERAGE_NOTE", "aggregate_coverage_table", "choose_method", "coverage_note",
           "coverage_row", "load_coverage", "resolve_method", "AGGREGATES", "PAIRWISE_MAX", "agg_iqm", "agg_mean",
           "agg_median", "agg_optimality_gap", "agg_pooled_median", "columns", "iqm", "percentile_ci",
           "performance_profile", "poi_interval", "probability_of_improvement", "profile_interval",
           "resample_columns", "CONSTANT_RTOL", "STRATIFIED_METHODS", "aggregate_coverage_note", "bootstrap_ci",
           "difference_interval", "interaction_contrast", "paired_difference", "satterthwaite", "stratified_interval",
           "stratified_method", "t_interval", "two_level_interval", "unpaired_difference", "variance_terms",
           "RANDOMIZATION_DRAWS", "RANDOMIZATION_EXACT_MAX", "TTest", "holm", "holm_levels", "randomization_p",
           "t_test", "t_test_interval", "mdd_from_test", "minimum_detectable_difference", "seeds_needed"]
