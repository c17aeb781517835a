"""The run folder: the contract between trainer, sweeps and reports.

``<out>/<run_id>/`` holds ``spec.json``, ``env.json``, ``metrics.jsonl`` (one row per step),
``evals.jsonl``, ``samples.jsonl``, ``status.json``, ``checkpoint/`` and ``final/``.
JSON documents are written atomically (temporary name, fsync, rename), so a reader never sees
half a document; ``checkpoint/`` is replaced atomically as a whole. A completed run is never
written to again.

``status.json``: ``state`` ∈ running, completed, diverged, failed, preempted, cancelled;
``reason``, ``step``, ``budget``, ``started_at``, ``updated_at`` (a heartbeat refreshed
while the run lives), ``host``, ``pid``, ``attempt``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional

STATES = ("running", "completed", "diverged", "failed", "preempted", "cancelled")
#: Seconds without a heartbeat after which a ``running`` status from another host is stale.
STALE_AFTER_S = float(os.environ.get("RLSUITE_STALE_AFTER_S", "180"))


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=_json_default, allow_nan=True)


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write ``text`` under a temporary name, then rename it over ``path`` (readers see the old or
    the new document, never half of one). ``durable``: fsync before the rename (survives a crash
    of the machine, not only of the process)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, default=_json_default, indent=2, allow_nan=True) + "\n", durable)


def read_json(path: Path) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (killed writer) is ignored."""
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except OSError:
        pass
    return rows


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(status: dict) -> bool:
    """A ``running`` status whose process is gone (same host) or whose heartbeat is old."""
    if status.get("state") != "running":
        return False
    if status.get("host") == socket.gethostname() and isinstance(status.get("pid"), int):
        if not pid_alive(status["pid"]) or status["pid"] == os.getpid():
            return True
    try:
        updated = _dt.datetime.fromisoformat(status["updated_at"]).timestamp()
    except (KeyError, ValueError, TypeError):
        return True
    return time.time() - updated > STALE_AFTER_S


class RunFolder:
    """Writer for one run folder (used by the trainer only)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._status: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._beat: Optional[threading.Thread] = None
        self._stop = threading.Event()

    # -- files ---------------------------------------------------------------------------
    def file(self, name: str) -> Path:
        return self.path / name

    def append(self, name: str, rows: Iterable[dict], durable: bool = True) -> None:
        """Append JSONL rows. ``durable=False`` skips the fsync (the rows reach the OS and survive a
        crash of the process); :meth:`sync` makes them durable later (the trainer does before
        each checkpoint)."""
        with open(self.file(name), "a", encoding="utf-8") as fh:
            for r in rows:
                fh.write(dumps(r) + "\n")
            fh.flush()
            if durable:
                os.fsync(fh.fileno())

    def sync(self, *names: str) -> None:
        """fsync files appended with ``durable=False``."""
        for name in names:
            try:
                fd = os.open(self.file(name), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def truncate_jsonl(self, name: str, max_step: int) -> None:
        """Keep rows with ``step ≤ max_step`` (resume from a checkpoint at ``max_step``)."""
        path = self.file(name)
        if path.exists():
            rows = [r for r in read_jsonl(path) if r.get("step", 0) <= max_step]
            atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))

    # -- status and heartbeat ------------------------------------------------------------
    def read_status(self) -> Optional[dict]:
        return read_json(self.file("status.json"))

    def set_status(self, durable: bool = True, **fields: Any) -> None:
        """Update ``status.json`` atomically; ``durable=False`` (per-step progress) skips the fsync."""
        with self._lock:
            self._status.update(fields)
            self._status["updated_at"] = now_iso()
            atomic_write_json(self.file("status.json"), self._status, durable)

    def start_heartbeat(self, every_s: float = 30.0) -> None:
        def beat() -> None:
            while not self._stop.wait(every_s):
                if self._status.get("state") == "running":
                    self.set_status()

        self._beat = threading.Thread(target=beat, daemon=True)
        self._beat.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()

    # -- checkpoints ---------------------------------------------------------------------
    def replace_dir(self, name: str, writer) -> None:
        """Write a directory with ``writer(tmp_path)`` then swap it in atomically."""
        final = self.file(name)
        tmp = self.file(f".{name}.tmp")
        old = self.file(f".{name}.old")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        writer(tmp)
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)


class ReadOnlyFolder(RunFolder):
    """The run folder as data-parallel ranks other than 0 see it: reads (the checkpoint on
    resume) work, every write is a no-op, so rank 0 alone writes the run folder."""

    def append(self, name: str, rows: Iterable[dict], durable: bool = True) -> None:
        pass

    def sync(self, *names: str) -> None:
        pass

    def truncate_jsonl(self, name: str, max_step: int) -> None:
        pass

    def set_status(self, durable: bool = True, **fields: Any) -> None:
        self._status.update(fields)

    def start_heartbeat(self, every_s: float = 30.0) -> None:
        pass

    def replace_dir(self, name: str, writer) -> None:
        pass


def cpu_model() -> Optional[str]:
    """The CPU model: ``model name`` from /proc/cpuinfo on Linux, else ``platform.processor()``."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def env_info(device: str, precision: str, threads: int) -> dict[str, Any]:
    """Git commit and dirty flag, package versions, device, precision, threads, host, CPU model."""
    from importlib import metadata

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> Optional[str]:
        try:
            res = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    if commit is None:  # an installed copy outside a checkout
        dirty = None
    pkgs = {}
    for name in ("rlsuite", "torch", "transformers", "tokenizers", "datasets", "math-verify", "numpy"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"git_commit": commit, "git_dirty": dirty, "packages": pkgs, "device": device,
            "precision": precision, "num_threads": threads, "host": socket.gethostname(),
            "python": sys.version.split()[0], "platform": sys.platform, "cpu_model": cpu_model()}


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
