"""report.html's interactive parts: plotly.js embedded once and nothing external, the figures'
JSON (curves with bands per x-axis, interval estimates, P(improvement), profiles, ablations,
stability), sortable tables with "not separated from the best" marks, compare mode (several
roots), and the report without plotly.

Run: python -m pytest tests/reports/test_reports_interactive.py -q
(the headless-browser checks of the same page are in test_reports_html_chromium.py)
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports import ReportConfig, ReportError, build_report, cli, synthetic
from rlsuite.reports.interactive import plotly_js, to_json
from rlsuite.reports.load import load_roots, root_labels
from rlsuite.reports.tables import not_separated

needs_plotly = pytest.mark.skipif(plotly_js() is None, reason="the interactive figures need plotly "
                                  "(pip install -e '.[report]')")

CFG = ReportConfig(reps=100, scaling_reps=5)
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S)


def plots_json(text: str) -> dict:
    m = re.search(r"<script type='application/json' id='rlsuite-plots'>(.*?)</script>", text, re.S)
    assert m, "no rlsuite-plots element"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def page(synthetic_root_ro, tmp_path_factory):
    out = tmp_path_factory.mktemp("interactive") / "report"
    return out, build_report(synthetic_root_ro, out, CFG).read_text()


@needs_plotly
def test_plotly_embedded_once_and_nothing_external(page):
    _, text = page
    js = plotly_js()
    assert js and text.count(js) == 1
    assert len(re.findall(r"\* plotly\.js v\d", text)) == 1  # the bundle's header, once
    scripts = SCRIPT.findall(text)
    assert scripts and all("src" not in attrs for attrs, _ in scripts)
    markup = SCRIPT.sub("<script></script>", text)
    assert not re.search(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*['"]?(https?:)?//""", markup, re.I)
    assert not re.search(r"""(src|href)\s*=\s*['"](?!data:|#)""", markup)
    assert "<link" not in markup


@needs_plotly
def test_figures_json(page, synthetic_root_ro):
    _, text = page
    specs = plots_json(text)
    assert list(specs) == ["curves_arith_plot", "verdicts_arith_plot", "curves_gsm_plot", "verdicts_gsm_plot",
                           "interval_estimates", "prob_improvement_plot", "performance_profile_plot", "ablation_plot",
                           "stability_plot"]
    for name, s in specs.items():
        assert f"id='{name}'" in text and s["kind"] in ("curves", "figure")
    m = specs["curves_arith_plot"]["spec"]
    assert m["x_default"] == "budget/samples"
    assert {"step", "budget/samples", "budget/flops", "budget/wall_s", "budget/gen_tokens"} <= set(m["x_axes"])
    assert [y["key"] for y in m["y_keys"]][:2] == ["score", "reward/mean"] and m["y_keys"][0]["percent"]
    labels = [a["label"] for a in m["algorithms"]]
    assert "grpo" in labels and "dapo:clip+filter" in labels
    alias = m["x_alias"]["evals"]  # axes proportional on every row are stored once
    assert alias["budget/updates"] == ["step", 1.0] and alias["budget/samples"] == ["budget/prompts", 8.0]
    assert set(m["bands"]["score"]) == {"step", "budget/prompts", "budget/wall_s"}
    assert set(m["bands"]["score"]) | set(alias) == set(m["x_axes"])
    for x in m["bands"]["score"]:  # a band for every algorithm on every x-axis, mean inside its band
        band = m["bands"]["score"][x]
        assert len(band["grid"]) == 60 and set(band["algs"]) == set(labels)
        g = band["algs"]["grpo"]
        mean, low, high = (np.array([np.nan if v is None else v for v in g[k]]) for k in ("mean", "low", "high"))
        ok = np.isfinite(mean)
        assert ok.sum() >= 20 and g["n"] == 3  # (the grid spans every algorithm's range)
        assert np.all(low[ok] <= mean[ok] + 1e-9) and np.all(mean[ok] <= high[ok] + 1e-9)
    seeds = m["seeds"]["evals"]["grpo"]
    assert sorted(s["seed"] for s in seeds) == ["0", "1", "2"]
    assert set(seeds[0]["x"]) == {"step", "budget/prompts", "budget/wall_s"} and len(seeds[0]["y"]["score"]) == 5
    assert len(m["seeds"]["metrics"]["grpo"][0]["y"]["reward/mean"]) == 20
    # interval estimates: the aggregate table's numbers
    agg = pd.read_csv(page[0] / "aggregate.csv")
    iv = specs["interval_estimates"]["spec"]["data"]
    iqm = {t["name"]: t["x"][0] for t in iv if t["xaxis"] == "x3"}
    assert iqm["grpo"] == pytest.approx(float(agg.set_index("algorithm").at["grpo", "iqm"]), rel=1e-4)
    assert {t["xaxis"] for t in iv} == {"x", "x2", "x3", "x4"}
    poi = pd.read_csv(page[0] / "prob_improvement.csv")
    assert sum(len(t["x"]) for t in specs["prob_improvement_plot"]["spec"]["data"]) == len(poi)
    abl = specs["ablation_plot"]["spec"]["data"]
    assert [t["name"] for t in abl] == ["difference from the base arm", "P(arm > base)", "2x2 interaction"]
    assert "arith · abl · dapo:clip+filter" in abl[0]["y"]
    # verdicts: the forest plot's rows and numbers are table `verdicts`' (every comparison with the
    # base; of gsm's 36 pairs only the distinguishable one)
    v = pd.read_csv(page[0] / "verdicts.csv")
    for task in ("arith", "gsm"):
        data = specs[f"verdicts_{task}_plot"]["spec"]["data"]
        vt = v[v["task"] == task]
        vb = vt[vt["algorithm_y"] == "base (step 0)"]
        pairs = vt[(vt["algorithm_y"] != "base (step 0)") & (vt["verdict"] != "not distinguishable")]
        want = [f"{r.algorithm_x} − base" for r in vb.itertuples()] + [
            f"{r.algorithm_x} − {r.algorithm_y}" for r in pairs.itertuples()]
        assert data[0]["y"] == want and data[0]["name"] == "unadjusted 95% interval"
        row = {(r.algorithm_x, r.algorithm_y): r for r in vt.itertuples()}
        for t in data[1:]:
            for y, x, e_hi, e_lo, cd in zip(t["y"], t["x"], t["error_x"]["array"], t["error_x"]["arrayminus"],
                                            t["customdata"], strict=True):
                a, b = y.split(" − ")
                r = row[(a, "base (step 0)" if b == "base" else b)]
                assert x == pytest.approx(r.diff, rel=1e-4) and cd[5] == r.verdict
                # an interval beyond the axis (or unbounded: too few seeds) is drawn to the axis edge
                edge = specs[f"verdicts_{task}_plot"]["spec"]["layout"]["xaxis"]["range"]
                assert x + e_hi == pytest.approx(np.clip(r.holm_ci_high, *edge), rel=1e-3, abs=1e-6)
                assert x - e_lo == pytest.approx(np.clip(r.holm_ci_low, *edge), rel=1e-3, abs=1e-6)
                assert t["name"] == ("not distinguishable" if r.verdict == "not distinguishable" else
                                     "x > y (Holm)" if r.diff > 0 else "x < y (Holm)")
    # 3 seeds: below the sign-flip test's floor, so no comparison is a verdict and gsm's pairs are not drawn
    assert not [t for t in specs["verdicts_gsm_plot"]["spec"]["data"] if t["name"].startswith("x ")]
    assert set(v["verdict"]) == {"not distinguishable"}
    stab = specs["stability_plot"]["spec"]["data"]
    assert stab[0]["name"] == "stable runs" and any(t["name"] == "flag: nonfinite" for t in stab)
    assert dict(zip(stab[1]["x"], stab[1]["y"], strict=True))["ppo"] == 6  # every ppo run diverges


def test_aliased_axis_band_is_the_scaled_band(synthetic_root_ro):
    """A band stored once for proportional axes equals the band computed on the other axis."""
    from rlsuite.reports.figures import GRID_POINTS, grid_runs, mean_band
    from rlsuite.reports.interactive import axis_aliases, curve_model
    from rlsuite.reports.load import load_runs
    from rlsuite.reports.scores import score_runs

    cfg = ReportConfig(reps=100)
    runset = load_runs(synthetic_root_ro)
    scored = score_runs(runset, cfg)
    m = curve_model("gsm", runset, scored, {a: "#123456" for a in scored.scores["algorithm"]}, cfg, True)
    ev = scored.metric_evals
    runs = scored.scores.loc[(scored.scores["task"] == "gsm") & (scored.scores["algorithm"] == "comppo"), "run_id"]
    ev = ev[(ev["split"] == "val") & ev["run_id"].isin(runs)].assign(score=lambda d: d["value"])
    allx = scored.metric_evals
    allx = allx[(allx["split"] == "val") & allx["run_id"].isin(scored.scores.loc[scored.scores["task"] == "gsm",
                                                                                "run_id"])]["budget/samples"]
    grid = np.linspace(allx.min(), allx.max(), GRID_POINTS)
    mean, low, high = mean_band(grid_runs(ev, "budget/samples", "score", grid), cfg)
    band = m["bands"]["score"]["budget/prompts"]
    np.testing.assert_allclose(np.array(band["grid"]) * 8, grid, rtol=1e-4)
    got = band["algs"]["comppo"]
    for want, key in ((mean, "mean"), (low, "low"), (high, "high")):
        np.testing.assert_allclose(np.array([np.nan if v is None else v for v in got[key]], float), want,
                                   rtol=1e-4, atol=1e-6)
    f = pd.DataFrame({"a": [1.0, 2, np.nan], "b": [3.0, 6, np.nan], "c": [1.0, 2, 4], "d": [0.0, 0, 0]})
    assert axis_aliases(f, ["a", "b", "c", "d"]) == {"b": ("a", 3.0)}


def test_json_is_strict_and_cannot_close_its_element():
    text = to_json({"a": "</script><!--", "b": [None, 1.5]})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == {"a": "</script><!--", "b": [None, 1.5]}


@needs_plotly
def test_sortable_tables_and_best_marks(page):
    out, text = page
    lb = pd.read_csv(out / "leaderboard.csv")
    section = text[text.index("<section class='table' id='leaderboard'>"):]
    section = section[:section.index("</section>")]
    assert "<table class='tbl sortable'>" in section and "<p class='marks'>" in section
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1], re.S)
    assert len(rows) == len(lb)
    marked = {i for i, r in enumerate(rows) if "class='best'" in r}
    for task, g in lb.groupby("task"):
        algs = g[g["algorithm"] != "base (step 0)"]
        best = algs["mean"].idxmax()
        assert best in marked
        for i, r in algs.iterrows():  # marked exactly when its interval overlaps the best's
            overlap = r["ci_high"] >= lb.at[best, "ci_low"] and r["ci_low"] <= lb.at[best, "ci_high"]
            assert (i in marked) == bool(overlap), (task, r["algorithm"])
        assert not marked & set(g.index[g["algorithm"] == "base (step 0)"])
    assert marked != set(range(len(lb)))  # something is separated from the best
    first = rows[1]
    assert re.search(r"<td data-v='0\.\d+' class='best'>\d+\.\d</td>", first)  # raw value to sort by, shown in %
    assert "table.sortable" in text and "data-sort" in text


def test_not_separated():
    f = pd.DataFrame({"task": ["a"] * 4 + ["b"], "algorithm": ["base (step 0)", "x", "y", "z", "x"],
                      "mean": [0.9, 0.5, 0.45, 0.2, 0.3], "ci_low": [0.8, 0.4, 0.41, 0.1, np.nan],
                      "ci_high": [1.0, 0.6, 0.49, 0.3, np.nan]})
    assert not_separated(f, "mean", "ci_low", "ci_high", group="task") == {(1, "mean"), (2, "mean")}
    assert not_separated(f, "mean", "ci_low", "ci_high") == {(1, "mean"), (2, "mean")}


def test_root_labels(tmp_path):
    a, b, c = tmp_path / "m1" / "sweep", tmp_path / "m2" / "sweep", tmp_path / "other"
    assert root_labels([a, c]) == ["sweep", "other"]
    assert root_labels([a, b, c]) == ["m1/sweep", "m2/sweep", "other"]
    with pytest.raises(ReportError, match="given twice"):
        root_labels([a, tmp_path / "m1" / ".." / "m1" / "sweep"])


@pytest.fixture(scope="module")
def two_roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare")
    for machine, top in (("m1", 0.55), ("m2", 0.62)):  # one sweep on two machines: the same run ids
        synthetic.write_root(base / machine / "sweep", [synthetic.Arm(algo="grpo", asymptote=top),
                                                         synthetic.Arm(algo="ppo", asymptote=0.5)], ["arith"],
                             [0, 1, 2])
    return base / "m1" / "sweep", base / "m2" / "sweep"


@needs_plotly
def test_compare_mode(two_roots, tmp_path):
    a, b = two_roots
    rs = load_roots([a, b])
    assert rs.roots == (("m1/sweep", str(a)), ("m2/sweep", str(b)))
    assert len(rs.runs) == 12 and rs.runs["run_id"].is_unique
    assert set(rs.runs["algorithm"]) == {"grpo [m1/sweep]", "grpo [m2/sweep]", "ppo [m1/sweep]", "ppo [m2/sweep]"}
    assert set(rs.metrics["run_id"]) == set(rs.runs["run_id"]) == set(rs.evals["run_id"])
    html = build_report([a, b], tmp_path / "cmp", ReportConfig(reps=100, scaling_reps=3))
    lb = pd.read_csv(tmp_path / "cmp" / "leaderboard.csv")
    assert set(lb["algorithm"]) == {"base (step 0)", "grpo [m1/sweep]", "grpo [m2/sweep]", "ppo [m1/sweep]",
                                    "ppo [m2/sweep]"}
    v = pd.read_csv(tmp_path / "cmp" / "verdicts.csv")
    row = v[(v["algorithm_x"] == "grpo [m2/sweep]") & (v["algorithm_y"] == "grpo [m1/sweep]")].iloc[0]
    assert row["pairing"] == "paired over 3 seed(s)" and row["diff"] > 0
    # the synthetic m2 is m1 shifted by the same amount on every seed: zero spread, so the
    # randomization test (3 sign flips agree: p = 2/2^3), not "certain"; not a verdict at 3 seeds
    assert row["p_value"] == pytest.approx(0.25) and row["verdict"] == "not distinguishable"
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert md.startswith("# rlsuite report: m1/sweep vs m2/sweep")
    assert f"`[m1/sweep]` = `{a}` (6 run folders); `[m2/sweep]` = `{b}` (6 run folders)" in md
    specs = plots_json(html.read_text())
    assert {x["label"] for x in specs["curves_arith_plot"]["spec"]["algorithms"]} == set(lb["algorithm"]) - {
        "base (step 0)"}


def test_compare_mode_cli(two_roots, tmp_path, capsys):
    a, b = two_roots
    parser = cli.add_arguments(argparse.ArgumentParser())
    fast = ["--reps", "20", "--scaling-reps", "3", "--no-figures"]
    assert cli.main(parser.parse_args([str(a), str(b), *fast])) == 2
    assert "--out is required with several roots" in capsys.readouterr().err
    assert cli.main(parser.parse_args([str(a), str(b), "--out", str(tmp_path / "o"), *fast])) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "o" / "report.html")
    assert cli.main(parser.parse_args([str(a), str(tmp_path / "missing"), "--out", str(tmp_path / "p")])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "root [missing]" in err and "is not a directory" in err
    (tmp_path / "empty").mkdir()
    assert cli.main(parser.parse_args([str(a), str(tmp_path / "empty"), "--out", str(tmp_path / "p")])) == 2
    assert "root [empty]: no run folders" in capsys.readouterr().err
    assert cli.main(parser.parse_args([str(a), str(a), "--out", str(tmp_path / "p")])) == 2
    assert "given twice" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_report_without_plotly(tmp_path, monkeypatch):
    synthetic.write_root(tmp_path / "root", [synthetic.Arm(algo="grpo"), synthetic.Arm(algo="ppo")], ["arith"],
                         [0, 1])
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ImportError
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    assert plotly_js() is None
    with pytest.warns(UserWarning, match="plotly is not installed"):
        html = build_report(tmp_path / "root", tmp_path / "out", ReportConfig(reps=50, scaling_reps=3))
    text = html.read_text()
    assert "No interactive figures: the <code>plotly</code> package is not installed" in text
    assert "rlsuite-plots" not in text and "plotly.js" not in text
    assert text.count("data:image/png;base64,") >= 3 and "table.sortable" in text
    assert "## Figures" in (tmp_path / "out" / "report.md").read_text()


@needs_plotly
def test_html_opens_on_figures_md_keeps_its_order(page):
    """report.html: the Figures section first (each task's curves beside its verdicts), then the
    summary and the tables; report.md keeps the summary first; every section and anchor stays."""
    out, text = page
    md = (out / "report.md").read_text()
    heads = re.findall(r"<h2 id='([^']+)'>", text)
    assert heads[0] == "sec-figures" and heads[1] == "sec-summary"
    assert sorted(heads) == sorted("sec-" + "".join(c if c.isalnum() else "-" for c in h.lower()).strip("-")
                                   for h in re.findall(r"^## (.+)$", md, re.M))
    assert md.index("## Summary") < md.index("## Leaderboard") < md.index("## Figures")
    toc = re.search(r"<nav class='toc'>(.*?)</nav>", text).group(1)
    assert re.findall(r"href='#([^']+)'", toc) == heads
    row = text[text.index("<div class='row'>"):]
    assert row.index("id='curves_arith_plot'") < row.index("id='verdicts_arith_plot'") < row.index("</div></div>")
    assert text.index("id='verdicts_gsm_plot'") < text.index("id='sec-summary'") < text.index("id='leaderboard'")
    assert "verdicts_arith_plot" not in md and "Verdicts: which differences" in md


def test_long_cells_clipped_and_tables_in_their_own_box():
    from rlsuite.reports.render import LONG_CELL, to_html_table
    from rlsuite.reports.tables import Table

    long = "no reliable fit: " + "x" * 80 + " & <more>"
    t = Table("fits", "Fits", pd.DataFrame({"algorithm": ["grpo", "ppo"], "status": [long, "ok"]}), "")
    text = to_html_table(t)
    assert text.startswith("<div class='tbl-scroll'><table class='tbl sortable'>") and "</table></div>" in text
    esc = long.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert f"<td title='{esc}'><div class='clip'>{esc}</div></td>" in text
    assert "<td>ok</td>" in text and len("ok") <= LONG_CELL


def test_verdict_rows():
    from rlsuite.reports.interactive import MAX_PAIR_ROWS, _verdict_rows, verdict_figure

    def table(n_algs: int, base: bool, decided: set[int]) -> pd.DataFrame:
        algs = [f"a{i}" for i in range(n_algs)]
        rows = [(x, y) for i, x in enumerate(algs) for y in algs[i + 1:]] + ([(a, "base (step 0)") for a in algs]
                                                                             if base else [])
        return pd.DataFrame({"task": "t", "algorithm_x": [x for x, _ in rows], "algorithm_y": [y for _, y in rows],
                             "diff": [0.01 * (i + 1) for i in range(len(rows))], "ci_low": 0.0, "ci_high": 0.1,
                             "p_value": [1 / (i + 2) for i in range(len(rows))],
                             "p_holm": [0.001 if i in decided else 1.0 for i in range(len(rows))],
                             "holm_ci_low": -0.1, "holm_ci_high": 0.2,
                             "verdict": [f"{x} > {y}" if i in decided else "not distinguishable"
                                         for i, (x, y) in enumerate(rows)], "pairing": "paired over 3 seed(s)"})
    vb, vp, what = _verdict_rows(table(6, True, set()))  # 15 pairs: all drawn
    assert len(vb) == 6 and len(vp) == 15 == MAX_PAIR_ROWS and what == "all 15 pairs of algorithms"
    vb, vp, what = _verdict_rows(table(7, True, {3, 20}))  # 21 pairs: the distinguishable ones
    assert len(vb) == 7 and list(vp.index) == [3, 20] and what.startswith("the 2 distinguishable pair(s) of the 21")
    vb, vp, what = _verdict_rows(table(7, True, set()))
    assert vp.empty and what == "no pair of algorithms (none of the 21 is distinguishable)"
    vb, vp, what = _verdict_rows(table(7, False, set()))  # no base: the pairs with the smallest p
    assert vb.empty and list(vp.index) == list(range(6, 21)) and "smallest p" in what  # p falls with the index
    plot = verdict_figure(table(7, True, {3}), "t", True, 0.95)
    assert plot.group == "t" and plot.name == "verdicts_t_plot"
    assert plot.spec["layout"]["yaxis"]["categoryarray"][-1] == "a0 − a4" and len(plot.spec["data"][0]["y"]) == 8
    assert plot.spec["layout"]["xaxis"]["range"][0] >= -1.05 and plot.spec["layout"]["xaxis"]["range"][1] <= 1.05
    assert verdict_figure(table(3, True, set()), "other", True, 0.95) is None
