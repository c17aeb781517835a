"""A full disk: one message naming the folder and "no space left", exit 1, state ``failed``
(kept in memory and written later when even that write fails), no temporaries left behind, and
a later run resumes and completes.

ENOSPC is injected into the write paths of a small in-process run; a real 4 MiB tmpfs is used
too where this process may mount one (root), else that test is skipped.

Run: pytest tests/integration/test_disk_full.py
"""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

import rlsuite.suite.runfolder as rf
import rlsuite.suite.runner as runner
from rlsuite.suite.cli import _spec_from_args, build_parser, main
from rlsuite.suite.runfolder import read_jsonl

FAST = ["--task", "arith", "--algo", "grpo", "--budget", "samples=256", "--set", "model.warm_start=none",
        "--set", "eval.max_prompts=16",
        "--set", "eval.test_prompts=16", "--set", "rollout.prompts_per_step=8", "--set", "rollout.group_size=4",
        "--set", "train.checkpoint_every=2"]


def _run_dir(out: Path) -> Path:
    a = build_parser().parse_args(["run", *FAST, "--out", str(out)])
    return out / _spec_from_args(a, a.algo, a.budget).run_id


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _one_error_line(err: str, rd: Path) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert "no space left" in lines[0] and str(rd) in lines[0]
    return lines[0]


def _temporaries(rd: Path) -> list[str]:
    return sorted(p.name for p in rd.glob(".*"))


def _complete_later(tmp_path: Path, capsys, rd: Path) -> None:
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "completed" and st["attempt"] == 2
    assert [r["step"] for r in read_jsonl(rd / "metrics.jsonl")] == list(range(1, 9))
    assert _temporaries(rd) == [] and not list(tmp_path.glob("*.lock"))


def test_enospc_appending_a_row_fails_the_run_with_one_message(tmp_path, capsys, monkeypatch):
    rd = _run_dir(tmp_path)
    real_append, calls = rf.RunFolder.append, {"n": 0}

    def append(self, name, rows, durable=True):
        if name == "metrics.jsonl":
            calls["n"] += 1
            if calls["n"] == 5:  # after the checkpoint at step 4: a torn row, then ENOSPC
                with open(self.file(name), "a") as fh:
                    fh.write('{"step": 5, "loss/pol')
                _enospc()
        return real_append(self, name, rows, durable)

    monkeypatch.setattr(rf.RunFolder, "append", append)
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 1
    line = _one_error_line(capsys.readouterr().err, rd)
    assert "state failed recorded" in line
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "failed" and "no space left" in st["reason"] and st["step"] == 4
    assert _temporaries(rd) == []
    monkeypatch.undo()
    _complete_later(tmp_path, capsys, rd)  # the torn row is dropped on resume


def test_a_failed_checkpoint_write_removes_its_partial_copy(tmp_path, capsys, monkeypatch):
    """torch.save on a full disk raises a RuntimeError without an errno ("iostream error")."""
    import torch

    rd = _run_dir(tmp_path)
    real_save, calls = torch.save, {"n": 0}

    def save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            Path(f).write_bytes(b"\0" * 1000)  # the partial file
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0\n"
                               "basic_ios::clear: iostream error")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(rf, "free_bytes", lambda path: 0)  # the file system is full
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 1
    _one_error_line(capsys.readouterr().err, rd)
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "failed" and "no space left" in st["reason"]
    assert _temporaries(rd) == []  # no partial .checkpoint.tmp
    monkeypatch.undo()
    _complete_later(tmp_path, capsys, rd)


def test_a_status_that_cannot_be_written_is_kept_and_written_later(tmp_path, capsys, monkeypatch):
    rd = _run_dir(tmp_path)
    real_write, state = rf.atomic_write_text, {"full": False}
    real_append = rf.RunFolder.append

    def append(self, name, rows, durable=True):
        if name == "metrics.jsonl" and any(r.get("step") == 3 for r in rows):
            state["full"] = True  # from here on every write fails
        if state["full"]:
            _enospc()
        return real_append(self, name, rows, durable)

    def write(path, text, durable=True):
        if state["full"]:  # the real write on a full disk: its temporary is created, then ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_write(path, text, durable)

    registered = []
    monkeypatch.setattr(rf.RunFolder, "append", append)
    monkeypatch.setattr(rf, "atomic_write_text", write)
    monkeypatch.setattr(runner.atexit, "register", lambda fn, *a: registered.append((fn, a)))
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 1
    line = _one_error_line(capsys.readouterr().err, rd)
    assert "kept in memory" in line
    assert json.loads((rd / "status.json").read_text())["state"] == "running"  # on disk: not yet
    assert len(registered) == 1 and not list(tmp_path.glob("*.lock"))
    state["full"] = False  # space is back: the exit handler writes the kept status
    fn, args = registered[0]
    fn(*args)
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "failed" and "no space left" in st["reason"]
    assert _temporaries(rd) == []
    monkeypatch.undo()
    _complete_later(tmp_path, capsys, rd)


@pytest.fixture()
def small_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    try:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)


def test_a_real_full_tmpfs(small_tmpfs, capsys):
    """A 4 MiB tmpfs: the run's first checkpoint (~10 MB) does not fit."""
    rd = _run_dir(small_tmpfs)
    assert main(["run", *FAST, "--out", str(small_tmpfs)]) == 1
    _one_error_line(capsys.readouterr().err, rd)
    st = json.loads((rd / "status.json").read_text())
    assert st["state"] == "failed" and "no space left" in st["reason"]
    assert _temporaries(rd) == [] and not list(small_tmpfs.glob("*.lock"))
