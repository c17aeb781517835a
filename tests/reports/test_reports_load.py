"""Loader tolerance: corrupt, partial and running run folders are read without crashing,
problems are reported, and run folders are never modified (bytes and mtimes unchanged).

Run: python -m pytest tests/reports/test_reports_load.py -q
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from rlsuite.reports import ReportConfig, ReportError, build_report, synthetic
from rlsuite.reports.load import find_run_dirs, load_runs
from rlsuite.reports.stability import NONFINITE_COL


def snapshot(folder: Path) -> dict[str, tuple]:
    """relative path -> (sha1 of bytes, mtime_ns, mode) of every file and folder."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.stat()
            digest = hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            out[str(p.relative_to(folder))] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def make_messy_root(root: Path) -> dict[str, Path]:
    """One clean run plus one of each kind of damage."""
    arm = synthetic.Arm(algo="grpo")
    runs = {name: synthetic.write_run(root / sub, "arith", arm, seed) for seed, (name, sub) in enumerate([
        ("clean", "."), ("truncated", "."), ("badline", "."), ("nostatus", "."), ("badspec", "."),
        ("nested", "sweepA"), ("garbage", "."), ("nanvalues", ".")])}
    with open(runs["truncated"] / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 99, "loss/total": 0.')  # the trainer is mid-write
    ev = (runs["badline"] / "evals.jsonl").read_text().splitlines()
    ev.insert(2, "{not json")
    ev.insert(3, "[1, 2, 3]")
    (runs["badline"] / "evals.jsonl").write_text("\n".join(ev) + "\n")
    (runs["nostatus"] / "status.json").unlink()
    (runs["nostatus"] / "env.json").unlink()
    (runs["nostatus"] / "samples.jsonl").unlink()
    (runs["badspec"] / "spec.json").write_text('{"run_id": "x", "seed": ')
    (runs["garbage"] / "samples.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    (runs["garbage"] / "env.json").write_text("[]")
    with open(runs["nanvalues"] / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 21, "loss/total": NaN, "stats/grad_norm": Infinity, "stats/entropy": -Infinity}\n')
        fh.write('{"step": 22, "stats/entropy": "high", "loss/total": null}\n')
    deep = root / "a" / "b" / "c" / "d"
    synthetic.write_run(deep, "arith", arm, 42)  # depth 5: not a run folder of this root
    (runs["clean"] / "checkpoint").mkdir()
    (runs["clean"] / "checkpoint" / "spec.json").write_text("{}")  # inside a run: never entered
    return runs


def test_find_run_dirs_depth(tmp_path):
    runs = make_messy_root(tmp_path)
    found = find_run_dirs(tmp_path, 3)
    assert runs["nested"] in found and len(found) == len(runs)
    assert not any("checkpoint" in str(p) for p in found)
    assert len(find_run_dirs(tmp_path, 6)) == len(runs) + 1


def test_messy_root_loads_with_problems(tmp_path):
    runs = make_messy_root(tmp_path)
    with pytest.warns(UserWarning):
        rs = load_runs(tmp_path)
    assert len(rs.runs) == len(runs) - 1  # bad spec.json skips that folder
    text = "\n".join(rs.problems)
    assert "truncated last line" in text and "invalid JSON" in text and "not a JSON object" in text
    assert "run skipped (no readable spec.json)" in text
    assert "1 non-numeric value(s) of 'stats/entropy' treated as missing" in text
    by_id = rs.runs.set_index("path")
    assert by_id.loc[str(runs["nostatus"]), "state"] == "unknown"
    m = rs.metrics
    nan_run = by_id.loc[str(runs["nanvalues"]), "run_id"]
    last = m[(m["run_id"] == nan_run) & (m["step"] == 21)].iloc[0]
    assert np.isnan(last["loss/total"]) and last[NONFINITE_COL]
    assert np.isinf(last["stats/grad_norm"])
    assert rs.metrics["stats/entropy"].dtype == float
    trunc = by_id.loc[str(runs["truncated"]), "run_id"]
    assert m.loc[m["run_id"] == trunc, "step"].max() == 20  # truncated line dropped, the rest kept


def test_no_run_folders_is_a_clear_error(tmp_path):
    with pytest.raises(ReportError, match="no run folders"):
        load_runs(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        load_runs(tmp_path / "missing")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "spec.json").write_text("nope")
    with pytest.raises(ReportError, match="no readable run folders.*spec.json: unreadable"):
        load_runs(tmp_path)


def test_report_leaves_run_folders_untouched(tmp_path):
    runs = make_messy_root(tmp_path)
    before = {name: snapshot(p) for name, p in runs.items()}
    cfg = ReportConfig(reps=50, scaling_reps=5, figures=False, include_partial=True)
    with pytest.warns(UserWarning):
        html = build_report(tmp_path, tmp_path / "report", cfg)  # out under the root, as the CLI default
    assert html.is_file()
    assert {name: snapshot(p) for name, p in runs.items()} == before
    assert not list(tmp_path.rglob("*.tmp"))


def test_out_inside_a_run_folder_is_refused(tmp_path):
    run = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    with pytest.raises(ReportError, match="inside run folder"):
        build_report(tmp_path, run / "report", ReportConfig(reps=20, figures=False))
    assert not (run / "report").exists()


def test_running_and_empty_runs(tmp_path):
    synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo", state="running"), 0)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "spec.json").write_text(json.dumps({"run_id": "empty", "seed": 1, "task": {"name": "arith"},
                                                  "algo": {"name": "grpo"}}))
    rs = load_runs(tmp_path)
    assert set(rs.runs["state"]) == {"running", "unknown"}
    out = build_report(tmp_path, tmp_path / "out", ReportConfig(reps=20, figures=False))
    text = (tmp_path / "out" / "report.md").read_text()
    assert out.is_file() and "not at the matched budget" in text


def test_compact_copies_naming_the_cpu_in_every_row_load_without_problems(tmp_path):
    # benchmarks/effects/effects.py export writes {"cpu_model": ...} into every metrics row
    run = tmp_path / "r"
    synthetic.write_run(run, "arith", synthetic.Arm(algo="grpo"), 0)
    folder = next(p.parent for p in run.rglob("spec.json"))
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps({**r, "cpu_model": "AMD EPYC"}) + "\n" for r in rows))
    rs = load_runs(tmp_path)
    assert not rs.problems and "cpu_model" not in rs.metrics.columns
    assert len(rs.metrics) == len(rows)
