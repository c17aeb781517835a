"""``train.num_threads``: 1 by default (in the run id), ``auto`` opt-in (this machine's cores,
the string hashed), and the one-line hint of a single ``rlsuite run`` at 1 thread on a machine
with more than 2 cores."""

from __future__ import annotations

import json

import pytest

import rlsuite.suite.config as config
from rlsuite.suite.cli import main
from rlsuite.suite.config import DistConfig, TrainConfig, resolve_threads, threads_hint
from rlsuite.suite.errors import BadInput
from rlsuite.suite.spec import resolve, spec_from_dict


def test_auto_is_accepted_hashed_as_written_and_resolved_to_the_affinity_mask(monkeypatch):
    base = resolve("arith", "grpo", "tiny", 0)
    auto = resolve("arith", "grpo", "tiny", 0, sets=[("train.num_threads", "auto")])
    assert base.train.num_threads == 1 and auto.train.num_threads == "auto"
    ids = {resolve("arith", "grpo", "tiny", 0, sets=[("train.num_threads", n)]).run_id for n in (1, 2, 16)}
    assert auto.run_id not in ids and len(ids) == 3  # its own run id, whatever the machine
    assert spec_from_dict(auto.to_dict()).run_id == auto.run_id
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert resolve_threads("auto") == 16 and resolve_threads(3) == 3
    assert resolve("arith", "grpo", "tiny", 0, sets=[("train.num_threads", "auto")]).run_id == auto.run_id
    for bad in (0, "all", 1.5, None):
        with pytest.raises(BadInput, match="train.num_threads"):
            resolve("arith", "grpo", "tiny", 0, sets=[("train.num_threads", bad)])


@pytest.mark.parametrize("cores, threads, world, hinted", [(16, 1, 1, True), (3, 1, 1, True), (2, 1, 1, False),
                                                           (16, "auto", 1, False), (16, 2, 1, False),
                                                           (16, 1, 2, False)])
def test_the_hint(monkeypatch, cores, threads, world, hinted):
    monkeypatch.setattr(config, "available_cores", lambda: cores)
    hint = threads_hint(TrainConfig(num_threads=threads), DistConfig(world_size=world))
    if hinted:
        assert hint == (f"hint: train.num_threads=1 on a {cores}-core machine; train.num_threads=auto uses them "
                        "(it changes the run id)")
    else:
        assert hint is None


SMALL = ["--task", "arith", "--algo", "grpo", "--set", "model.warm_start=none", "--set", "eval.max_prompts=2",
    "--set", "eval.test_prompts=2",
         "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2", "--budget", "updates=1"]


def test_a_run_prints_the_hint_once_and_auto_records_the_count_used(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(config, "available_cores", lambda: 16)
    assert main(["run", *SMALL, "--out", str(tmp_path / "one")]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("hint:")] == [
        "hint: train.num_threads=1 on a 16-core machine; train.num_threads=auto uses them (it changes the run id)"]
    monkeypatch.setattr(config, "available_cores", lambda: 2)
    assert main(["run", *SMALL, "--set", "train.num_threads=auto", "--out", str(tmp_path / "auto")]) == 0
    out, err = capsys.readouterr()
    assert "hint:" not in err
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    assert json.load(open(f"{run_dir}/spec.json"))["train"]["num_threads"] == "auto"
    assert json.load(open(f"{run_dir}/env.json"))["num_threads"] == 2
