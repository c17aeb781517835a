"""The run folder: the contract between trainer, sweeps and reports.

``<out>/<run_id>/`` holds ``spec.json``, ``env.json``, ``metrics.jsonl`` (one row per step),
``evals.jsonl``, ``samples.jsonl``, ``problems.jsonl`` (per-problem results of the final evals,
``final: true``, and of the base's test eval at step 0), ``status.json``, ``checkpoint/`` and ``final/``.
JSON documents are written atomically (temporary name, fsync, rename), so a reader never sees
half a document; ``checkpoint/`` is replaced as a whole (a new copy is written under
``.checkpoint.tmp`` with a completion marker, then swapped in; :meth:`RunFolder.recover_dir`
finishes a swap a kill interrupted). Once its ``completed`` state is recorded a run deletes its
``checkpoint/`` (unless ``train.keep_checkpoint``) and is never written to again.

One writer per run folder: :class:`RunLock` holds ``<out>/<run_id>.lock`` (``fcntl.flock``, with
host, pid and a heartbeat in the file, so a holder on another host whose ``flock`` does not reach
this one is still seen while its heartbeat is fresh) for the life of the run.

``status.json``: ``state`` ∈ running, completed, diverged, failed, preempted, cancelled;
``reason``, ``step``, ``budget``, ``started_at``, ``updated_at`` (a heartbeat refreshed
while the run lives), ``host``, ``pid``, ``attempt``.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
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


def stale_after_s() -> float:
    """Seconds without a heartbeat after which a ``running`` status from another host is stale
    (``RLSUITE_STALE_AFTER_S``, default 180; read at each call, so a rank started from a preloaded
    server sees the launcher's)."""
    return float(os.environ.get("RLSUITE_STALE_AFTER_S", "180"))


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
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:  # a full disk must not leave a (0-byte) temporary behind
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: Path, obj: Any, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, default=_json_default, indent=2, allow_nan=True) + "\n", durable)


def read_json(path: Path) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def read_jsonl(path: Path, problems: Optional[list[str]] = None, *, keep_last: Optional[int] = None) -> list[dict]:
    """The JSON objects of a JSONL file (the one reader of run-folder logs: the engine, sweeps,
    reports and benchmarks). A missing file gives no rows; a line that is not a JSON object (a
    torn last line of a killed writer, say) is skipped; NaN/Infinity tokens are accepted. With
    ``problems``, each skipped line and an unreadable file add a message there.

    keep_last: parse only the last N non-empty lines (for large sample files).
    """
    note = problems.append if problems is not None else (lambda _msg: None)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        note(f"{path}: unreadable ({exc}); skipped")
        return []
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    complete_end = text.endswith("\n")
    numbered = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip()]
    if keep_last is not None:
        numbered = numbered[-keep_last:]
    rows = []
    for i, line in numbered:
        try:
            obj = json.loads(line)
        except ValueError:
            last = i == len(lines) and not complete_end
            note(f"{path}:{i}: {'truncated last line (still being written?)' if last else 'invalid JSON'}; "
                 "line skipped")
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            note(f"{path}:{i}: not a JSON object; line skipped")
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
    return time.time() - updated > stale_after_s()

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: Free bytes below which a write error without an errno (torch.save's "iostream error",
#: "file write failed") is taken for a full disk.
LOW_SPACE_BYTES = 64 << 20
_WRITE_FAILED_HINTS = ("iostream error", "file write failed", "No space left", "write failed")


def free_bytes(path: Path) -> Optional[int]:
    """Free bytes for unprivileged writers on the file system of ``path`` (or its nearest parent)."""
    p = Path(path)
    while True:
        try:
            st = os.statvfs(p)
            return st.f_bavail * st.f_frsize
        except OSError:
            if p.parent == p:
                return None
            p = p.parent


def is_disk_full(exc: BaseException, path: Optional[Path] = None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a full disk or quota: ENOSPC/EDQUOT,
    or a write error without an errno (C++ writers) while ``path``'s file system is (nearly) full."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return True
        if path is not None and any(h in str(e) for h in _WRITE_FAILED_HINTS):
            free = free_bytes(path)
            if free is not None and free < LOW_SPACE_BYTES:
                return True
        e = e.__cause__ or e.__context__
    return False


class RunLocked(Exception):
    """The run folder's lock is held by a live writer (``holder``: its lock record, or {})."""

    def __init__(self, path: Path, holder: dict) -> None:
        self.path, self.holder = path, holder
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
        beat = f", heartbeat {holder['heartbeat']}" if holder.get("heartbeat") else ""
        super().__init__(f"{path} is held by another run ({who}{beat}); not starting a second copy")


def lock_path(out: Path, run_id: str) -> Path:
    """The lock file of the run folder ``out/run_id`` (a sibling, so it exists before the folder)."""
    return Path(out) / f"{run_id}.lock"


def _read_lock(fd_or_path) -> dict:
    try:
        if isinstance(fd_or_path, int):
            raw = os.pread(fd_or_path, 4096, 0)
        else:
            with open(fd_or_path, "rb") as fh:
                raw = fh.read(4096)
        rec = json.loads(raw.decode("utf-8", errors="replace").strip() or "{}")
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def _live_elsewhere(rec: dict) -> bool:
    """A lock record of another host whose heartbeat is fresh (``flock`` may not be shared across
    hosts on NFS/Lustre: the record is what tells that the lock is held)."""
    if not rec or rec.get("host") in (None, socket.gethostname()):
        return False
    try:
        beat = float(rec["heartbeat_unix"])
    except (KeyError, TypeError, ValueError):
        return False
    return time.time() - beat <= stale_after_s()


def lock_holder(path: Path) -> Optional[dict]:
    """The record of a live holder of the lock file ``path`` (flock held here, or a fresh heartbeat
    from another host), else None. Probes without creating or changing the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_lock(fd)
        except OSError:
            return None
        rec = _read_lock(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return rec if _live_elsewhere(rec) else None
    finally:
        os.close(fd)


class RunLock:
    """``fcntl.flock`` on ``<out>/<run_id>.lock``, held for a run's life by its one writer.

    The file holds ``host``, ``pid``, ``run_id``, ``started_at`` and ``heartbeat`` (refreshed every
    ``beat_s`` seconds by a thread). Acquiring fails (:class:`RunLocked`) when another process holds
    the flock, or when the record is another host's with a heartbeat younger than
    ``stale_after_s()`` (a stale record of a dead process or host is taken over). The kernel drops
    the flock when the process dies however it dies; :meth:`release` also removes the file (and
    the output folders the lock created, when empty)."""

    SIZE = 1024  # the record is rewritten in place, padded (never renamed: the flock is per inode)

    def __init__(self, path: Path, run_id: str = "", beat_s: float = 30.0) -> None:
        self.path, self.run_id, self.beat_s = Path(path), run_id, beat_s
        self.fd: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._created: list[Path] = []
        self.started_at = now_iso()

    def acquire(self, wait_s: float = 1.0) -> "RunLock":
        parent = self.path.parent
        missing = []
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._created = missing  # removed again on release when empty (bad input writes nothing)
        deadline = time.time() + wait_s  # brief contention (a sweep's probe) is waited out
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                rec = _read_lock(fd)
                os.close(fd)
                if time.time() < deadline:
                    time.sleep(0.05)
                    continue
                self._remove_created()
                raise RunLocked(self.path, rec) from None
            try:  # the holder before us may have removed the file: lock the one at the path
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            break
        rec = _read_lock(fd)
        if _live_elsewhere(rec):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._remove_created()
            raise RunLocked(self.path, rec)
        self.fd = fd
        self.beat()
        self._thread = threading.Thread(target=self._beat_loop, daemon=True, name="rlsuite-lock-heartbeat")
        self._thread.start()
        return self

    def record(self) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "run_id": self.run_id,
                "started_at": self.started_at, "heartbeat": now_iso(), "heartbeat_unix": time.time()}

    def beat(self) -> None:
        if self.fd is None:
            return
        data = json.dumps(self.record()).encode()
        try:
            os.pwrite(self.fd, data.ljust(max(self.SIZE, len(data) + 1)) + b"\n", 0)
        except OSError:  # a full disk: the flock still holds; the heartbeat ages
            pass

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.beat_s):
            self.beat()

    def release(self) -> None:
        self._stop.set()
        if self.fd is None:
            return
        try:  # remove the file while still holding the flock (a waiter re-checks the inode)
            if os.fstat(self.fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        for d in self._created:  # innermost first
            try:
                d.rmdir()  # only when empty
            except OSError:
                break

    def __enter__(self) -> "RunLock":
        return self if self.fd is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


COMPLETE = ".complete"  # marker written last into a replace_dir copy


class RunFolder:
    """Writer for one run folder (used by the trainer only)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._status: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._beat: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.unsaved = False  # a status update a failed write (full disk) kept in memory

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
        """Update ``status.json`` atomically; ``durable=False`` (per-step progress) skips the fsync.
        A failed write (a full disk) raises; the update is kept in memory (:attr:`unsaved`) and
        written by the next successful call or :meth:`flush_status`."""
        with self._lock:
            self._status.update(fields)
            self._status["updated_at"] = now_iso()
            self.unsaved = True
            atomic_write_json(self.file("status.json"), self._status, durable)
            self.unsaved = False

    def flush_status(self) -> bool:
        """Write an update a full disk kept in memory; True when nothing is left unsaved."""
        if not getattr(self, "unsaved", False):
            return True
        try:
            self.set_status()
        except OSError:
            return False
        return True

    def start_heartbeat(self, every_s: float = 30.0) -> None:
        def beat() -> None:
            while not self._stop.wait(every_s):
                if self._status.get("state") == "running":
                    try:
                        self.set_status()
                    except OSError:  # a full disk: the main thread meets it at its next write
                        pass

        self._beat = threading.Thread(target=beat, daemon=True)
        self._beat.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()

    # -- checkpoints ---------------------------------------------------------------------
    def replace_dir(self, name: str, writer) -> None:
        """Write a directory with ``writer(tmp_path)`` under ``.<name>.tmp``, fsync it and mark it
        complete (``.complete``), then swap it in: ``name`` → ``.<name>.old``, ``.<name>.tmp`` →
        ``name``, drop the old copy. A kill between the two renames leaves ``.<name>.old`` and a
        complete ``.<name>.tmp``, which :meth:`recover_dir` turns back into ``name``. A failed
        write removes its partial copy (a full disk gets its space back) and raises; a write
        error without an errno on a full disk (torch.save) is raised as ENOSPC."""
        final = self.file(name)
        tmp = self.file(f".{name}.tmp")
        old = self.file(f".{name}.old")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            writer(tmp)
            for f in sorted(tmp.rglob("*")):
                if f.is_file():
                    _fsync_path(f)
            (tmp / COMPLETE).write_text(now_iso() + "\n")
            _fsync_path(tmp / COMPLETE)
            _fsync_path(tmp)
        except BaseException as e:
            _drop_frames(e)  # close the failed writer's open file, or its space is not freed
            shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(e, OSError) and isinstance(e, Exception) and is_disk_full(e, self.path):
                first = str(e).strip().splitlines()[-1][:100] if str(e).strip() else ""
                raise OSError(errno.ENOSPC, f"No space left on device writing {tmp.name} "
                              f"({type(e).__name__}: {first})") from e
            raise
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_path(self.path)
        shutil.rmtree(old, ignore_errors=True)

    def remove_dir(self, name: str) -> bool:
        """Delete directory ``name`` (a completed run's ``checkpoint/``): renamed to ``.<name>.old``
        first, so a kill part-way leaves a leftover temporary, never a torn ``name``. Returns
        whether there was one."""
        final, old = self.file(name), self.file(f".{name}.old")
        if not final.is_dir():
            return False
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        _fsync_path(self.path)
        shutil.rmtree(old, ignore_errors=True)
        return True

    def recover_dir(self, name: str) -> Optional[str]:
        """Finish a :meth:`replace_dir` swap a kill interrupted: with ``name`` missing, a complete
        ``.<name>.tmp`` (it has the marker) becomes ``name``, else ``.<name>.old`` does. Returns
        what was used (``"tmp"``, ``"old"``) or None (nothing to recover)."""
        final, tmp, old = self.file(name), self.file(f".{name}.tmp"), self.file(f".{name}.old")
        if final.exists():
            return None
        if (tmp / COMPLETE).is_file():
            os.replace(tmp, final)
            return "tmp"
        if old.is_dir():
            os.replace(old, final)
            return "old"
        return None

    def clean_leftovers(self) -> list[str]:
        """Remove temporaries a killed or disk-full writer left (``.*.tmp*``, ``.*.old``); call
        after :meth:`recover_dir`, holding the run's lock. Returns the names removed."""
        gone = []
        for p in sorted(self.path.glob(".*.tmp*")) + sorted(self.path.glob(".*.old")):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    p.unlink()
                except OSError:
                    continue
            gone.append(p.name)
        return gone


def _drop_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames in ``exc``'s tracebacks (its causes' too), so
    objects holding files open there (torch.save's writer) are closed now."""
    import gc
    import traceback

    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    gc.collect()


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory (its entries); a file system that cannot is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno in DISK_FULL_ERRNOS:
            raise
    finally:
        os.close(fd)


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

    def remove_dir(self, name: str) -> bool:
        return False

    def recover_dir(self, name: str) -> Optional[str]:
        return None

    def clean_leftovers(self) -> list[str]:
        return []

    def flush_status(self) -> bool:
        return True


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
