"""Sweep specs, expansion, local/debug launching, idempotent re-runs and interruption.

Run: pytest tests/sweeps (the SLURM tests are in test_slurm.py, marked `slurm`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.suite.runfolder import read_jsonl
from rlsuite.sweeps.spec import BUNDLED, expand, load

MINI = """
name: mini
tasks: [arith]
algorithms: [grpo, {name: rloo, variant: paper, set: {algo.mode: paper}}]
seeds: [0, 1]
budget: {updates: %d}
base: none
set: {eval.max_prompts: 8,
    eval.test_prompts: 8, rollout.prompts_per_step: 4, rollout.group_size: 4, train.checkpoint_every: 2}
resources: {timeout_min: 10}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("spec", sorted(p.stem for p in BUNDLED.glob("*.yaml")))
def test_every_name_in_every_bundled_spec_resolves(spec):
    runs = expand(load(spec))
    assert runs and all(r.sweep == load(spec).name for r in runs)
    assert len({r.run_id for r in runs}) == len(runs)


def test_quickstart_spec_shape():
    sw = load("quickstart")
    assert sw.tasks[0][0] == "arith" and len(sw.algorithms) >= 4 and len(sw.seeds) >= 3


def test_batch_size_spec_scales_lr_by_sqrt():
    runs = expand(load("batch_size"))
    by = {(r.algo.name, r.variant): r.optim.lr for r in runs if r.seed == 0}
    base = by[("grpo", "fixed-lr:prompts_per_step=64")]
    assert by[("grpo", "sqrt-lr:prompts_per_step=64")] == pytest.approx(base * 2.0)
    assert by[("grpo", "sqrt-lr:prompts_per_step=16")] == pytest.approx(base)
    r = next(r for r in runs if r.variant == "sqrt-lr:prompts_per_step=32")
    assert r.factors == {"rollout.prompts_per_step": 32} and r.rollout.prompts_per_step == 32


def test_validation_reports_every_problem_with_its_location(tmp_path, capsys):
    bad = write(tmp_path, """
name: bad
tasks: [arith, arithm]
algorithms: [grpo, {name: ppo, set: {rollout.temprature: 0.5}}, {name: nope}]
seeds: [0]
budget: {samples: 100, updates: 3}
bogus: 1
""")
    code = main(["sweep", "run", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    for needle in ("unknown key 'bogus'", "exactly one unit"):
        assert needle in err
    assert not (tmp_path / "out").exists()
    bad2 = write(tmp_path, MINI.replace("algorithms: [grpo,", "algorithms: [grpoo,") % 2
                 + "factors: {rollout.temprature: [0.5]}\n", "b2.yaml")
    with pytest.raises(BadInput) as e:
        expand(load(str(bad2)))
    text = str(e.value)
    assert "algorithms[0]=grpoo: unknown algorithm 'grpoo'; did you mean 'grpo'?" in text
    assert "algorithms[1]=rloo: unknown key 'rollout.temprature'" in text


def test_dry_run_prints_one_line_per_run(tmp_path, capsys):
    spec = write(tmp_path, MINI % 2)
    assert main(["sweep", "run", str(spec), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    lines = [x for x in capsys.readouterr().out.strip().splitlines() if not x.startswith("#")]  # cost notes, total
    assert len(lines) == 4 and all(line.startswith("arith__") for line in lines)
    assert not (tmp_path / "o").exists()


def _snapshot(folder: Path) -> dict:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


def test_local_sweep_records_labels_and_reruns_nothing(tmp_path, capsys):
    spec = write(tmp_path, MINI % 2)
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path), "--workers", "2"]) == 0
    root = tmp_path / "mini"
    specs = [json.loads(p.read_text()) for p in root.glob("*/spec.json")]
    assert len(specs) == 4
    assert {(s["algo"]["name"], s["variant"]) for s in specs} == {("grpo", None), ("rloo", "paper")}
    assert all(s["sweep"] == "mini" and s["factors"] == {} for s in specs)
    runs = {p.parent.name for p in root.glob("*/status.json")}
    before = {k: v for k, v in _snapshot(root).items() if any(r in k for r in runs)}
    capsys.readouterr()
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path)]) == 0
    assert "skipping 4 completed" in capsys.readouterr().err
    after = {k: v for k, v in _snapshot(root).items() if any(r in k for r in runs)}
    assert before == after
    assert main(["sweep", "status", str(root), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"] == {"completed": 4} and st["total"] == 4


def test_debug_cluster_runs_in_process(tmp_path):
    spec = write(tmp_path, MINI % 1)
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path), "--cluster", "debug"]) == 0
    assert len(list((tmp_path / "mini").glob("*/final/config.json"))) == 4


@pytest.mark.slow
def test_interrupted_local_sweep_completes_on_rerun_without_losing_results(tmp_path):
    spec = write(tmp_path, MINI % 12)
    cmd = [sys.executable, "-m", "rlsuite.suite.cli", "sweep", "run", str(spec), "--out", str(tmp_path),
           "--workers", "2"]
    # SIGINT back to the default in the child: a shell starting this suite in the background
    # (`cmd &` without job control) leaves SIGINT ignored, and Python then never turns it into Ctrl-C
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    root = tmp_path / "mini"
    deadline = time.time() + 240
    while time.time() < deadline:  # interrupt once one run has finished and another is mid-way
        seen = []  # (state, step) of each run, read once per file (a file may appear between two globs)
        for p in root.glob("*/status.json"):
            try:
                d = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            seen.append((d.get("state"), d.get("step", 0)))
        # a running run mid-way (steps 3..8 of 12), so the Ctrl-C surely lands before it ends
        if any(st == "completed" for st, _ in seen) and any(st == "running" and 3 <= k <= 8 for st, k in seen):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
    proc.communicate(timeout=240)
    states = {p.parent.name: json.loads(p.read_text())["state"] for p in root.glob("*/status.json")}
    assert "completed" in states.values() and "preempted" in states.values(), states
    done = {k for k, v in states.items() if v == "completed"}
    before = {k: v for k, v in _snapshot(root).items() if any(d in k for d in done)}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert f"skipping {len(done)} completed" in res.stderr
    after = {k: v for k, v in _snapshot(root).items() if any(d in k for d in done)}
    assert before == after  # finished runs untouched
    final = {p.parent.name: json.loads(p.read_text()) for p in root.glob("*/status.json")}
    assert all(s["state"] == "completed" for s in final.values()) and len(final) == 4
    assert any(s["attempt"] == 2 for s in final.values())  # the preempted runs resumed
    for rid, s in final.items():
        steps = [r["step"] for r in read_jsonl(root / rid / "metrics.jsonl")]
        assert steps == list(range(1, 13)), (rid, steps)


def test_tune_selects_on_val_and_writes_the_final_spec(tmp_path, capsys):
    spec = write(tmp_path, """
name: tn
tasks: [arith]
algorithms: [grpo, reinforce]
seeds: [0, 1]
budget: {updates: 2}
base: none
set: {eval.max_prompts: 4, eval.test_prompts: 4, rollout.prompts_per_step: 2, rollout.group_size: 2}
tuning: {lr: [0.001, 0.0003], seeds: [1000]}
comparisons: [{a: grpo, b: reinforce, direction: greater, smallest_effect: 0.03}]
checks: [{arm: grpo, signal: adv/mean, op: ">=", value: -1.0}]
score: {per_dataset: false}
""")
    assert main(["sweep", "tune", str(spec), "--out", str(tmp_path), "--cluster", "debug"]) == 0
    sel = json.loads((tmp_path / "tn-tune" / "selection.json").read_text())
    assert len(sel["grid"]) == 2 * 2 + 2 * 2  # lr × the entry's knob (grpo: clip_eps_high; reinforce: baseline)
    assert sel["tuning_budget"]["runs"] == 8 and "val" in sel["rule"]
    assert {c["algo"] for c in sel["chosen"]} == {"grpo", "reinforce"}
    final = tmp_path / "tn-tuned.yaml"
    tuned = load(str(final))  # the planned comparisons, checks and score carry over to the final spec
    assert [c.label for c in tuned.comparisons] == ["grpo > reinforce"] and tuned.checks[0].signal == "adv/mean"
    assert tuned.score == {"per_dataset": False}
    assert main(["sweep", "run", str(final), "--out", str(tmp_path), "--cluster", "debug"]) == 0
    specs = [json.loads(p.read_text()) for p in (tmp_path / "tn-tuned").glob("*/spec.json")]
    assert len(specs) == 4 and all(s["tuning"]["runs"] == 8 for s in specs)
    assert all(s["seed"] in (0, 1) for s in specs)
    capsys.readouterr()
    bad = write(tmp_path, (tmp_path / "s.yaml").read_text().replace("seeds: [1000]", "seeds: [0]"), "bad.yaml")
    assert main(["sweep", "tune", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "overlap the final seeds" in capsys.readouterr().err


def test_tune_scores_each_entry_on_its_own_runs(tmp_path):
    """Two entries tuned over the same grid labels (the same lr and knob value) are scored apart: each
    grid row holds its own entry's runs (it pooled both entries' runs before)."""
    spec = write(tmp_path, """
name: tw
tasks: [arith]
algorithms: [grpo, dr_grpo]
seeds: [0]
budget: {updates: 2}
base: none
set: {eval.max_prompts: 4, eval.test_prompts: 4, rollout.prompts_per_step: 2, rollout.group_size: 2}
tuning: {lr: [0.001], seeds: [1000], knobs: {grpo: {clip_eps_high: [0.2]}, dr_grpo: {clip_eps_high: [0.2]}}}
""")
    assert main(["sweep", "tune", str(spec), "--out", str(tmp_path), "--cluster", "debug"]) == 0
    root = tmp_path / "tw-tune"
    own = {}
    for st in root.glob("*/spec.json"):
        rs = json.loads(st.read_text())
        ev = [e for e in read_jsonl(st.parent / "evals.jsonl") if e.get("final") and e["split"] == "val"]
        own[rs["algo"]["name"]] = ev[-1]["eval/arith/greedy_acc"]
    grid = {row["algo"]: row for row in json.loads((root / "selection.json").read_text())["grid"]}
    assert set(grid) == {"grpo", "dr_grpo"} and len(own) == 2
    for algo, row in grid.items():
        assert row["n"] == 1 and row["mean_val"] == own[algo]


def test_quickstart_answers_only_a_missing_report_extra_with_a_plain_table(tmp_path, monkeypatch, capsys):
    """Without the report extra (seaborn, matplotlib, plotly: pyproject's `report`) the quickstart
    prints a plain table; any other import failure inside the reports is a bug and is raised."""
    import argparse
    import builtins
    import tomllib

    from rlsuite.sweeps import cli as sweeps_cli
    from rlsuite.sweeps import launch

    extra = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    names = {r.split(">")[0].split("=")[0].split("[")[0] for r in extra["project"]["optional-dependencies"]["report"]}
    assert set(sweeps_cli.REPORT_EXTRA) == names
    monkeypatch.setattr(launch, "run_sweep", lambda *a, **k: (tmp_path, {"counts": {"completed": 0}}))
    real_import = builtins.__import__
    args = argparse.Namespace(out=tmp_path, workers=1, reps=10)
    for missing, raised in (("matplotlib.pyplot", False), ("rlsuite.reports.no_such_module", True)):
        def fake(name, *a, missing=missing, **k):
            if name == "rlsuite.reports.build":
                raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)
            return real_import(name, *a, **k)

        monkeypatch.setattr(builtins, "__import__", fake)
        if raised:
            with pytest.raises(ModuleNotFoundError, match="no_such_module"):
                sweeps_cli.cmd_quickstart(args)
        else:
            assert sweeps_cli.cmd_quickstart(args) == 0
            assert "report extra not installed" in capsys.readouterr().err
        monkeypatch.setattr(builtins, "__import__", real_import)


def test_status_sums_the_training_wall_and_estimates_what_is_left(tmp_path, capsys):
    """``rlsuite sweep status``: the training wall of every run with a status (partial runs' so far),
    the completed runs' mean and the not-completed runs at that mean — the figure a study's cap is
    spent against — from hand-made run folders."""
    from rlsuite.sweeps.launch import describe_compute, status

    root = tmp_path / "sw"
    walls = {"a": ("completed", 1000.0), "b": ("completed", 2000.0), "c": ("running", 300.0), "d": (None, None),
             "e": ("diverged", 100.0)}  # diverged: finished, nothing left to run
    for rid, (state, wall) in walls.items():
        (root / rid).mkdir(parents=True)
        (root / rid / "spec.json").write_text(json.dumps({"train": {"num_threads": 1}}))
        if state:
            (root / rid / "status.json").write_text(json.dumps({"state": state, "step": 3,
                                                                "budget": {"wall_s": wall}}))
    c = status(root)["compute"]
    assert c["wall_s"] == 3400.0 and c["runs_with_wall"] == 4 and c["completed_mean_wall_s"] == 1500.0
    # to finish: c (1,500 − 300 run so far) and d (1,500): 2,700 s
    assert c["not_completed"] == 2 and c["not_completed_wall_s_at_mean"] == 2700.0 and c["num_threads"] == [1]
    line = describe_compute(c)
    assert "0.94 h over 4 run(s)" in line and "1,500 s a run" in line and "2 to finish ≈ 0.75 h" in line
    assert main(["sweep", "status", str(root)]) == 0
    assert "training wall: 0.94 h" in capsys.readouterr().out
    empty = tmp_path / "empty" / "x"
    empty.mkdir(parents=True)
    (empty / "spec.json").write_text("{}")
    assert describe_compute(status(empty.parent)["compute"]) == "training wall: none recorded yet"
