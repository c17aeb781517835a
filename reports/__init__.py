"""rlsuite reports: run folders -> leaderboards with CIs, stability counts, ablations, curves.

Reads run folders only (never writes into them). Entry points:
- `build_report(root, out, config) -> Path` (path of report.html; `root` may be a list of
  roots: a compare report);
- `reports.cli.add_arguments(parser)` / `reports.cli.main(args) -> int` for `rlsuite report`;
- `python -m reports ROOT --out DIR` standalone.
Statistics follow rliable (Agarwal et al. 2021); see reports/METRICS.md §4.
"""

from rlsuite.reports.config import ReportConfig
from rlsuite.reports.errors import ReportError
from rlsuite.reports.stability import StabilityThresholds

__all__ = ["ReportConfig", "ReportError", "StabilityThresholds", "build_report"]


def __getattr__(name: str):
    if name == "build_report":  # imported on first use: the figures need the report extra (seaborn)
        from rlsuite.reports.build import build_report

        return build_report
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
