"""Provenance: env.json records the CPU model; a cell pooling different CPU models or torch
versions is warned about (stderr and the report).

Run: python -m pytest tests/reports/test_reports_env.py -q
"""

from __future__ import annotations

import json
import warnings

import pytest

from rlsuite.reports import ReportConfig, synthetic
from rlsuite.reports.build import build_report
from rlsuite.reports.load import load_runs
from rlsuite.suite.runfolder import cpu_model, env_info


def _set_env(run, **fields):
    env = json.loads((run / "env.json").read_text())
    for key, value in fields.items():
        if key == "torch":
            env["packages"]["torch"] = value
        else:
            env[key] = value
    (run / "env.json").write_text(json.dumps(env))


def test_env_info_records_cpu_model():
    info = env_info("cpu", "float32", 1)
    assert "cpu_model" in info and info["cpu_model"] == cpu_model()
    assert info["cpu_model"] is None or isinstance(info["cpu_model"], str) and info["cpu_model"]


def test_mixed_cpu_models_in_a_cell_warn(tmp_path):
    root = tmp_path / "runs"
    a, b = (synthetic.write_run(root, "arith", synthetic.Arm(algo="grpo"), s) for s in (0, 1))
    _set_env(a, cpu_model="Intel(R) Xeon(R) Platinum 8480+")
    _set_env(b, cpu_model="AMD EPYC 9654 96-Core Processor")
    with pytest.warns(UserWarning, match=r"cell arith/grpo pools runs from different CPU models: "
                                         r"'AMD EPYC 9654 96-Core Processor' \(1 run\), 'Intel"):
        rs = load_runs(root)
    assert len(rs.env_warnings) == 1 and not rs.problems
    assert set(rs.runs["cpu_model"]) == {"Intel(R) Xeon(R) Platinum 8480+", "AMD EPYC 9654 96-Core Processor"}
    with pytest.warns(UserWarning, match="different CPU models"):
        html = build_report(root, tmp_path / "out", ReportConfig(reps=20, scaling_reps=3, figures=False))
    md = (tmp_path / "out" / "report.md").read_text()
    for text in (md, html.read_text()):
        assert "Warning: cell arith/grpo pools runs from different CPU models" in text
        assert "AMD EPYC 9654 96-Core Processor" in text and "Platinum 8480+" in text


def test_mixed_torch_versions_warn_and_missing_fields_do_not(tmp_path):
    root = tmp_path / "runs"
    a, b, c = (synthetic.write_run(root, "arith", synthetic.Arm(algo="grpo"), s) for s in (0, 1, 2))
    _set_env(a, cpu_model="same cpu", torch="2.5.0")
    _set_env(b, cpu_model="same cpu", torch="2.13.0")  # c records no cpu_model (older env.json)
    other = synthetic.write_run(root, "arith", synthetic.Arm(algo="ppo"), 0)
    _set_env(other, cpu_model="another cpu")  # a different cell: no warning
    with pytest.warns(UserWarning) as record:
        rs = load_runs(root)
    msgs = [str(w.message) for w in record]
    assert rs.env_warnings == tuple(m for m in msgs if "pools runs" in m)
    assert len(rs.env_warnings) == 1
    assert "arith/grpo pools runs from different torch versions: '2.13.0' (1 run), '2.5.0' (2 runs)" \
        in rs.env_warnings[0]


def test_uniform_env_gives_no_warning(tmp_path):
    for s in (0, 1):
        synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rs = load_runs(tmp_path)
    assert rs.env_warnings == ()
