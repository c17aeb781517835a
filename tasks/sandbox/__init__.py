"""A layered sandbox for running untrusted Python programs (model-written code) on one machine.

At start-up :func:`detect` probes what this machine allows; ``layers=("auto",)`` stacks
every layer that works, and a :class:`Sandbox` refuses to start (:class:`SandboxUnavailable`)
when no layer can hide the user's files, unless ``allow_unisolated=True`` says otherwise.

Layers (what each one adds; ``rlimit`` is always on):

* ``rlimit`` — a child per program in its own session and scratch directory with rlimits
  (CPU, address space, file size, open files, no core), a wall-clock timeout that kills the
  whole process group and whatever it left behind, a clean environment, no inherited
  descriptors, all capabilities dropped when running as root, and a seccomp guard: no
  ptrace, no System V IPC, signals only to itself, no file-metadata changes (chmod, chown,
  utime, extended attributes, inode-flag ioctls, truncate by path: Landlock does not cover
  them, and root without capabilities still owns the host's files), and no new processes
  unless RLIMIT_NPROC can count them per sandbox (``uid`` layer). It does **not** hide files
  or the network.
* ``uid`` (root only) — the program runs as a dedicated unprivileged uid per worker
  (allocated under a lock, so concurrent runs on a node never share one), which makes
  RLIMIT_NPROC effective (``max_procs``) and hides files that are not world-readable
  (``/etc/shadow``, ``/root``) — not world-readable data such as a dataset file. The
  interpreter must be readable by that uid: with ``python=None``, where the running one is
  not (e.g. under ``/root``), a world-usable ``/usr/bin/python3`` of the same version is used.
  The network stays open, world-writable directories stay writable and ``/proc`` still
  shows other processes' command lines.
* ``landlock`` — Landlock (kernel ≥ 5.13; no root, no namespaces: the layer for shared
  nodes): read-only system and interpreter directories, read-write scratch, nothing else;
  no TCP bind/connect (ABI ≥ 4); no signals or abstract sockets outside the sandbox
  (ABI ≥ 6); plus seccomp: no sockets of any family, mount, namespaces, io_uring, bpf,
  keyrings, perf, module or admin calls.
* ``bwrap`` — bubblewrap with every namespace unshared (user, mount, pid, net, ipc, uts,
  cgroup), ``--cap-drop ALL`` (without it a root sandbox could remount a read-only bind
  writable), read-only binds of ``/usr`` and the interpreter, a size-limited tmpfs as
  scratch, ``--die-with-parent``; nested user namespaces disabled.

Jobs run in forked children of a pre-started interpreter per worker (a *zygote*,
``warm=True``), inside the same layers; ``warm=False`` starts a fresh sandbox and
interpreter per job. A plain job (a program, ``str``) *passes* when it runs to its end
without an exception; ``exit()``/``os._exit()`` do not count. A :class:`Judged` job (what the
code tasks grade with) runs the candidate's solution in one process and the trusted tests in
another, the judge, which calls the candidate through proxies on builtin values and alone
holds the pass token (see :mod:`rlsuite.tasks.sandbox._inside`).

Example::

    from rlsuite.tasks.sandbox import Sandbox, SandboxConfig
    with Sandbox(SandboxConfig(workers=2)) as sb:
        [r.status for r in sb.run_many(["assert 1 + 1 == 2", "while True: pass"], timeout_s=1)]
        # ['passed', 'timeout']

``python -m rlsuite.tasks.sandbox`` prints the detection report and the share of the reward hacks of
:mod:`rlsuite.tasks.sandbox.battery` each available layer catches; ``benchmarks/sandbox/sandbox.py`` measures
each layer's rate and runs the hostile battery and the reward hacks on it.

Requirements: Linux on x86_64 or aarch64 (the seccomp filter's syscall tables). Limits that
remain: scratch outside bwrap is bounded per file, not in total; a program can use up to
``max_procs`` × ``memory_mb`` with the uid layer (no cgroup); a *plain* job's pass token is in
the program's own process (a program that reads the stack frames can forge it: use
:class:`Judged` jobs to grade); with ``rlimit`` alone nothing hides the answers on disk or stops
a program rewriting the interpreter's files.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import pwd
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Sequence

Layer = Literal["auto", "bwrap", "uid", "landlock", "rlimit"]
LAYERS: tuple[str, ...] = ("bwrap", "uid", "landlock", "rlimit")
ISOLATING = ("bwrap", "uid", "landlock")
Status = Literal["passed", "failed", "timeout", "output_limit", "crashed", "sandbox_error"]

_INSIDE = Path(__file__).with_name("_inside.py")
PREIMPORT = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "typing",
             "random", "statistics", "fractions", "decimal", "operator", "copy", "datetime", "json", "hashlib",
             "array", "cmath", "traceback", "io", "textwrap", "unicodedata", "numbers", "dataclasses", "enum")
UID_LOCK_DIR = Path("/run/lock/rlsuite-sandbox") if Path("/run/lock").is_dir() else Path("/tmp/rlsuite-sandbox-uids")


class SandboxUnavailable(RuntimeError):
    """The requested layers cannot run here (the message says why and what to do)."""


class SandboxError(RuntimeError):
    """The sandbox itself failed repeatedly (not a program's fault)."""


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    layers: tuple[Layer, ...] = ("auto",)
    """``auto`` = every layer :func:`detect` finds usable; or an explicit list of ``bwrap``,
    ``uid``, ``landlock``, ``rlimit`` (``rlimit`` is always added). A listed layer that
    cannot run here is an error, never silently dropped."""
    python: Optional[str] = None
    """Interpreter that runs the programs (None = this one). The ``uid`` layer needs one
    its uid can read, e.g. ``/usr/bin/python3`` when this one lives under ``/root``."""
    workers: int = 2
    """Programs run at once (one zygote each)."""
    timeout_s: float = 3.0
    """Default wall-clock limit per program (``run_many`` may override it)."""
    memory_mb: int = 1024
    """RLIMIT_AS per process, MiB."""
    file_mb: int = 16
    """RLIMIT_FSIZE: largest file a program may write, MiB."""
    scratch_mb: int = 64
    """Size of the bwrap scratch tmpfs, MiB (elsewhere scratch is a host directory bounded only
    per file by ``file_mb``)."""
    output_bytes: int = 65536
    """Output kept per program; a program printing more is killed (status ``output_limit``)."""
    max_procs: int = 16
    """RLIMIT_NPROC for the worker's uid (``uid`` layer); without that layer a program may not
    create processes at all (threads are fine)."""
    warm: bool = True
    """Fork programs from a pre-started interpreter per worker (a zygote, ~10× faster);
    False = a fresh sandbox and interpreter per program."""
    uid_base: int = 61000
    """First uid the ``uid`` layer may use; it takes unused ones from here under a lock."""
    uid_count: int = 1024
    """How many uids from ``uid_base`` the ``uid`` layer may use."""
    allow_unisolated: bool = False
    """Run even when no layer can hide the user's files (resource limits only). Opt-in."""

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("layers must not be empty; use ('auto',) or a list of " + ", ".join(LAYERS))
        bad = [x for x in self.layers if x not in ("auto",) + LAYERS]
        if bad:
            raise ValueError(f"unknown sandbox layer(s) {bad}; valid: auto, {', '.join(LAYERS)}")
        if "auto" in self.layers and len(self.layers) > 1:
            raise ValueError("layers: 'auto' cannot be combined with explicit layers")
        for name in ("workers", "memory_mb", "file_mb", "scratch_mb", "output_bytes", "max_procs", "uid_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"sandbox {name} must be ≥ 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"sandbox timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_mb < 64:
            raise ValueError(f"sandbox memory_mb must be ≥ 64 (an interpreter needs ~30 MiB), got {self.memory_mb}")
        if self.uid_base < 1000:
            raise ValueError(f"sandbox uid_base must be ≥ 1000 (system uids below), got {self.uid_base}")


_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Warning))"
                             r"(?::|$)", re.M)


@dataclass(frozen=True)
class RunResult:
    """One program's outcome. ``output`` is stdout+stderr (truncated to ``output_bytes``)."""

    status: Status
    returncode: Optional[int]
    output: str
    elapsed_s: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def error_class(self) -> Optional[str]:
        """The failure's equivalence class: None when passed; the exception type of the last
        traceback line (``AssertionError``, ``NameError``…) when the program failed by raising;
        otherwise the status (``timeout``, ``crashed``, ``output_limit``, ``failed``…)."""
        if self.status == "passed":
            return None
        if self.status == "failed":
            hits = _EXCEPTION_LINE.findall(self.output)
            if hits:
                return hits[-1]
        return self.status


@dataclass(frozen=True)
class Judged:
    """A judged job: the candidate's ``solution`` runs in one sandboxed process, and the trusted
    ``tests`` run in another (the judge, which never runs candidate code and alone holds the
    job's pass token), with each name of ``remote`` bound to the candidate's object of that name
    (a call on it is a request to the candidate's process; values cross as JSON of builtin
    types, so every ``==``, tolerance and ``check`` of the tests runs on builtin values in the
    judge). ``context`` is trusted code the judge runs first (e.g. HumanEval's prompt, whose
    helpers such as ``poly`` the tests call). A remote name the solution does not define falls
    back to a builtin of that name, else is unbound (a NameError in the tests). Passes when the
    tests run to their end. Not supported: tests passing functions to the candidate, or
    checking that it mutated an argument in place (arguments cross by value)."""

    solution: str
    tests: str
    context: str = ""
    remote: tuple[str, ...] = ()

    def __contains__(self, text: str) -> bool:
        """Whether ``text`` occurs in the solution, the tests or the context."""
        return text in self.solution or text in self.tests or text in self.context



# ---------------------------------------------------------------------------------------
# detection


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found: per layer whether it works here and why (not)."""

    available: dict[str, bool]
    reasons: dict[str, str]
    python: str
    python_info: dict = field(default_factory=dict)
    euid: int = 0
    bwrap_as_uid: bool = False

    def choose(self, cfg: SandboxConfig) -> tuple[str, ...]:
        """The layers a Sandbox with ``cfg`` would use (raises SandboxUnavailable)."""
        if not self.available["rlimit"]:  # every layer runs the base guard in the child
            raise SandboxUnavailable(f"the sandbox cannot run here: {self.reasons['rlimit']}")
        if cfg.layers == ("auto",):
            chosen = [x for x in LAYERS if self.available[x]]
            if "bwrap" in chosen and "uid" in chosen and not self.bwrap_as_uid:
                chosen.remove("uid")
        else:
            want = set(cfg.layers) | {"rlimit"}
            missing = [x for x in LAYERS if x in want and not self.available[x]]
            if missing:
                raise SandboxUnavailable("; ".join(f"sandbox layer '{x}' is not available: {self.reasons[x]}"
                                                  for x in missing))
            chosen = [x for x in LAYERS if x in want]
            if "bwrap" in chosen and "uid" in chosen and not self.bwrap_as_uid:
                raise SandboxUnavailable(f"layers bwrap+uid: bubblewrap does not run as the sandbox uid here "
                                         f"({self.reasons.get('bwrap+uid', '')})")
        if not any(x in chosen for x in ISOLATING) and not cfg.allow_unisolated:
            why = "; ".join(f"{x}: {self.reasons[x]}" for x in ISOLATING)
            raise SandboxUnavailable(
                "refusing to run untrusted code: no sandbox layer that hides your files works here "
                f"({why}). Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), use a kernel with "
                "Landlock (≥ 5.13), or run as root for the uid layer; to run with resource limits only, "
                "opt in with allow_unisolated=True (task.sandbox_allow_unisolated=true).")
        return tuple(chosen)

    def report(self) -> str:
        lines = [f"python: {self.python} ({self.python_info.get('version', '?')}), euid {self.euid}"]
        for x in LAYERS:
            lines.append(f"  {x:<9} {'yes' if self.available[x] else 'no ':<4} {self.reasons[x]}")
        if self.available["bwrap"] and self.available["uid"]:
            lines.append(f"  bwrap+uid {'yes' if self.bwrap_as_uid else 'no '}  {self.reasons.get('bwrap+uid', '')}")
        return "\n".join(lines)


def inside_source() -> str:
    return _INSIDE.read_text()


_PROBE = r"""
import json, os, sys, socket
out = {"executable": os.path.realpath(sys.executable), "base_prefix": sys.base_prefix, "prefix": sys.prefix,
       "version": sys.version.split()[0], "landlock_abi": landlock_abi(), "arch": ARCH}
def trial(fn):
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn())
        except BaseException as e:
            os.write(2, repr(e).encode()); os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
def sec():
    apply_seccomp(seccomp_program(os.getpid(), False, True, False))
    try:
        socket.socket(); return 3
    except OSError:
        pass
    try:
        os.fork(); return 4
    except OSError:
        return 0
def ll():
    apply_landlock([], [])
    try:
        open(sys.executable, "rb"); return 3
    except OSError:
        return 0
out["seccomp"] = trial(sec) if ARCH in _NR else -1
out["landlock"] = trial(ll) if out["landlock_abi"] > 0 else -1
print(json.dumps(out))
"""


def _python_path(python: Optional[str]) -> str:
    return os.path.realpath(python or sys.executable)


def _probe_python(python: str, user: Optional[int] = None) -> tuple[Optional[dict], str]:
    try:
        r = subprocess.run([python, "-S", "-s", "-B", "-c", inside_source() + _PROBE], capture_output=True,
                           text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                           **({"user": user, "group": user, "extra_groups": []} if user is not None else {}))
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot run {python}: {e}"
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{python} failed ({tail})"
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    return True
            except OSError:
                pass
    return False


class UidLease:
    """Exclusive use of unused uids (flock'd files under a root-only directory)."""

    def __init__(self, base: int, count: int, n: int) -> None:
        UID_LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.uids: list[int] = []
        self._fds: list[int] = []
        for uid in range(base, base + count):
            if len(self.uids) == n:
                break
            fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if _uid_in_use(uid):
                os.close(fd)
                continue
            self.uids.append(uid)
            self._fds.append(fd)
        if len(self.uids) < n:
            self.release()
            raise SandboxUnavailable(f"uid layer: fewer than {n} free uids in {base}..{base + count - 1}")

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds, self.uids = [], []


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


def bwrap_command(python_info: dict, scratch_mb: int) -> list[str]:
    """The bubblewrap command line (without the program) for the probed interpreter."""
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0"]
    args += _system_binds()
    binds = {os.path.realpath(python_info["base_prefix"]), os.path.dirname(python_info["executable"])}
    for b in sorted(binds):
        if not (b == "/usr" or b.startswith("/usr/")):
            args += ["--ro-bind", b, b]
    # a read-only root and /dev: only the /tmp tmpfs is writable, and the zygote wipes it
    # after every program, so nothing carries over from one program to the next
    args += ["--dev", "/dev", "--size", str(scratch_mb << 20), "--tmpfs", "/tmp", "--remount-ro", "/dev",
             "--remount-ro", "/", "--chdir", "/tmp"]
    return args


def _probe_bwrap(info: dict, user: Optional[int]) -> tuple[bool, str]:
    if shutil.which("bwrap") is None:
        return False, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    cmd = bwrap_command(info, 1) + ["--", info["executable"], "-S", "-c", "import os; assert os.listdir('/tmp') == []"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/",
                           **({"user": user, "group": user, "extra_groups": []} if user is not None else {}))
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"bwrap did not run: {e}"
    if r.returncode != 0:
        return False, f"bwrap failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    return True, "namespaces, read-only binds, tmpfs scratch, no capabilities"


SYSTEM_PYTHON = "/usr/bin/python3"


def world_usable(path: str) -> bool:
    """Whether every user may run ``path``: the file is world-readable and -executable and
    every folder above it world-searchable (a quick check; the uid probe decides)."""
    import stat

    real = os.path.realpath(path)
    try:
        if (os.stat(real).st_mode & (stat.S_IROTH | stat.S_IXOTH)) != (stat.S_IROTH | stat.S_IXOTH):
            return False
        d = os.path.dirname(real)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            if d == "/":
                return True
            d = os.path.dirname(d)
    except OSError:
        return False


@functools.lru_cache(maxsize=8)
def detect(python: Optional[str] = None, uid_base: int = 61000, uid_count: int = 1024) -> Detection:
    """Probe which layers work on this machine for ``python`` (cached per process).

    With ``python=None`` as root, where the running interpreter is not usable by other users
    (e.g. under ``/root``) and so the ``uid`` layer fails, a world-usable ``/usr/bin/python3``
    of the same Python version is used instead when the uid layer works with it (the report
    says so); set ``python`` to choose explicitly."""
    d = _detect(_python_path(python), uid_base, uid_count)
    if python is None and d.euid == 0 and not d.available["uid"] and os.path.exists(SYSTEM_PYTHON) \
            and _python_path(SYSTEM_PYTHON) != d.python and world_usable(SYSTEM_PYTHON):
        alt = _detect(_python_path(SYSTEM_PYTHON), uid_base, uid_count)
        same = alt.python_info.get("version", "").split(".")[:2] == d.python_info.get("version", "?").split(".")[:2]
        if alt.available["uid"] and same and all(alt.available[x] or not d.available[x] for x in LAYERS):
            alt.reasons["uid"] += (f" (the running interpreter {d.python} is not usable by other users: "
                                   f"{SYSTEM_PYTHON} runs the programs)")
            return alt
        if alt.available["uid"] and not same:
            d.reasons["uid"] += (f"; {SYSTEM_PYTHON} would work but is Python {alt.python_info.get('version')}, "
                                 f"not {d.python_info.get('version')}: set the sandbox python to use it")
    return d


def _detect(py: str, uid_base: int, uid_count: int) -> Detection:
    avail = {x: False for x in LAYERS}
    why = {x: "" for x in LAYERS}
    info, err = _probe_python(py)
    euid = os.geteuid()
    if info is None:
        for x in LAYERS:
            why[x] = err
        return Detection(avail, why, py, {}, euid)
    if info["seccomp"] == 0:
        avail["rlimit"], why["rlimit"] = True, "rlimits, process group, seccomp guard (no files/network isolation)"
    else:
        why["rlimit"] = (f"seccomp filter unavailable (architecture {info['arch']})" if info["seccomp"] == -1
                         else f"seccomp filter failed in a probe (code {info['seccomp']})")
    abi = info["landlock_abi"]
    if abi < 1:
        why["landlock"] = "the kernel has no Landlock (needs Linux ≥ 5.13 with landlock in the lsm= list)"
    elif info["landlock"] != 0:
        why["landlock"] = f"Landlock ABI {abi} present but the probe failed (code {info['landlock']})"
    elif not avail["rlimit"]:
        why["landlock"] = "needs the seccomp filter too: " + why["rlimit"]
    else:
        avail["landlock"] = True
        why["landlock"] = (f"Landlock ABI {abi}: files" + (", TCP" if abi >= 4 else " (TCP via seccomp only)")
                           + (", signal scoping" if abi >= 6 else "") + "; seccomp: sockets and kernel surface")
    lease = None
    if euid != 0:
        why["uid"] = "needs root (to switch programs to a dedicated uid)"
    else:
        try:
            lease = UidLease(uid_base, uid_count, 1)
        except SandboxUnavailable as e:
            why["uid"] = str(e)
    if lease is not None:
        try:
            uinfo, uerr = _probe_python(py, lease.uids[0])
            if uinfo is None:
                why["uid"] = (f"the interpreter is not usable by an unprivileged uid ({uerr}); set the sandbox "
                              f"python to a world-readable one, e.g. /usr/bin/python3")
            else:
                avail["uid"], why["uid"] = True, f"dedicated uids from {uid_base}; RLIMIT_NPROC per uid"
        finally:
            if not avail["uid"]:
                lease.release()
    avail["bwrap"], why["bwrap"] = _probe_bwrap(info, None)
    both = False
    if avail["bwrap"] and avail["uid"] and lease is not None:
        both, msg = _probe_bwrap(info, lease.uids[0])
        why["bwrap+uid"] = "bubblewrap runs as the sandbox uid" if both else msg
        lease.release()
    elif lease is not None:
        lease.release()
    return Detection(avail, why, py, info, euid, both)


# ---------------------------------------------------------------------------------------
# workers


def _job_frame(job: "str | Judged", timeout: float) -> bytes:
    """``>I`` + ``b"<kind> <timeout> <length>..."``, then the job's texts raw (see
    ``_inside.read_frame``): a plain program, or a judged job's solution and test spec."""
    if isinstance(job, Judged):
        spec = json.dumps({"tests": job.tests, "context": job.context, "remote": list(job.remote)})
        segs = [job.solution.encode("utf-8", "surrogateescape"), spec.encode()]
        kind = "judged"
    else:
        segs, kind = [job.encode("utf-8", "surrogateescape")], "plain"
    head = f"{kind} {timeout!r} {' '.join(str(len(x)) for x in segs)}".encode()
    return struct.pack(">I", len(head)) + head + b"".join(segs)


def _parse_frame(body: bytes) -> dict:
    head, _, payload = body.partition(b"\n")
    parts = head.decode().split(" ")
    if parts[0] == "ready":
        return {"ready": True, "pid": int(parts[1]), "uid": int(parts[2]), "python": parts[3],
                "landlock_abi": int(parts[4])}
    status, rc, elapsed = parts
    return {"status": status, "returncode": None if rc == "None" else int(rc), "elapsed": float(elapsed),
            "output": payload.decode("utf-8", "replace")}


@dataclass
class _Plan:
    """How to start one worker: command, environment, user, and the zygote's config."""

    cmd: list[str]
    user: Optional[int]
    zygote: dict
    cleanup_uid: Optional[int]


class _Worker:
    START_GRACE_S = 20.0

    def __init__(self, plan: _Plan, python: str) -> None:
        self.plan, self.python = plan, python
        self.proc: Optional[subprocess.Popen] = None
        self.buf = b""
        self.ready = False
        self.job: Optional[int] = None
        self.deadline = 0.0
        self.jobs_done = 0
        self.start_failures = 0
        self.info: dict = {}
        self._stderr = None

    def start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        kw = {"user": self.plan.user, "group": self.plan.user, "extra_groups": []} if self.plan.user is not None else {}
        self.proc = subprocess.Popen(self.plan.cmd + [repr(self.plan.zygote)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, start_new_session=True, cwd="/",
                                     env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}, **kw)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf, self.ready, self.jobs_done = b"", False, 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def submit(self, idx: int, code: "str | Judged", timeout: float) -> None:
        self.job = idx
        self.deadline = time.monotonic() + timeout + 2.0 + (0 if self.ready else self.START_GRACE_S)
        try:
            self.proc.stdin.write(_job_frame(code, timeout))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the death is noticed on the read side

    def read(self) -> list[dict]:
        """Frames available now; an empty bytes read means the worker died."""
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        if not chunk:
            raise EOFError
        self.buf += chunk
        frames = []
        while len(self.buf) >= 4:
            n = struct.unpack(">I", self.buf[:4])[0]
            if len(self.buf) < 4 + n:
                break
            frames.append(_parse_frame(self.buf[4:4 + n]))
            self.buf = self.buf[4 + n:]
        return frames

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode("utf-8", "replace")

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            if self.plan.cleanup_uid is not None:  # grandchildren of a killed host-side zygote
                subprocess.run([self.python, "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                               user=self.plan.cleanup_uid, group=self.plan.cleanup_uid, extra_groups=[],
                               capture_output=True, cwd="/")
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.proc, self.ready, self.job = None, False, None

    def retire(self) -> None:
        """Stop an idle worker whose zygote already cleaned up after its last program."""
        cleanup, self.plan.cleanup_uid = self.plan.cleanup_uid, None
        try:
            self.kill()
        finally:
            self.plan.cleanup_uid = cleanup

    def close(self) -> None:
        if self.alive:
            try:
                self.proc.stdin.close()  # the zygote exits on EOF
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class Sandbox:
    """A pool of sandboxed workers. Detects and validates the layers at construction
    (raising :class:`SandboxUnavailable`); workers start on first use.

    Not thread-safe. Workers are tied to the thread that starts them (bwrap's
    ``--die-with-parent`` and the zygote's parent-death signal fire when that thread exits),
    so use a Sandbox from one long-lived thread, e.g. the trainer's main thread."""

    def __init__(self, cfg: SandboxConfig = SandboxConfig()) -> None:
        self.cfg = cfg
        self.detection = detect(cfg.python, cfg.uid_base, cfg.uid_count)
        self.layers = self.detection.choose(cfg)
        self.python = self.detection.python
        self._lease: Optional[UidLease] = None
        self._dirs: list[str] = []
        self._workers: list[_Worker] = []
        self.stats = {"runs": 0, "sandbox_errors": 0, "worker_starts": 0}

    # -- worker plans -------------------------------------------------------------------
    def _plans(self) -> list[_Plan]:
        c, L, info = self.cfg, self.layers, self.detection.python_info
        uids: list[Optional[int]] = [None] * c.workers
        if "uid" in L:
            self._lease = UidLease(c.uid_base, c.uid_count, c.workers)
            uids = list(self._lease.uids)
        base = {"landlock": "landlock" in L, "allow_fork": "uid" in L, "output_bytes": c.output_bytes,
                "preimport": list(PREIMPORT) if c.warm else [],
                "limits": {"cpu_s": int(c.timeout_s) + 2, "as_bytes": c.memory_mb << 20,
                           "fsize_bytes": c.file_mb << 20, "nofile": 64,
                           # with bwrap the uid also owns bwrap and the zygote (≈3 processes);
                           # a judged job's judge is one more process of the uid
                           "nproc": (c.max_procs + 1 + 3 * ("bwrap" in L)) if "uid" in L else None}}
        src = inside_source() + "\nserve(eval(sys.argv[1], {'__builtins__': {}}))\n"  # argv: a dict literal
        py = [self.python, "-S", "-s", "-B", "-c", src]
        plans = []
        for uid in uids:
            z = dict(base)
            if "bwrap" in L:
                z.update(scratch_root="/tmp", cleanup="all", uid=None, wipe_scratch_root=True)
                cmd = bwrap_command(info, c.scratch_mb) + ["--"] + py
                plans.append(_Plan(cmd, uid, z, None))
                continue
            d = tempfile.mkdtemp(prefix="rlsuite-sandbox-")
            self._dirs.append(d)
            if uid is not None:
                os.chmod(d, 0o711)  # the uid may enter its own run folder, not list others
                z.update(uid=uid, gid=uid, cleanup="uid")
            else:
                z.update(uid=None, cleanup="group")
            z["scratch_root"] = d
            plans.append(_Plan(py, None, z, uid))
        return plans

    def _ensure_workers(self) -> None:
        if not self._workers:
            self._workers = [_Worker(p, self.python) for p in self._plans()]

    # -- running ------------------------------------------------------------------------
    def run(self, code: "str | Judged", timeout_s: Optional[float] = None) -> RunResult:
        return self.run_many([code], timeout_s)[0]

    def run_many(self, codes: Sequence["str | Judged"], timeout_s: Optional[float] = None) -> list[RunResult]:
        """Run every job (in parallel over the workers); results in input order. A job is a
        plain program (passes when it runs to its end) or a :class:`Judged` one (passes when
        the judge's tests run to their end against the candidate's solution)."""
        timeout = float(timeout_s or self.cfg.timeout_s)
        if timeout > self.cfg.timeout_s + 1e-9:
            raise ValueError(f"timeout {timeout} s exceeds the sandbox's timeout_s ({self.cfg.timeout_s}), which "
                             f"sets the CPU rlimit; raise SandboxConfig.timeout_s")
        self._ensure_workers()
        results: list[Optional[RunResult]] = [None] * len(codes)
        todo = deque(range(len(codes)))
        self._retried: set[int] = set()
        self._todo = todo
        sel = selectors.DefaultSelector()
        try:
            while todo or any(w.job is not None for w in self._workers):
                for w in self._workers:
                    if w.job is None and todo:
                        if not w.alive:
                            w.start()
                            self.stats["worker_starts"] += 1
                        if w.proc.stdout not in sel.get_map():
                            sel.register(w.proc.stdout, selectors.EVENT_READ, w)
                        i = todo.popleft()
                        w.submit(i, codes[i], timeout)
                busy = [w for w in self._workers if w.job is not None]
                wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
                for key, _ in sel.select(timeout=wait):
                    self._on_readable(key.data, results, sel)
                now = time.monotonic()
                for w in self._workers:
                    if w.job is not None and now > w.deadline:
                        self._fail(w, results, "sandbox_error", "worker did not answer in time; restarted", sel)
        finally:
            sel.close()
        self.stats["runs"] += len(codes)
        return results  # type: ignore[return-value]

    def _on_readable(self, w: _Worker, results: list, sel) -> None:
        try:
            frames = w.read()
        except EOFError:
            code = w.proc.wait()
            self._fail(w, results, "sandbox_error", f"worker exited with {code}: {w.stderr_tail()}", sel)
            return
        for fr in frames:
            if fr.get("ready"):
                w.ready, w.info, w.start_failures = True, fr, 0
                continue
            if w.job is not None:
                results[w.job] = RunResult(fr["status"], fr["returncode"], fr["output"], fr["elapsed"])
                self.stats["sandbox_errors"] += fr["status"] == "sandbox_error"
                w.job = None
                w.jobs_done += 1
                if not self.cfg.warm:
                    sel.unregister(w.proc.stdout)
                    w.retire()

    def _fail(self, w: _Worker, results: list, status: Status, msg: str, sel) -> None:
        """A worker died or hung: restart it; its job is retried once on a fresh worker (a
        program cannot signal its zygote, so a death is taken as the machine's fault at first)."""
        if w.job is not None:
            if w.job not in self._retried:
                self._retried.add(w.job)
                self._todo.appendleft(w.job)
            else:
                results[w.job] = RunResult(status, None, msg, 0.0)
                self.stats["sandbox_errors"] += 1
        if not w.ready:
            w.start_failures += 1
        try:
            sel.unregister(w.proc.stdout)
        except (KeyError, ValueError):
            pass
        failures = w.start_failures
        w.kill()
        w.start_failures = failures
        if failures >= 3:
            raise SandboxError(f"a sandbox worker failed to start 3 times in a row: {msg}")

    def close(self) -> None:
        for w in self._workers:
            w.close()
        self._workers = []
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._dirs = []

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

