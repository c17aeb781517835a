"""Sweep specs that used to crash, write outside ``--out`` or exit 0 with runs never started:
each is refused at validation (exit 2, nothing written) or makes the sweep exit non-zero.

Run: pytest tests/sweeps/test_sweep_validation.py
"""

from __future__ import annotations

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.sweeps.spec import expand, load, parse

BASE = {"name": "v", "tasks": ["arith"], "algorithms": ["grpo"], "seeds": [0], "budget": {"updates": 1},
        "base": "none"}


def problems(**over) -> str:
    with pytest.raises(BadInput) as e:
        expand(parse({**BASE, **over}, "s.yaml"))
    return str(e.value)


@pytest.mark.parametrize("over, needle", [
    ({"tuning": 5}, "'tuning' must be a mapping"),
    ({"tuning": {"lrs": [1e-3]}}, "unknown key 'tuning.lrs'; did you mean 'lr'?"),
    ({"tuning": {"lr": [float("nan")]}}, "'tuning.lr' must be a non-empty list of learning rates > 0"),
    ({"tuning": {"seeds": [-1]}}, "'tuning.seeds'"),
    ({"resources": {"timeout_min": -5}}, "resources.timeout_min must be ≥ 1, got -5"),
    ({"resources": {"timeout_min": 0}}, "resources.timeout_min must be ≥ 1, got 0"),
    ({"resources": {"mem_gb": -1}}, "resources.mem_gb must be > 0, got -1"),
    ({"resources": {"mem_gb": float("nan")}}, "resources.mem_gb: expected a finite number"),
    ({"resources": {"array_parallelism": 0}}, "resources.array_parallelism must be ≥ 1, got 0"),
    ({"resources": {"nodes": 0}}, "resources.nodes must be ≥ 1, got 0"),
    ({"resources": 5}, "'resources' must be a mapping"),
    ({"score": {"per_datset": False}}, "score: unknown key(s) per_datset; valid: score, k, metric, normalise, "
                                       "per_dataset, confidence"),
    ({"score": {"normalise": "z"}}, "score: unknown normalisation 'z'; valid: auto, raw, gain, headroom"),
    ({"score": {"confidence": 2}}, "score: confidence must be in (0.5, 1), got 2"),
    ({"score": {"metric": 3}}, "score: metric must be an eval metric name (e.g. greedy_acc), got 3"),
    ({"score": "pooled"}, "'score' must be a mapping of score, k, metric, normalise, per_dataset, confidence"),
    ({"name": ".."}, "'name' must be one folder name"),
    ({"name": "."}, "'name' must be one folder name"),
    ({"name": ".hidden"}, "'name' must be one folder name"),
    ({"name": "a/b"}, "'name' must be one folder name"),
    ({"name": "a\nb"}, "'name' must be one folder name"),
    ({"tasks": 5}, "'tasks' must be a list"),
    ({"seeds": [True]}, "'seeds' must be"),
    ({"algorithms": [{"name": "grpo", "variant": 5}]}, "algorithms[0]: expected a name or {name, variant, set}"),
    ({"allow_identical_arms": "yes"}, "'allow_identical_arms' must be true or false"),
    ({"budget": {"samples": float("nan")}}, "budget.samples must be a finite number in (0, 1e+18), got nan"),
    # issue 38 §2.5: each was a traceback (MemoryError, OverflowError) or failed only at launch
    ({"seeds": 1_000_000_000}, "'seeds': 1000000000 seeds per arm; at most 10000"),
    ({"seeds": list(range(10_001))}, "'seeds': 10001 seeds per arm; at most 10000"),
    ({"name": "x" * 300}, "'name' is 300 bytes long; at most 100"),
    ({"budget": {"samples": 1e300}}, "budget.samples must be a finite number in (0, 1e+18), got 1e+300"),
    ({"budget": {"samples": 10**400}}, "budget.samples must be a finite number in (0, 1e+18)"),
    ({"budget": {"samples": 0}}, "budget.samples must be a finite number in (0, 1e+18), got 0"),
])
def test_bad_specs_are_refused_with_their_location(over, needle):
    assert needle in problems(**over)


def test_identical_arms_with_different_labels_are_refused_unless_allowed():
    arms = [{"name": "grpo", "variant": "a"}, {"name": "grpo", "variant": "b", "set": {"algo.kl_coef": 0.04}}]
    text = problems(algorithms=arms)
    assert ("algorithms[0] (grpo, variant 'a') and algorithms[1] (grpo, variant 'b') resolve to identical settings"
            in text)
    assert "allow_identical_arms: true" in text
    runs = expand(parse({**BASE, "algorithms": arms, "allow_identical_arms": True}, "s.yaml"))
    assert sorted(r.variant for r in runs) == ["a", "b"]
    # arms that differ somewhere are fine (even if they coincide at one factor level)
    arms[1]["set"] = {"algo.kl_coef": 0.0}
    assert len(expand(parse({**BASE, "algorithms": arms}, "s.yaml"))) == 2


def test_cli_refuses_dot_dot_name_and_writes_nothing(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: ..\ntasks: [arith]\nalgorithms: [grpo]\nseeds: [0]\nbudget: {updates: 1}\n"
                    "resources: {timeout_min: -5}\n")
    out = tmp_path / "root" / "out"
    assert main(["sweep", "run", str(spec), "--cluster", "local", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "'name' must be one folder name" in err and "resources.timeout_min must be ≥ 1" in err
    assert not (tmp_path / "root").exists()


def test_sweep_spec_that_is_a_folder_or_binary(tmp_path, capsys):
    (tmp_path / "d.yaml").mkdir()
    assert main(["sweep", "run", str(tmp_path / "d.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe\x00\x81")
    assert main(["sweep", "run", str(tmp_path / "b.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_sweep_out_that_is_a_file(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: v\ntasks: [arith]\nalgorithms: [grpo]\nseeds: [0]\nbudget: {updates: 1}\n")
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["sweep", "run", str(spec), "--out", str(f)]) == 2
    assert "which is a file" in capsys.readouterr().err


def test_runs_that_never_started_make_the_sweep_exit_non_zero(tmp_path, capsys, monkeypatch):
    import rlsuite.sweeps.launch as launch

    monkeypatch.setattr(launch, "launch", lambda *a, **k: [{"code": 1, "error": "job died before the run"}])
    spec = tmp_path / "s.yaml"
    spec.write_text("name: v\ntasks: [arith]\nalgorithms: [grpo]\nseeds: [0]\nbudget: {updates: 1}\nbase: none\n")
    assert main(["sweep", "run", str(spec), "--cluster", "local", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "1 run(s) never started (state pending)" in err


def test_bundled_specs_still_validate():
    for name in ("batch_size", "three_po", "example"):
        assert expand(load(name))


def test_score_settings_are_kept_as_given():
    assert parse({**BASE, "score": {"per_dataset": False, "metric": "greedy_acc"}}, "s.yaml").score == \
        {"per_dataset": False, "metric": "greedy_acc"}
    assert parse(BASE, "s.yaml").score == {}
