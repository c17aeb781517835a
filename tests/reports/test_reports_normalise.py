"""Per-task normalisation of the aggregates across tasks (raw / gain / headroom, reports.normalise)
and battery runs scored per dataset (reports.battery), on run folders with exact, hand-set scores.

Run: python -m pytest tests/reports/test_reports_normalise.py -q -n 0
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from rlsuite.reports import ReportConfig, ReportError, battery, cli, normalise, synthetic, tables
from rlsuite.reports.load import load_runs
from rlsuite.reports.scores import BASE_LABEL, score_runs

CFG = ReportConfig(reps=50)
STEPS = 20


def write_exact(root, task: str, algo: str, seed: int, base: float | None, final: float, *, mixture: bool = True,
                **variants) -> None:
    """A completed run whose step-0 evals (val and test) score `base` (none when None) and whose final
    test eval scores `final`; `variants`: label -> (base, final) of `greedy_acc_<label>` (a battery: its
    spec lists one `task.datasets` entry per variant unless `mixture` is False, as hops_toy's per-hop
    variants of one task)."""
    arm = synthetic.Arm(algo=algo, seed_sd=0.0, noise=0.0)
    folder = synthetic.write_run(root, task, arm, seed, steps=STEPS)
    if variants and mixture:
        spec = json.loads((folder / "spec.json").read_text())
        spec["task"]["datasets"] = [f"{lab}:size=1" for lab in variants]
        (folder / "spec.json").write_text(json.dumps(spec))

    def row(step: int, split: str, value: float, which: int, fin: bool = False) -> dict:
        r = {"step": step, "split": split, "budget/samples": step * 16 * synthetic.GROUP_SIZE,
             f"eval/{task}/greedy_acc": value, **{f"eval/{task}/greedy_acc_{lab}": v[which]
                                                  for lab, v in variants.items()}}
        return r | ({"final": True} if fin else {})
    rows = [row(0, split, base, 0) for split in ("val", "test")] if base is not None else []
    rows += [row(STEPS // 2, "val", (final + (base or 0)) / 2, 1), row(STEPS, "test", final, 1, fin=True)]
    (folder / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# two tasks with bases 0.2 (hard) and 0.5 (easy); grpo and ppo on seeds 0 and 1
FINALS = {("hard", "grpo"): (0.4, 0.6), ("easy", "grpo"): (0.75, 0.9),
          ("hard", "ppo"): (0.2, 0.4), ("easy", "ppo"): (0.5, 0.6)}
BASES = {"hard": 0.2, "easy": 0.5}


@pytest.fixture()
def two_tasks(tmp_path):
    for (task, algo), finals in FINALS.items():
        for seed, final in enumerate(finals):
            write_exact(tmp_path, task, algo, seed, BASES[task], final)
    return tmp_path


def by_hand(mode: str, algo: str) -> dict[str, float]:
    """The aggregates of `algo` computed by hand from FINALS and BASES."""
    def f(task, s):
        b = BASES[task]
        return {"raw": s, "gain": s - b, "headroom": (s - b) / (1 - b)}[mode]
    per_task = {t: [f(t, s) for s in FINALS[(t, algo)]] for t in BASES}
    allv = sorted(v for vs in per_task.values() for v in vs)
    means = [np.mean(v) for v in per_task.values()]
    return {"mean": float(np.mean(means)), "median": float(np.median(means)),
            "iqm": float(np.mean(allv[1:3])),  # 4 scores: the middle two
            "optimality_gap": float(np.mean([max(1 - v, 0) for v in allv]))}


def test_headroom_gain_raw_aggregates_by_hand(two_tasks):
    scored = score_runs(load_runs(two_tasks), CFG)
    # grpo by hand: headroom hard (0.4-0.2)/0.8 = 0.25, (0.6-0.2)/0.8 = 0.5; easy (0.75-0.5)/0.5 = 0.5,
    # (0.9-0.5)/0.5 = 0.8 -> mean of the task means (0.375 + 0.65) / 2 = 0.5125; IQM 0.5; gap 0.4875
    assert by_hand("headroom", "grpo") == pytest.approx(
        {"mean": 0.5125, "median": 0.5125, "iqm": 0.5, "optimality_gap": 0.4875})
    for mode in ("headroom", "gain", "raw"):
        agg = tables.aggregate_table(scored, ReportConfig(reps=50, normalise=mode)).set_index("algorithm")
        for algo in ("grpo", "ppo"):
            for col, want in by_hand(mode, algo).items():
                assert agg.loc[algo, col] == pytest.approx(want), (mode, algo, col)
        # the base row on the same scale: 0 gain / headroom, the raw bases' mean otherwise
        assert agg.loc[BASE_LABEL, "mean"] == pytest.approx(0.35 if mode == "raw" else 0.0)
    # the default spans two tasks: headroom
    agg = tables.aggregate_table(scored, CFG).set_index("algorithm")
    assert agg.loc["grpo", "mean"] == pytest.approx(0.5125)
    # the per-task leaderboard cells stay raw
    lb = tables.leaderboard(scored, CFG).set_index(["task", "algorithm"])
    assert lb.loc[("hard", "grpo"), "mean"] == pytest.approx(0.5)
    assert lb.loc[("easy", BASE_LABEL), "mean"] == pytest.approx(0.5)


def test_paired_all_tasks_rows_use_the_aggregates_scale(two_tasks):
    scored = score_runs(load_runs(two_tasks), CFG)
    paired = tables.paired_table(scored, CFG, "ppo").set_index("task")
    # per-seed headroom differences grpo - ppo: hard (0.25 - 0, 0.5 - 0.25), easy (0.5 - 0, 0.8 - 0.2)
    # -> task means 0.25 and 0.55 -> 0.4; the per-task rows stay raw (hard: 0.2, 0.2 -> 0.2)
    assert paired.loc["all tasks", "diff"] == pytest.approx(0.4)
    assert paired.loc["hard", "diff"] == pytest.approx(0.2)
    raw = tables.paired_table(scored, ReportConfig(reps=50, normalise="raw"), "ppo").set_index("task")
    assert raw.loc["all tasks", "diff"] == pytest.approx((0.2 + 0.275) / 2)


def test_default_is_raw_for_one_task_and_caption_names_the_bases(two_tasks):
    scored = score_runs(load_runs(two_tasks), CFG)
    one = scored.scores[scored.scores["task"] == "hard"]
    assert normalise.normalise(one, scored.base).mode == "raw"
    norm = normalise.normalise(scored.scores, scored.base)
    assert norm.mode == "headroom" and norm.bases == pytest.approx({"easy": 0.5, "hard": 0.2})
    text = norm.caption(percent=True)
    assert "(s − b) / (1 − b)" in text and "easy 50.0%" in text and "hard 20.0%" in text
    # a metric outside [0, 1] has no ceiling of 1: the default falls back to the gain
    wide = scored.scores.assign(score=scored.scores["score"] * 100)
    assert normalise.normalise(wide, scored.base).mode == "gain"


def test_headroom_refused_for_a_full_or_missing_base_naming_the_task(tmp_path):
    for seed in (0, 1):
        write_exact(tmp_path, "solved", "grpo", seed, 1.0, 1.0)
        write_exact(tmp_path, "fresh", "grpo", seed, 0.3, 0.5)
    scored = score_runs(load_runs(tmp_path), CFG)
    for cfg in (CFG, ReportConfig(reps=50, normalise="headroom")):  # the default, and asked for
        with pytest.raises(ReportError, match=r"task 'solved': base \(step 0\) score 1 ≥ 1") as err:
            tables.aggregate_table(scored, cfg)
        assert "'fresh'" not in str(err.value) and "--normalise gain or raw" in str(err.value)
    gain = tables.aggregate_table(scored, ReportConfig(reps=50, normalise="gain")).set_index("algorithm")
    assert gain.loc["grpo", "mean"] == pytest.approx((0.0 + 0.2) / 2)
    # the CLI: one line, exit code 2
    parser = cli.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args([str(tmp_path), "--out", str(tmp_path.parent / "rep"), "--reps", "50",
                              "--no-figures", "--normalise", "headroom"])
    assert cli.main(args) == 2


def test_headroom_and_gain_refused_without_a_base(tmp_path, capsys):
    for seed in (0, 1):
        write_exact(tmp_path, "nobase", "grpo", seed, None, 0.5)
        write_exact(tmp_path, "fresh", "grpo", seed, 0.3, 0.5)
    scored = score_runs(load_runs(tmp_path), CFG)
    for mode in ("headroom", "gain"):
        with pytest.raises(ReportError, match=r"task 'nobase': no base \(step 0\) score.*Use --normalise raw"):
            tables.aggregate_table(scored, ReportConfig(reps=50, normalise=mode))
    raw = tables.aggregate_table(scored, ReportConfig(reps=50, normalise="raw")).set_index("algorithm")
    assert raw.loc["grpo", "mean"] == pytest.approx(0.5)
    parser = cli.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args([str(tmp_path), "--out", str(tmp_path.parent / "rep"), "--reps", "50", "--no-figures"])
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task 'nobase'" in err and "headroom" in err


def battery_root(root):
    """reasoning_gym-like battery runs: datasets a (base 0.5) and b (base 0.2), two arms, two seeds; the
    pooled greedy_acc is their mean. Plus a single-dataset task without variants."""
    finals = {"grpo": ((0.75, 0.4), (0.9, 0.6)), "ppo": ((0.5, 0.2), (0.6, 0.4))}  # per seed: (a, b)
    for algo, per_seed in finals.items():
        for seed, (a, b) in enumerate(per_seed):
            write_exact(root, "rg", algo, seed, 0.35, (a + b) / 2, a=(0.5, a), b=(0.2, b))
            write_exact(root, "plain", algo, seed, 0.3, 0.5)


def test_battery_runs_become_one_task_per_dataset(tmp_path):
    battery_root(tmp_path)
    rs = load_runs(tmp_path)
    assert battery.dataset_labels(rs, "greedy_acc") == {
        r: ["a", "b"] for r in rs.runs.loc[rs.runs["task"] == "rg", "run_id"]}
    ex, notes = battery.expand(rs, CFG)
    assert len(ex.runs) == 12 and "rg[a], rg[b]" in notes[0]
    assert battery.expand(ex, CFG)[0].runs["run_id"].tolist() == ex.runs["run_id"].tolist()  # idempotent
    scored = score_runs(ex, CFG)
    s = scored.scores
    assert sorted(s["task"].unique()) == ["plain", "rg[a]", "rg[b]"]
    cell = s[(s["task"] == "rg[a]") & (s["algorithm"] == "grpo")].sort_values("seed")
    assert cell["score"].tolist() == pytest.approx([0.75, 0.9]) and cell["seed"].tolist() == [0, 1]
    assert normalise.task_bases(scored.base) == pytest.approx({"plain": 0.3, "rg[a]": 0.5, "rg[b]": 0.2})
    # the pseudo-runs keep their run's seed, so the arms pair: grpo - ppo on rg[b] per seed (0.2, 0.2)
    v = tables.verdict_table(scored, CFG).set_index(["task", "algorithm_x", "algorithm_y"])
    assert v.loc[("rg[b]", "grpo", "ppo"), "n_pairs"] == 2
    assert v.loc[("rg[b]", "grpo", "ppo"), "diff"] == pytest.approx(0.2)
    # the aggregates run across the datasets, headroom-normalised by each dataset's own base
    agg = tables.aggregate_table(scored, CFG).set_index("algorithm")
    want = np.mean([np.mean([(0.75 - 0.5) / 0.5, (0.9 - 0.5) / 0.5]), np.mean([(0.4 - 0.2) / 0.8, (0.6 - 0.2) / 0.8]),
                    (0.5 - 0.3) / 0.7])
    assert agg.loc["grpo", "n_tasks"] == 3 and agg.loc["grpo", "mean"] == pytest.approx(want)


def test_per_dataset_off_and_forced(tmp_path):
    battery_root(tmp_path)
    rs = load_runs(tmp_path)
    off, notes = battery.expand(rs, ReportConfig(reps=50, per_dataset=False))
    assert off is rs and notes == ()
    pooled = score_runs(off, CFG).scores
    assert sorted(pooled["task"].unique()) == ["plain", "rg"]
    assert pooled.loc[(pooled["task"] == "rg") & (pooled["algorithm"] == "grpo"), "score"].mean() == \
        pytest.approx(np.mean([(0.75 + 0.4) / 2, (0.9 + 0.6) / 2]))
    plain = load_runs(tmp_path / rs.runs.loc[rs.runs["task"] == "plain", "run_id"].iloc[0])
    assert battery.expand(plain, CFG)[0] is plain  # automatic: nothing to expand
    with pytest.raises(ReportError, match="no run logs per-dataset variants of eval metric 'greedy_acc'"):
        battery.expand(plain, ReportConfig(reps=50, per_dataset=True))


def test_variants_of_one_task_stay_pooled_unless_asked(tmp_path):
    """hops_toy logs greedy_acc_h4 .. _h8 (hop counts of one task, not datasets): the automatic mode
    keeps the pooled metric; --per-dataset splits them on request."""
    for seed in (0, 1):
        write_exact(tmp_path, "hops", "grpo", seed, 0.3, 0.5, mixture=False, h4=(0.4, 0.6), h8=(0.2, 0.4))
    rs = load_runs(tmp_path)
    assert battery.dataset_labels(rs, "greedy_acc", mixtures_only=True) == {}
    auto, notes = battery.expand(rs, CFG)
    assert auto is rs and notes == ()
    assert score_runs(auto, CFG).scores["task"].unique().tolist() == ["hops"]
    forced, notes = battery.expand(rs, ReportConfig(reps=50, per_dataset=True))
    assert sorted(forced.runs["task"].unique()) == ["hops[h4]", "hops[h8]"] and len(notes) == 1


def test_one_variant_is_not_a_battery(tmp_path):
    write_exact(tmp_path, "rg", "grpo", 0, 0.3, 0.5, only=(0.3, 0.5))
    assert battery.dataset_labels(load_runs(tmp_path), "greedy_acc") == {}


def test_cli_options():
    parser = cli.add_arguments(argparse.ArgumentParser())
    cfg = cli.config_from_args(parser.parse_args(["root"]))
    assert (cfg.normalise, cfg.per_dataset, cfg.metric, cfg.confidence) == ("auto", None, "greedy_acc", 0.95)
    cfg = cli.config_from_args(parser.parse_args(["root", "--normalise", "gain", "--no-per-dataset"]))
    assert (cfg.normalise, cfg.per_dataset) == ("gain", False)
    assert parser.parse_args(["root", "--per-dataset"]).per_dataset is True
    with pytest.raises(ReportError, match="unknown normalisation 'z'; valid: auto, raw, gain, headroom"):
        ReportConfig(normalise="z")  # type: ignore[arg-type]


def test_planned_comparisons_bring_the_score_they_were_fixed_with(tmp_path):
    battery_root(tmp_path / "runs")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\ntasks: [arith]\nalgorithms: [grpo, ppo]\nseeds: 2\nbudget: {samples: 64}\n"
                    "comparisons: [{a: grpo, b: ppo}]\nscore: {per_dataset: false, normalise: gain}\n")
    parser = cli.add_arguments(argparse.ArgumentParser())
    root = str(tmp_path / "runs")
    cfg = cli.config_from_args(parser.parse_args([root, "--comparisons", str(spec)]))
    assert (cfg.per_dataset, cfg.normalise) == (False, "gain")
    assert cfg.comparisons == (("grpo", "ppo", "two-sided", 0.0),)
    cfg = cli.config_from_args(parser.parse_args([root, "--comparisons", str(spec), "--no-per-dataset"]))  # agrees
    assert cfg.per_dataset is False
    with pytest.raises(ReportError, match=r"--per-dataset True: the planned comparisons .* were fixed with "
                                          r"per_dataset = False, .* give --comparisons none"):
        cli.config_from_args(parser.parse_args([root, "--comparisons", str(spec), "--per-dataset"]))
    cfg = cli.config_from_args(parser.parse_args([root, "--comparisons", "none", "--per-dataset"]))
    assert cfg.per_dataset is True and cfg.comparisons == ()  # exploratory: no planned comparisons
    # a study.json beside the runs: its registered `report` settings apply the same way
    (tmp_path / "study.json").write_text(json.dumps({"comparisons": [{"a": "grpo", "b": "ppo"}],
                                                     "report": {"per_dataset": False}}))
    cfg = cli.config_from_args(parser.parse_args([str(tmp_path / "runs")]))
    assert cfg.per_dataset is False and len(cfg.comparisons) == 1
    (tmp_path / "study.json").write_text(json.dumps({"comparisons": [{"a": "grpo", "b": "ppo"}], "report": None}))
    assert cli.config_from_args(parser.parse_args([root])).per_dataset is None  # registered without one


def test_report_states_the_scale_and_expands_batteries(tmp_path):
    from rlsuite.reports.build import build_report

    root = tmp_path / "runs"
    battery_root(root)
    build_report(root, tmp_path / "out", ReportConfig(reps=50, scaling_reps=5, figures=False))
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("### Aggregates across tasks"):md.index("### Probability of improvement")]
    assert "headroom = (s − b) / (1 − b)" in section
    assert "plain 30.0%, rg[a] 50.0%, rg[b] 20.0%" in section
    assert "8 scored (12 scored rows" in md and "rg: battery runs scored per dataset (4 run(s)" in md
    lb = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert set(lb["task"]) == {"plain", "rg[a]", "rg[b]"}
    agg = pd.read_csv(tmp_path / "out" / "aggregate.csv").set_index("algorithm")
    assert agg.loc["grpo", "n_tasks"] == 3
