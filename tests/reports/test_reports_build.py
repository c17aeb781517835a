"""End to end: build_report on synthetic runs writes every output; the CLI maps bad input to
exit code 2; report.html is self-contained.

Run: python -m pytest tests/reports/test_reports_build.py -q
"""

from __future__ import annotations

import argparse
import csv
import json
import re

import pandas as pd
import pytest

from rlsuite.reports import ReportConfig, ReportError, build_report, cli, synthetic
from rlsuite.reports.tables import LEADERBOARD_COLUMNS


@pytest.fixture(scope="module")
def built(synthetic_root_ro, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report"
    html = build_report(synthetic_root_ro, out, ReportConfig(reps=200, scaling_reps=10))
    return out, html


def test_outputs_written(built):
    out, html = built
    assert html == out / "report.html"
    for name in ("leaderboard", "aggregate", "prob_improvement", "paired_differences", "stability_counts",
                 "stability_runs", "ablation", "interactions", "time_to_target", "batch_size", "scaling_fits",
                 "excluded_runs", "examples"):
        for ext in ("csv", "md", "tex"):
            assert (out / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    for fig in ("curves_arith", "curves_gsm", "passk_arith", "performance_profile", "scaling_gsm"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
        assert (out / "figures" / f"{fig}.svg").read_text().lstrip().startswith("<?xml")
    assert not list(out.rglob("*.tmp"))
    prof = (out / "performance_profile.csv").read_text().splitlines()
    assert prof[0] == "algorithm,tau,fraction_above,ci_low,ci_high" and len(prof) > 100


def test_leaderboard_csv_columns_exact(built):
    out, _ = built
    with open(out / "leaderboard.csv") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == LEADERBOARD_COLUMNS
    tex = (out / "leaderboard.tex").read_text()
    assert r"\begin{tabular}" in tex and r"n\_seeds" in tex and r"\bottomrule" in tex


def test_report_contents(built):
    out, html = built
    md = (out / "report.md").read_text()
    for needle in ("## Leaderboard", "`ci_low`:", "Seeds: 0, 1, 2", "Matched budget: samples=2560",
                   "Model: tiny", "cpu/float32/1", "Tuning budget", "bootstrap resamples", "commit 0123456",
                   "under-cover", "interaction algo.clip_higher x algo.filter", "stable in", "Example completions",
                   "2+0="):
        assert needle in md, needle
    text = html.read_text()
    assert text.count("data:image/png;base64,") >= 5
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", text, flags=re.S)  # scripts' bodies out
    assert not re.search(r"""(src|href)\s*=\s*['"](?!data:|#)""", markup)  # nothing external, in-page anchors only
    assert markup.count("<table") >= 10 and "<script src" not in markup


def test_cli_success_and_errors(synthetic_root_ro, tmp_path, capsys):
    parser = cli.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args([str(synthetic_root_ro), "--out", str(tmp_path / "o"), "--reps", "50",
                              "--scaling-reps", "3", "--no-figures", "--score", "last-k", "--k", "2",
                              "--stability", "entropy_min=0.8", "--stability", "kl_max=none"])
    assert cli.main(args) == 0
    assert (tmp_path / "o" / "report.html").is_file()
    assert "entropy_collapse" in (tmp_path / "o" / "stability_counts.csv").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(parser.parse_args([str(empty)])) == 2
    assert "no run folders" in capsys.readouterr().err
    assert cli.main(parser.parse_args([str(synthetic_root_ro), "--out", str(tmp_path / "p"),
                                       "--metric", "bogus"])) == 2
    assert "valid: avg@8, greedy_acc" in capsys.readouterr().err
    assert cli.main(parser.parse_args([str(synthetic_root_ro), "--stability", "nope=1"])) == 2
    assert "entropy_min" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args([str(synthetic_root_ro), "--x", "budget/bogus"])


def test_unlogged_x_axis_is_refused(tmp_path):
    run = synthetic.write_run(tmp_path, "arith", synthetic.Arm(algo="grpo"), 0)
    lines = [json.loads(x) for x in (run / "evals.jsonl").read_text().splitlines()]
    (run / "evals.jsonl").write_text("".join(json.dumps({**e, "budget/flops": None}) + "\n" for e in lines))
    with pytest.raises(ReportError, match="'budget/flops' is not logged.*valid here: step, budget/prompts"):
        build_report(tmp_path, tmp_path / "out", ReportConfig(reps=20, x="budget/flops", figures=False))
    # the default scaling axis is budget/flops too: missing FLOPs there is a reported failed fit, not an error
    build_report(tmp_path, tmp_path / "out", ReportConfig(reps=20, figures=False))
    assert "too few points" in (tmp_path / "out" / "scaling_fits.csv").read_text()


def test_config_validation():
    with pytest.raises(ReportError, match="valid: step, budget/prompts"):
        ReportConfig(x="loss/total")
    with pytest.raises(ReportError, match="valid: final, last-k"):
        ReportConfig(score="best")  # type: ignore[arg-type]


def test_a_study_s_planned_comparisons_and_checks_reach_the_report(synthetic_root, tmp_path):
    """A study folder's study.json (found above the runs): the report opens on the planned comparisons,
    then the manipulation checks evaluated on the runs, and a planned verdict whose arm failed a check
    names it beside the verdict. (A report with planned comparisons used to fail: the summary read the
    first table of its section as the leaderboard.)"""
    (synthetic_root / "study.json").write_text(json.dumps({
        "comparisons": [{"a": "comppo", "b": "grpo", "direction": "greater", "smallest_effect": 0.03}],
        "checks": [{"arm": "comppo", "signal": "stats/clip_frac", "agg": "mean", "op": ">=", "value": 0.05},
                   {"arm": "grpo", "signal": "stats/clip_frac", "agg": "mean", "op": ">=", "value": 0.5,
                    "seeds": 1.0, "after": 0.2},
                   {"arm": "grpo", "signal": "no/such_signal", "op": "<=", "value": 1.0}]}))
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args(
        [str(synthetic_root), "--reps", "50", "--no-figures", "--out", str(tmp_path / "rep")])
    cfg = cli.config_from_args(args)
    assert cfg.checks[1] == ("grpo", "stats/clip_frac", "mean", ">=", 0.5, 1.0, 0.2)
    build_report(synthetic_root, tmp_path / "rep", cfg)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.index("### Planned comparisons") < md.index("### Manipulation checks") < md.index("## Leaderboard")
    assert md.count("## Leaderboard") == 1  # once, not again under Comparisons
    checks = pd.read_csv(tmp_path / "rep" / "checks.csv")
    got = {(r.arm, r.check.split(": ")[1].split(" ")[1]): r.result for r in checks.itertuples()}
    # synthetic runs log stats/clip_frac = 0.1 at every step
    assert got == {("comppo", "stats/clip_frac"): "pass", ("grpo", "stats/clip_frac"): "fail",
                   ("grpo", "no/such_signal"): "no data"}
    planned = pd.read_csv(tmp_path / "rep" / "planned.csv")
    (row,) = planned[planned["task"] == "arith"].itertuples()
    # the arm `grpo` is its own 3 seeds: its variants (grpo:b16, grpo:b64) are other arms, not pooled
    assert "grpo: mean stats/clip_frac after 20% >= 0.5" in row.checks and "fail: 0/3" in row.checks
    assert "no data" in row.checks
