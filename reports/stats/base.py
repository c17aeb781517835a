"""Types and helpers shared by the statistics modules (``rlsuite.reports.stats``).

`Interval` is what every interval function returns; `Columns` is the per-task layout of (runs x
tasks) scores that the aggregates and resamplers work on; `CIMethod` and `CI_CHOICES` name the
interval methods a report can ask for (`auto` picks one per n: ``coverage.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import numpy as np

Columns = list[np.ndarray]
"""Per-task samples: column j has shape (..., n_j) (a leading reps axis when resampled)."""
Aggregate = Callable[[Columns], np.ndarray]

CIMethod = Literal["auto", "percentile", "bca", "t", "studentized"]
CI_METHODS = ("percentile", "bca", "t", "studentized")
"""Interval methods of a mean over seeds; `auto` (the report default) picks one per n."""
CI_CHOICES = ("auto", *CI_METHODS)
CI_NAMES = {"percentile": "percentile bootstrap", "bca": "BCa bootstrap", "t": "Student-t",
            "studentized": "studentized (bootstrap-t) bootstrap"}


class Interval(NamedTuple):
    """A point estimate with its confidence interval (low <= point <= high, usually)."""

    point: float
    low: float
    high: float


def _sps():
    """``scipy.stats``, imported on first use (it costs ~1.3 s, and ``rlsuite run`` imports this module)."""
    import scipy.stats

    return scipy.stats


NAN_INTERVAL = Interval(float("nan"), float("nan"), float("nan"))


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float).ravel()
    return x[np.isfinite(x)]
