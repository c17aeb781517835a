"""Measured coverage of the interval methods, and the `auto` choice made from it.

The tables (`CELL_COVERAGE`: one sample's mean over n seeds; `AGGREGATE_COVERAGE`: stratified
aggregates over several tasks) are data, not code: ``reports/coverage.json``, copied from the
committed study in `COVERAGE_FILE` (``python benchmarks/report_scale.py --part coverage``) and
loaded at import. `choose_method` picks, per n, the method with the best worst-case measured
coverage; `coverage_note` and `UNDER_COVERAGE_NOTE` are the report footers that say so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from rlsuite.reports.stats.base import CI_CHOICES, CI_METHODS, CI_NAMES

COVERAGE_FILE = "benchmarks/report_scale/report_coverage.md"
"""Where `CELL_COVERAGE` and `AGGREGATE_COVERAGE` were measured (benchmarks/report_scale.py)."""
COVERAGE_DISTS = ("normal", "Beta(2, 8)", "collapse mixture")
"""Score distributions of the coverage study, in the order of each coverage tuple."""


class CoverageTable(NamedTuple):
    """Measured coverage of nominal 95% intervals: rows[n][method] = (normal, Beta(2, 8),
    collapse mixture), each from `draws` simulated samples of n seeds (per task)."""

    draws: int
    rows: dict[int, dict[str, tuple[float, float, float]]]


COVERAGE_DATA = Path(__file__).resolve().parent.parent / "coverage.json"
"""The measured tables as data (the package data of ``rlsuite.reports``): one-sample ``cell`` and
stratified ``aggregate`` (name -> number of tasks -> table), each ``{"draws", "rows": {n: {method:
[coverage per distribution of `COVERAGE_DISTS`]}}}``. When the coverage study is rerun, its new
numbers go into that file."""


def _table(d: dict) -> CoverageTable:
    return CoverageTable(int(d["draws"]), {int(n): {m: tuple(float(v) for v in cov) for m, cov in row.items()}
                                           for n, row in d["rows"].items()})


def load_coverage(path: Path = COVERAGE_DATA) -> tuple[CoverageTable, dict[str, dict[int, CoverageTable]]]:
    """(`CELL_COVERAGE`, `AGGREGATE_COVERAGE`) read from ``path`` (a file of `COVERAGE_DATA`'s layout)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if tuple(data["distributions"]) != COVERAGE_DISTS:
        raise ValueError(f"{path}: coverage measured on {data['distributions']}, expected {list(COVERAGE_DISTS)}")
    aggregate = {name: {int(k): _table(t) for k, t in by.items()} for name, by in data["aggregate"].items()}
    return _table(data["cell"]), aggregate


CELL_COVERAGE: CoverageTable
"""One sample's mean over n seeds (a leaderboard cell; a per-task paired difference)."""
AGGREGATE_COVERAGE: dict[str, dict[int, CoverageTable]]
"""Stratified aggregates, name -> number of tasks -> table (n = seeds per task); methods
percentile, t (Welch-Satterthwaite for the mean, Tukey-McLaughlin for the IQM), studentized."""
CELL_COVERAGE, AGGREGATE_COVERAGE = load_coverage()


PREFERENCE = ("t", "studentized", "percentile", "bca")
"""Tie order of `choose_method` (simplest first)."""


def aggregate_coverage_table(name: str, n_tasks: int) -> CoverageTable | None:
    """The measured table for a stratified `name` over n_tasks tasks: one task's mean is the
    one-sample table; else the largest measured task count <= n_tasks (or the smallest)."""
    if name == "mean" and n_tasks == 1:
        return CELL_COVERAGE
    by_tasks = AGGREGATE_COVERAGE.get(name, {})
    if not by_tasks:
        return None
    use = max([t for t in by_tasks if t <= n_tasks], default=min(by_tasks))
    return by_tasks[use]


def coverage_row(n: int, table: CoverageTable) -> tuple[int, dict[str, tuple[float, float, float]]]:
    """The measured row for n seeds: the largest measured n' <= n (the smallest row below it)."""
    measured = sorted(table.rows)
    if not measured:
        raise ValueError("empty coverage table")
    use = max([m for m in measured if m <= n], default=measured[0])
    return use, table.rows[use]


def choose_method(n: int, table: CoverageTable | None = None, candidates: Iterable[str] = CI_METHODS,
                  nominal: float = 0.95) -> str:
    """The method with the best worst-case measured coverage at n seeds.

    Score = min over the distributions of min(coverage, nominal) (over-coverage earns no
    credit). Methods within two Monte Carlo standard errors of the best score,
    2 sqrt(b (1 - b) / draws), are tied and `PREFERENCE` decides (simplest first).
    """
    table = CELL_COVERAGE if table is None else table
    _, row = coverage_row(n, table)
    scores = {m: min(min(c, nominal) for c in row[m]) for m in candidates if m in row}
    if not scores:
        raise ValueError(f"no measured coverage for methods {list(candidates)}")
    best = max(scores.values())
    tie = 2 * math.sqrt(best * (1 - best) / table.draws)
    return next(m for m in PREFERENCE if m in scores and scores[m] >= best - tie - 1e-12)


def resolve_method(method: str, n: int, table: CoverageTable | None = None,
                   candidates: Iterable[str] = CI_METHODS) -> str:
    """`method`, or for `auto` the measured choice at n seeds (`choose_method`)."""
    if method not in CI_CHOICES:
        raise ValueError(f"unknown CI method {method!r}; valid: {', '.join(CI_CHOICES)}")
    return choose_method(max(n, 2), table, candidates) if method == "auto" else method


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _measured(m: str, group: list[int], table: CoverageTable | None, where: str = "") -> list[str]:
    out = []
    for r in sorted({coverage_row(n, table)[0] for n in group}) if table else []:
        vals = table.rows[r].get(m)
        if vals is None:
            continue
        text = ", ".join(f"{_pct(v)} {d}" for v, d in zip(vals, COVERAGE_DISTS, strict=True))
        low = [d for v, d in zip(vals, COVERAGE_DISTS, strict=True) if v < 0.94]
        under = f"; under-covers on {', '.join(low)}" if low else ""
        out.append(f"measured coverage at n = {r}{where}: {text}{under}")
    return out


def coverage_note(method: str, ns: Iterable[int], table: CoverageTable | None = None,
                  candidates: Iterable[str] = CI_METHODS, confidence: float = 0.95, unit: str = "seeds") -> str:
    """Footer text: the method used at each n present, with its measured coverage.

    E.g. "95% intervals: Student-t (n = 3 seeds; measured coverage at n = 3: 95.0% normal,
    93.5% Beta(2, 8), 86.1% collapse mixture; under-covers on Beta(2, 8), collapse mixture);
    benchmarks/report_scale/report_coverage.md." ("under-covers": below 94%).
    """
    table = CELL_COVERAGE if table is None else table
    candidates = tuple(candidates)
    by_method: dict[str, list[int]] = {}
    for n in sorted({int(n) for n in ns if n >= 2}):
        by_method.setdefault(resolve_method(method, n, table, candidates), []).append(n)
    if not by_method:
        return f"{confidence:.0%} intervals: none (no cell has two {unit})."
    parts = []
    for m, group in by_method.items():
        cov = _measured(m, group, table)
        parts.append(f"{CI_NAMES[m]} (n = {', '.join(map(str, group))} {unit}" + "".join(f"; {c}" for c in cov) + ")")
    head = f"{confidence:.0%} intervals" + (" (auto: best measured coverage per n)" if method == "auto" else "")
    note = "" if abs(confidence - 0.95) < 1e-9 else " (coverage measured at nominal 95%)"
    return f"{head}: " + "; ".join(parts) + f"{note}; {COVERAGE_FILE}."


def _under_coverage_note() -> str:
    pct = {n: row["percentile"][0] for n, row in sorted(CELL_COVERAGE.rows.items()) if "percentile" in row}
    shown = ", ".join(f"{_pct(v)} at n = {n}" for n, v in pct.items() if n in (3, 5, 10))
    return ("Percentile-bootstrap CIs over few seeds under-cover (nominal 95% covered the mean of normal "
            f"scores {shown or 'less than 95%'}; {COVERAGE_FILE}); `auto` picks the method with the best "
            "measured coverage per n.")


UNDER_COVERAGE_NOTE = _under_coverage_note()
"""Caveat for bootstrap intervals; the report footers print `coverage_note` instead."""
