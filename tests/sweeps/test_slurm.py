"""Sweeps on the real one-node SLURM cluster (scripts/slurm/cluster.sh), through submitit.

* a small sweep runs as a job array and completes; job logs are reachable from status;
* a run preempted with SIGUSR2 checkpoints, is requeued by submitit and ends with the same
  metrics as an uninterrupted run;
* a run cancelled with scancel is reported as ``cancelled``.

Marked ``slurm``; skipped when no cluster answers, unless RLSUITE_REQUIRE_SLURM=1 (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0 and \
            subprocess.run(["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(autouse=True)
def need_slurm():
    if not _cluster_up():
        msg = "no SLURM cluster answers (start one with: bash scripts/slurm/cluster.sh install && ... start)"
        if os.environ.get("RLSUITE_REQUIRE_SLURM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


SPEC = """
name: {name}
tasks: [arith]
algorithms: [grpo]
seeds: {seeds}
budget: {{updates: {updates}}}
base: none
set: {{train.checkpoint_every: 2, eval.max_prompts: 4,
    eval.test_prompts: 4, rollout.prompts_per_step: 4, rollout.group_size: 4}}
resources: {{timeout_min: 10, mem_gb: 2, array_parallelism: 2, cpus_per_task: 1}}
"""


def _spec(tmp_path: Path, name: str, seeds, updates: int) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SPEC.format(name=name, seeds=seeds, updates=updates))
    return p


def _wait(pred, timeout: float, what: str):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _job_id(root: Path) -> str:
    return _wait(lambda: next((r["job_id"] for r in read_jsonl(root / "jobs.jsonl")), None), 60, "job id")


def strip(rows):
    return [{k: v for k, v in r.items() if k not in ("time", "budget/wall_s") and not k.startswith("perf/")}
            for r in rows]


def test_small_sweep_as_a_job_array(tmp_path, capsys):
    spec = _spec(tmp_path, "arr", [0, 1], 2)
    assert main(["sweep", "run", str(spec), "--cluster", "slurm", "--out", str(tmp_path)]) == 0
    root = tmp_path / "arr"
    assert sorted(_status(p.parent)["state"] for p in root.glob("*/spec.json")) == ["completed", "completed"]
    jobs = read_jsonl(root / "jobs.jsonl")
    assert len(jobs) == 2 and all("_" in j["job_id"] for j in jobs)  # array tasks
    capsys.readouterr()
    assert main(["sweep", "status", str(root), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"] == {"completed": 2}
    assert all(Path(r["stderr"]).exists() for r in st["runs"]["completed"])


def test_preempted_run_is_requeued_and_matches_an_uninterrupted_run(tmp_path):
    spec = _spec(tmp_path, "pre", [0], 30)
    ref = tmp_path / "ref"
    assert main(["sweep", "run", str(spec), "--cluster", "local", "--out", str(ref)]) == 0
    ref_dir = next((ref / "pre").glob("*/spec.json")).parent

    assert main(["sweep", "run", str(spec), "--cluster", "slurm", "--no-wait", "--out", str(tmp_path)]) == 0
    root = tmp_path / "pre"
    run_dir = root / ref_dir.name
    job = _job_id(root)
    _wait(lambda: _status(run_dir).get("step", 0) >= 5, 240, "the run to reach step 5")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    _wait(lambda: _status(run_dir).get("state") == "preempted" or _status(run_dir).get("attempt", 1) > 1, 120,
          "the preemption checkpoint")
    final = _wait(lambda: _status(run_dir) if _status(run_dir).get("state") == "completed" else None, 300,
                  "the requeued run to complete")
    assert final["attempt"] >= 2
    assert strip(read_jsonl(run_dir / "metrics.jsonl")) == strip(read_jsonl(ref_dir / "metrics.jsonl"))
    assert strip(read_jsonl(run_dir / "evals.jsonl")) == strip(read_jsonl(ref_dir / "evals.jsonl"))


def test_cancelled_run_is_reported_as_cancelled(tmp_path, capsys):
    spec = _spec(tmp_path, "can", [0], 400)
    assert main(["sweep", "run", str(spec), "--cluster", "slurm", "--no-wait", "--out", str(tmp_path)]) == 0
    root = tmp_path / "can"
    job = _job_id(root)
    run_dir = _wait(lambda: next((p.parent for p in root.glob("*/status.json")), None), 120, "the run folder")
    _wait(lambda: _status(run_dir).get("step", 0) >= 2, 240, "the run to start stepping")
    subprocess.run(["scancel", job], check=True)
    _wait(lambda: _status(run_dir).get("state") == "cancelled", 120, "state cancelled")
    capsys.readouterr()
    assert main(["sweep", "status", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"cancelled": 1}
