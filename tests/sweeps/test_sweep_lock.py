"""Sweeps and run-folder locks: a run whose lock another process holds is skipped (and said so);
two copies of one sweep started at once train every run once.

Run: pytest tests/sweeps/test_sweep_lock.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from rlsuite.suite.runfolder import RunLock, lock_path, read_jsonl
from rlsuite.sweeps.launch import run_state, to_submit
from rlsuite.sweeps.spec import expand, load

SPEC = """
name: twice
tasks: [arith]
algorithms: [grpo]
seeds: [0, 1]
budget: {updates: 2}
base: none
set: {eval.max_prompts: 8, eval.test_prompts: 8, rollout.prompts_per_step: 4, rollout.group_size: 4}
resources: {timeout_min: 10}
"""


def test_a_locked_run_is_skipped_and_said_so(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(SPEC)
    runs = expand(load(str(tmp_path / "s.yaml")))
    root = tmp_path / "twice"
    held = runs[0].run_id
    with RunLock(lock_path(root, held), held):
        assert run_state(root, held) == ("running", f"locked by pid {os.getpid()} on {socket.gethostname()}")
        todo, skipped = to_submit(runs, root, retry_failed=False)
    assert [r.run_id for r in todo] == [runs[1].run_id]
    assert skipped == {"locked (held by another process)": [held]}
    assert f"skipping {held}: locked by pid {os.getpid()}" in capsys.readouterr().err
    assert run_state(root, held) == ("pending", None) and not lock_path(root, held).exists()


def test_runs_are_submitted_seed_by_seed(tmp_path):
    """Arm by arm in the spec, seed by seed to submit: a sweep stopped part-way has paired runs."""
    (tmp_path / "s.yaml").write_text(SPEC.replace("algorithms: [grpo]", "algorithms: [grpo, dr_grpo]")
                                     .replace("seeds: [0, 1]", "seeds: [3, 1, 2]"))
    runs = expand(load(str(tmp_path / "s.yaml")))
    assert [(r.algo.name, r.seed) for r in runs][:3] == [("grpo", 3), ("grpo", 1), ("grpo", 2)]
    todo, _ = to_submit(runs, tmp_path / "twice", retry_failed=False)
    assert [(r.algo.name, r.seed) for r in todo] == [("grpo", 3), ("dr_grpo", 3), ("grpo", 1), ("dr_grpo", 1),
                                                     ("grpo", 2), ("dr_grpo", 2)]


def test_a_resumed_sweep_finishes_its_earliest_seed_first(tmp_path):
    """Seeds go in the whole sweep's order, not in the order of the runs still to do: with GRPO's seed 1
    done, Dr. GRPO's seed 1 still runs before either arm's seed 2 (ranked by the remaining runs, GRPO's
    seed 2 would come first and a stop after it would leave seed 1 unpaired)."""
    (tmp_path / "s.yaml").write_text(SPEC.replace("algorithms: [grpo]", "algorithms: [grpo, dr_grpo]")
                                     .replace("seeds: [0, 1]", "seeds: [1, 2]"))
    runs = expand(load(str(tmp_path / "s.yaml")))
    root = tmp_path / "twice"
    done = next(r for r in runs if (r.algo.name, r.seed) == ("grpo", 1))
    (root / done.run_id).mkdir(parents=True)
    (root / done.run_id / "status.json").write_text(json.dumps({"state": "completed"}))
    rest = [r for r in runs if r is not done]
    todo, skipped = to_submit(rest, root, retry_failed=False, order=runs)
    assert [(r.algo.name, r.seed) for r in todo] == [("dr_grpo", 1), ("grpo", 2), ("dr_grpo", 2)]
    todo, skipped = to_submit(runs, root, retry_failed=False)
    assert [(r.algo.name, r.seed) for r in todo] == [("dr_grpo", 1), ("grpo", 2), ("dr_grpo", 2)]
    assert skipped == {"completed": [done.run_id]}


def test_two_copies_of_a_sweep_at_once_train_each_run_once(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "rlsuite.suite.cli", "sweep", "run", str(spec), "--out", str(tmp_path),
           "--workers", "1"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    root = tmp_path / "twice"
    ids = [r.run_id for r in expand(load(str(spec)))]
    for rid in ids:
        st = json.loads((root / rid / "status.json").read_text())
        assert st["state"] == "completed" and st["attempt"] == 1, (rid, st)
        assert [r["step"] for r in read_jsonl(root / rid / "metrics.jsonl")] == [1, 2], rid
        evals = read_jsonl(root / rid / "evals.jsonl")
        assert sum(e["final"] for e in evals) == 2 and sum(e["step"] == 0 for e in evals) == 2, rid
    assert not list(root.glob("*.lock"))
    assert all("completed=2" in out[0] for out in outs), outs
