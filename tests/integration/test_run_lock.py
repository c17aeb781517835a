"""One writer per run folder (``<out>/<run_id>.lock``), stale locks, and resuming from an
interrupted checkpoint swap or other leftovers.

Run: pytest tests/integration/test_run_lock.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsuite.suite.cli import _spec_from_args, build_parser, main
from rlsuite.suite.runfolder import RunFolder, RunLock, RunLocked, lock_holder, lock_path, read_jsonl

FAST = ["--task", "arith", "--algo", "grpo", "--budget", "samples=256", "--set", "model.warm_start=none",
        "--set", "eval.max_prompts=16",
        "--set", "eval.test_prompts=16", "--set", "rollout.prompts_per_step=8", "--set", "rollout.group_size=4"]


def _run_id(*args: str) -> str:
    a = build_parser().parse_args(["run", *args])
    return _spec_from_args(a, a.algo, a.budget).run_id


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*"))


# -- the lock itself ---------------------------------------------------------------------
def test_lock_is_exclusive_names_its_holder_and_is_removed_on_release(tmp_path):
    path = lock_path(tmp_path / "new" / "out", "r1")
    lock = RunLock(path, "r1").acquire()
    rec = json.loads(path.read_text())
    assert rec["host"] == socket.gethostname() and rec["pid"] == os.getpid() and rec["heartbeat_unix"] > 0
    assert lock_holder(path)["pid"] == os.getpid()
    with pytest.raises(RunLocked, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        RunLock(path, "r1").acquire(wait_s=0.1)  # another open file description: flock conflicts
    lock.release()
    assert not path.exists() and lock_holder(path) is None
    assert not (tmp_path / "new").exists()  # the folders the lock created are removed again


def test_lock_record_of_a_dead_local_process_or_a_stale_host_is_taken_over(tmp_path):
    path = lock_path(tmp_path, "r")
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "heartbeat_unix": time.time()}))
    assert lock_holder(path) is None  # same host: the flock decides, and nobody holds it
    RunLock(path, "r").acquire().release()
    path.write_text(json.dumps({"host": "elsewhere", "pid": 7, "heartbeat_unix": time.time() - 10_000}))
    assert lock_holder(path) is None
    RunLock(path, "r").acquire().release()
    path.write_text(json.dumps({"host": "elsewhere", "pid": 7, "heartbeat_unix": time.time(),
                                "heartbeat": "now"}))
    assert lock_holder(path)["host"] == "elsewhere"
    with pytest.raises(RunLocked, match="pid 7 on elsewhere"):
        RunLock(path, "r").acquire(wait_s=0)
    assert json.loads(path.read_text())["host"] == "elsewhere"  # a refused claim leaves the record


# -- two copies of one run ---------------------------------------------------------------
def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "rlsuite.suite.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_two_identical_runs_started_at_once_train_once(tmp_path):
    procs = [_cli(*FAST, "--out", str(tmp_path)) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    err = outs[loser][1]
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "locked by another run" in errors[0], err
    assert f"pid {procs[winner].pid} on {socket.gethostname()}" in errors[0]
    rd = tmp_path / _run_id(*FAST, "--out", str(tmp_path))
    assert [r["step"] for r in read_jsonl(rd / "metrics.jsonl")] == list(range(1, 9))
    evals = read_jsonl(rd / "evals.jsonl")
    assert len(evals) == 2 + 3 + 2 and sum(e["final"] for e in evals) == 2
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "completed" and st["attempt"] == 1 and st["pid"] == procs[winner].pid
    assert sorted(p.name for p in tmp_path.iterdir()) == [rd.name]  # the lock file is gone
    assert _leftovers(rd) == []


def test_a_lock_held_from_another_host_refuses_until_its_heartbeat_is_stale(tmp_path, capsys):
    rid = _run_id(*FAST, "--out", str(tmp_path))
    lock = tmp_path / f"{rid}.lock"
    lock.write_text(json.dumps({"host": "node-b", "pid": 4242, "heartbeat": "fresh",
                                "heartbeat_unix": time.time()}))
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "locked by another run (pid 4242 on node-b" in err and err.count("error:") == 1
    assert not (tmp_path / rid).exists() and json.loads(lock.read_text())["host"] == "node-b"
    lock.write_text(json.dumps({"host": "node-b", "pid": 4242, "heartbeat": "old",
                                "heartbeat_unix": time.time() - 3600}))  # older than the 180 s threshold
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / rid / "status.json").read_text())["state"] == "completed"
    assert not lock.exists()


# -- interrupted checkpoint swaps and other leftovers ------------------------------------
def test_replace_dir_marks_complete_and_recover_dir_prefers_a_complete_tmp(tmp_path):
    f = RunFolder(tmp_path)
    f.replace_dir("checkpoint", lambda d: (d / "state.pt").write_text("v1"))
    f.replace_dir("checkpoint", lambda d: (d / "state.pt").write_text("v2"))
    assert (tmp_path / "checkpoint" / ".complete").is_file() and _leftovers(tmp_path) == []
    # killed between the two renames: .checkpoint.old (v2) and a complete .checkpoint.tmp (v3)
    os.replace(tmp_path / "checkpoint", tmp_path / ".checkpoint.old")
    (tmp_path / ".checkpoint.tmp").mkdir()
    (tmp_path / ".checkpoint.tmp" / "state.pt").write_text("v3")
    (tmp_path / ".checkpoint.tmp" / ".complete").write_text("x")
    assert f.recover_dir("checkpoint") == "tmp" and (tmp_path / "checkpoint" / "state.pt").read_text() == "v3"
    f.clean_leftovers()
    # killed while writing the copy after the first rename: .checkpoint.old and a partial .tmp
    os.replace(tmp_path / "checkpoint", tmp_path / ".checkpoint.old")
    (tmp_path / ".checkpoint.tmp").mkdir()
    (tmp_path / ".checkpoint.tmp" / "state.pt").write_text("v4 (torn")
    assert f.recover_dir("checkpoint") == "old" and (tmp_path / "checkpoint" / "state.pt").read_text() == "v3"
    assert f.recover_dir("checkpoint") is None  # nothing to do with checkpoint/ in place
    (tmp_path / ".status.json.tmp123").write_text("")
    assert sorted(f.clean_leftovers()) == [".checkpoint.tmp", ".status.json.tmp123"]
    assert _leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def completed_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("done")
    assert main(["run", *FAST, "--set", "train.keep_checkpoint=true", "--out", str(out)]) == 0  # (not in the run id)
    return out / _run_id(*FAST, "--out", str(out))


@pytest.mark.parametrize("leftover", ["tmp", "old"])
def test_resume_recovers_an_interrupted_swap_and_drops_leftovers(completed_run, tmp_path, capsys, leftover):
    rd = tmp_path / completed_run.name
    shutil.copytree(completed_run, rd)
    before = read_jsonl(rd / "metrics.jsonl")
    ck = rd / "checkpoint"
    if leftover == "tmp":  # killed after checkpoint/ → .checkpoint.old, before .tmp → checkpoint/
        shutil.copytree(ck, rd / ".checkpoint.old")
        os.replace(ck, rd / ".checkpoint.tmp")
    else:  # killed while writing the new copy: only .checkpoint.old is complete
        os.replace(ck, rd / ".checkpoint.old")
        (rd / ".checkpoint.tmp").mkdir()
        (rd / ".checkpoint.tmp" / "state.pt").write_bytes(b"torn")
    (rd / ".status.json.tmp99999").write_text("")  # a 0-byte temporary of a full disk
    with open(rd / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 9, "loss/poli')  # a torn last row
    st = json.loads((rd / "status.json").read_text())
    st.update(state="running", pid=_dead_pid(), host=socket.gethostname())  # the process was killed
    (rd / "status.json").write_text(json.dumps(st))
    capsys.readouterr()
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"from .checkpoint.{leftover}" in err
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "completed" and st["attempt"] == 2 and st["step"] == 8
    after = read_jsonl(rd / "metrics.jsonl")
    assert after == before  # resumed at step 8 (a restart from step 0 would rewrite `time`)
    assert (rd / "metrics.jsonl").read_text().endswith("\n")
    assert sum(e["final"] for e in read_jsonl(rd / "evals.jsonl")) == 2
    assert _leftovers(rd) == [] and not ck.exists()  # completed again: the recovered checkpoint is dropped


def test_sigterm_at_any_point_releases_the_lock(tmp_path):
    """SIGTERM while the model loads (exit through the finally blocks) or while training (the
    trainer stops at the step boundary: cancelled): 143 either way, and the lock file is gone."""
    lock = tmp_path / f"{_run_id(*FAST, '--out', str(tmp_path))}.lock"
    proc = _cli(*FAST, "--out", str(tmp_path))
    deadline = time.time() + 300
    while not lock.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    assert lock.exists(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert not lock.exists() and lock_holder(lock) is None
