"""The loader warns on a run folder whose metrics.jsonl repeats steps (two writers).

Run: python -m pytest tests/reports/test_reports_duplicate_steps.py -q
"""

from __future__ import annotations

import pytest

from rlsuite.reports import synthetic
from rlsuite.reports.load import load_runs


def test_duplicated_step_rows_are_reported(tmp_path):
    clean = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0, steps=6)
    twice = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 1, steps=6)
    metrics = twice / "metrics.jsonl"
    metrics.write_text(metrics.read_text() * 2)  # two copies of the run wrote every row
    with pytest.warns(UserWarning, match="more than one row"):
        rs = load_runs(tmp_path)
    dup = [p for p in rs.problems if "more than one row" in p]
    assert len(dup) == 1 and str(twice) in dup[0] and str(clean) not in dup[0]
    assert "6 step(s)" in dup[0] and "6 extra rows" in dup[0] and "two writers" in dup[0]
    assert len(rs.metrics[rs.metrics.run_id == rs.runs.run_id[rs.runs.path == str(twice)].item()]) == 12
