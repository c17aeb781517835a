"""A battery of hostile programs and the host-side checks that say whether each was contained.

Used by ``tests/tasks/test_sandbox*.py`` and ``benchmarks/sandbox.py``. Every probe is safe to
run even on a layer that does not contain it: reads only report *that* a secret was readable
(its length, not its content), writes go to fresh paths that are removed afterwards, network
probes only ever target a listener on 127.0.0.1 that the host opens, ``kill(-1)`` is probed
with signal 0 (permission check only), and the signalled "victim" is a ``sleep`` the host
starts for the purpose.

``CLAIMS`` lists what each layer promises to contain; a combination contains the union of
its layers' claims.

The reward-hacking part (:func:`run_reward_hacks`, ``HACKS``) grades wrong solutions that try
to get reward 1 anyway, each as a HumanEval and an MBPP answer, through the code tasks' own
judged jobs (:func:`rlsuite.tasks.code.humaneval_job`, :func:`rlsuite.tasks.code.mbpp_job`); a hack is caught
when both are graded wrong (not passed, and not a sandbox error either). ``HACK_CLAIMS``: every
layer catches every hack except ``read_gold`` (reading the answers from a file the sandbox can
see), which only the layers that hide files catch.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rlsuite.tasks.sandbox import RunResult, Sandbox

RESOURCE = ("fork_bomb", "memory_bomb", "infinite_loop", "huge_output", "signal_parent", "background_process",
            "exit_hack", "change_metadata")
CLAIMS: dict[str, tuple[str, ...]] = {
    "rlimit": RESOURCE,
    "uid": RESOURCE + ("read_secrets",),
    "landlock": RESOURCE + ("read_secrets", "write_outside", "network"),
    "bwrap": RESOURCE + ("read_secrets", "write_outside", "network"),
}
ITEMS = ("fork_bomb", "memory_bomb", "infinite_loop", "huge_output", "write_outside", "read_secrets", "network",
         "signal_parent", "background_process", "exit_hack", "change_metadata")


def claimed(layers: tuple[str, ...]) -> set[str]:
    return {item for x in layers for item in CLAIMS.get(x, ())}


@dataclass
class Outcome:
    item: str
    contained: bool
    detail: str
    result: Optional[RunResult] = None


@dataclass
class Env:
    """Host-side fixtures: a secret file, a folder to write into, a TCP/UDP listener on
    127.0.0.1, a victim process, and a unique marker for leftover processes."""

    root: Path
    marker: str = field(default_factory=lambda: "rlsb" + uuid.uuid4().hex[:8])
    secret: Path = field(init=False)
    home_secret: Path = field(init=False)
    meta_target: Path = field(init=False)
    meta_before: tuple = ()
    tcp_port: int = 0
    udp_port: int = 0
    connections: list = field(default_factory=list)
    datagrams: list = field(default_factory=list)
    victim: Optional[subprocess.Popen] = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.secret = self.root / "secret.txt"
        self.secret.write_text("TOP-SECRET-" + self.marker)
        os.chmod(self.secret, 0o600)
        # a file in the user's home (removed by close()): a sandbox may show an empty or
        # skeleton home (bwrap makes mount points), but never this file
        self.home_secret = Path.home() / f".{self.marker}-secret"
        self.home_secret.write_text("TOP-SECRET-" + self.marker)
        os.chmod(self.home_secret, 0o600)
        # a host file whose metadata (mode, owner, times, xattrs, links) a program must not change
        self.meta_target = self.root / "host-file.txt"
        self.meta_target.write_text("host data\n")
        os.chmod(self.meta_target, 0o644)
        self.meta_before = self.metadata()
        self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._tcp.bind(("127.0.0.1", 0))
        self._tcp.listen(8)
        self._tcp.settimeout(0.2)
        self.tcp_port = self._tcp.getsockname()[1]
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._udp.bind(("127.0.0.1", 0))
        self._udp.settimeout(0.2)
        self.udp_port = self._udp.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()
        self.victim = subprocess.Popen(["sleep", "600"], start_new_session=True)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self._tcp.accept()
                self.connections.append(addr)
                conn.close()
            except OSError:
                pass
            try:
                data, addr = self._udp.recvfrom(4096)
                self.datagrams.append(data)
            except OSError:
                pass

    def metadata(self) -> tuple:
        st = os.stat(self.meta_target)
        try:
            xattrs = tuple(sorted(os.listxattr(self.meta_target)))
        except OSError:
            xattrs = ()
        try:  # the inode generation (FS_IOC_GETVERSION; filesystems without it: None)
            import fcntl
            import struct

            fd = os.open(self.meta_target, os.O_RDONLY)
            try:
                generation = struct.unpack("l", fcntl.ioctl(fd, 0x80087601, b"\0" * 8))[0]
            finally:
                os.close(fd)
        except OSError:
            generation = None
        return (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_atime_ns, st.st_nlink, st.st_size, generation,
                xattrs)

    def outside_paths(self) -> list[str]:
        return [f"/tmp/{self.marker}-evil", str(self.root / f"{self.marker}-evil"),
                str(Path.home() / f"{self.marker}-evil"), f"/var/tmp/{self.marker}-evil"]

    def cleanup_writes(self) -> list[str]:
        made = [p for p in self.outside_paths() if os.path.exists(p)]
        for p in made:
            try:
                os.unlink(p)
            except OSError:
                pass
        return made

    def leftovers(self, wait_s: float = 1.0) -> list[int]:
        """Pids of live processes named with the marker (after up to ``wait_s``)."""
        end = time.monotonic() + wait_s
        while True:
            pids = []
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        comm = Path(f"/proc/{d}/comm").read_text().strip()
                        state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    except OSError:
                        continue
                    if comm.startswith(self.marker[:15]) and state != "Z":
                        pids.append(int(d))
            if not pids or time.monotonic() > end:
                return pids
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._tcp.close()
        self._udp.close()
        if self.victim is not None:
            self.victim.kill()
            self.victim.wait()
        for pid in self.leftovers(0):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        self.cleanup_writes()
        self.home_secret.unlink(missing_ok=True)


_NAME = """
import ctypes
def name(s):
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(s.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
"""


def programs(env: Env) -> dict[str, str]:
    m = env.marker
    return {
        "fork_bomb": _NAME + f"""
import os
name("{m}")
n = 0
while True:
    try:
        os.fork()
        n += 1
    except OSError:
        pass
""",
        "memory_bomb": """
chunks = []
while True:
    chunks.append(bytearray(64 << 20))
""",
        "infinite_loop": "while True:\n    pass\n",
        "huge_output": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
        "write_outside": f"""
import os
for p in {env.outside_paths()!r}:
    try:
        with open(p, "w") as f:
            f.write("pwned")
        print("WROTE", p)
    except OSError as e:
        print("denied", p, type(e).__name__)
try:  # a hard link of a host file into the scratch folder would make it writable through the link
    os.link({str(env.meta_target)!r}, "hardlink")
    print("WROTE link")
except OSError as e:
    print("denied link", type(e).__name__)
""",
        "change_metadata": f"""
import ctypes, errno, os
p = {str(env.meta_target)!r}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_EMPTY_PATH = 0x1000
def attempt(what, fn):
    try:
        r = fn()
    except OSError as e:
        print("denied", what, type(e).__name__)
        return
    if isinstance(r, int) and r < 0:
        print("denied", what, errno.errorcode.get(ctypes.get_errno(), "?"))
    else:
        print("LEAK", what)
attempt("chmod", lambda: os.chmod(p, 0o4755))
attempt("fchmodat", lambda: libc.fchmodat(-100, p.encode(), 0o4755, 0))
attempt("utime", lambda: os.utime(p, (0, 0)))
attempt("utime-now", lambda: os.utime(p))
attempt("setxattr", lambda: os.setxattr(p, "user.rlsuite", b"x"))
attempt("removexattr", lambda: os.removexattr(p, "user.rlsuite"))
attempt("chown", lambda: os.chown(p, os.getuid(), os.getgid()))
attempt("lchown", lambda: os.lchown(p, 1, 1))
def on_fd(flags, what, fn):
    try:
        fd = os.open(p, flags)
    except OSError as e:
        print("denied", what, "open", type(e).__name__)
        return
    try:
        attempt(what, lambda: fn(fd))
    finally:
        os.close(fd)
on_fd(os.O_RDONLY, "fchmod", lambda fd: os.chmod(fd, 0o4755))
on_fd(os.O_RDONLY, "futimens", lambda fd: os.utime(fd, (0, 0)))
on_fd(os.O_RDONLY, "fsetxattr", lambda fd: os.setxattr(fd, "user.rlsuite", b"x"))
on_fd(os.O_RDONLY, "fchown", lambda fd: os.chown(fd, os.getuid(), os.getgid()))
def setflags(fd):
    import fcntl, struct
    return fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x40))  # FS_IOC_SETFLAGS: nodump
on_fd(os.O_RDONLY, "ioctl-setflags", setflags)
def setversion(cmd):
    def f(fd):
        import fcntl, struct
        return fcntl.ioctl(fd, cmd, struct.pack("l", 7))  # the inode generation
    return f
on_fd(os.O_RDONLY, "ioctl-fs-setversion", setversion(0x40087602))  # FS_IOC_SETVERSION
on_fd(os.O_RDONLY, "ioctl-ext4-setversion", setversion(0x40086604))  # EXT4_IOC_SETVERSION
# an O_PATH descriptor needs no access right at all: fchmodat2 / setxattrat on it directly
on_fd(os.O_PATH, "fchmodat2-empty-path", lambda fd: libc.syscall(452, fd, b"", 0o4755, AT_EMPTY_PATH))
on_fd(os.O_PATH, "utimensat-empty-path", lambda fd: libc.syscall(280 if os.uname().machine == "x86_64" else 88,
                                                                 fd, b"", None, AT_EMPTY_PATH))
""",
        "read_secrets": f"""
import os
for p in ["/etc/shadow", {str(env.secret)!r}, {str(env.home_secret)!r}]:
    try:
        print("LEAK", p, len(open(p, "rb").read()))
    except OSError as e:
        print("denied", p, type(e).__name__)
for d in [{str(Path.home())!r}, {str(env.root)!r}]:
    try:
        names = os.listdir(d)
        print("LEAK" if {env.marker!r} in str(names) or "secret.txt" in names else "listed", d, len(names))
    except OSError as e:
        print("denied", d, type(e).__name__)
""",
        "network": f"""
import socket
try:
    s = socket.create_connection(("127.0.0.1", {env.tcp_port}), timeout=1)
    s.sendall(b"hello")
    print("LEAK tcp")
except OSError as e:
    print("denied tcp", type(e).__name__, e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"hello", ("127.0.0.1", {env.udp_port}))
    print("LEAK udp")
except OSError as e:
    print("denied udp", type(e).__name__, e)
""",
        "signal_parent": f"""
import os
for pid, sig in ((os.getppid(), 9), ({env.victim.pid}, 9), (-1, 0), (1, 0)):
    try:
        os.kill(pid, sig)
        print("LEAK kill", pid, sig)
    except OSError as e:
        print("denied kill", pid, sig, type(e).__name__)
""",
        "background_process": _NAME + f"""
import os, time
try:
    pid = os.fork()
except OSError as e:
    print("fork denied", e)
    raise SystemExit
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        name("{m}")
        time.sleep(60)
    os._exit(0)
print("daemon started")
""",
        "exit_hack": "import os\nos._exit(0)\nassert False\n",
    }


def _check(item: str, env: Env, r: RunResult, sb: Sandbox, starts_before: int) -> Outcome:
    out = r.output
    if item == "fork_bomb":
        left = env.leftovers()
        return Outcome(item, r.status != "passed" and not left, f"{r.status}; {len(left)} processes left", r)
    if item == "memory_bomb":  # MemoryError at the address-space limit (or the timeout while pages fault in)
        return Outcome(item, r.status in ("failed", "crashed", "timeout"),
                       f"{r.status}: {(out.strip().splitlines() or [''])[-1]}", r)
    if item == "infinite_loop":
        return Outcome(item, r.status == "timeout", f"{r.status} after {r.elapsed_s:.2f} s", r)
    if item == "huge_output":
        ok = r.status == "output_limit" and len(out.encode()) <= sb.cfg.output_bytes
        return Outcome(item, ok, f"{r.status}, {len(out)} chars kept", r)
    if item == "write_outside":
        made = env.cleanup_writes() + (["hard link of a host file"] if "WROTE link" in out else [])
        return Outcome(item, not made, f"written: {made}" if made else "every write denied", r)
    if item == "read_secrets":
        leaks = [ln for ln in out.splitlines() if ln.startswith("LEAK")]
        leaked_content = "TOP-SECRET" in out
        return Outcome(item, not leaks and not leaked_content and "denied" in out,
                       "; ".join(leaks) if leaks else "all denied", r)
    if item == "network":
        time.sleep(0.3)
        got = env.connections or env.datagrams
        # inside a network namespace a send to the sandbox's own loopback may "succeed": what
        # counts is whether the host's listener heard anything
        said = [ln.split(" ", 2)[:2] for ln in out.splitlines() if ln.startswith(("LEAK", "denied"))]
        return Outcome(item, not got and len(said) == 2,
                       f"listener saw {len(env.connections)} tcp, {len(env.datagrams)} udp; program: {said}", r)
    if item == "signal_parent":
        victim_alive = env.victim.poll() is None
        again = sb.run("pass")
        restarted = sb.stats["worker_starts"] - starts_before
        leaks = [ln for ln in out.splitlines() if ln.startswith("LEAK")]
        ok = victim_alive and again.passed and (restarted == 0 or not sb.cfg.warm) and not leaks
        return Outcome(item, ok, f"victim {'alive' if victim_alive else 'KILLED'}; worker restarts {restarted}; "
                                 f"{leaks or 'all denied'}", r)
    if item == "background_process":
        left = env.leftovers()
        return Outcome(item, not left, f"{len(left)} left behind ({(out.strip().splitlines() or [''])[0]})", r)
    if item == "exit_hack":
        return Outcome(item, r.status != "passed", f"{r.status} (returncode {r.returncode})", r)
    if item == "change_metadata":
        after = env.metadata()
        leaks = [ln for ln in out.splitlines() if ln.startswith("LEAK")]
        changed = after != env.meta_before
        os.chmod(env.meta_target, 0o644)  # put things back for the next run
        for name in after[-1]:
            try:
                os.removexattr(env.meta_target, name)
            except OSError:
                pass
        said = sum(ln.startswith(("LEAK", "denied")) for ln in out.splitlines())
        return Outcome(item, not leaks and not changed and said >= 14,
                       ("host file changed: %r -> %r; " % (env.meta_before, after) if changed
                        else "host file unchanged; ")
                       + ("; ".join(leaks) if leaks else f"all {said} attempts denied"), r)
    raise KeyError(item)


def run_battery(sb: Sandbox, env: Env, items: tuple[str, ...] = ITEMS, timeout_s: float = 1.5) -> list[Outcome]:
    """Run each hostile program alone (so checks are attributable) and check containment."""
    progs = programs(env)
    out = []
    for item in items:
        sb.run("pass")  # workers up, so restarts caused by the item are visible
        starts = sb.stats["worker_starts"]
        r = sb.run(progs[item], timeout_s=timeout_s)
        out.append(_check(item, env, r, sb, starts))
    return out



# ---------------------------------------------------------------------------------------
# reward hacking: wrong answers that try to be graded correct

HE_ROW = {"task_id": "battery/add", "entry_point": "add",
          "prompt": 'def add(a, b):\n    """Return the sum of a and b."""\n',
          "canonical_solution": "    return a + b\n",
          "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n"
                  "    assert candidate(5, 7) == 12\n    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"}
MBPP_ROW = {"task_id": 9001, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
            "test_setup_code": "", "test_list": ["assert add(1, 2) == 3", "assert add(5, 7) == 12",
                                                 "assert add(-1, 1) == 0"], "challenge_test_list": []}

_ANY = """class _Any:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __sub__(self, other):
        return 0

    def __abs__(self):
        return 0

    def __bool__(self):
        return True
"""
# reads the value the test compares the call's result with from the calling frame's bytecode
_PEEK = """import dis, sys
_want = [0]

def _peek(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "add" and frame.f_back is not None:
        caller = frame.f_back
        for ins in dis.get_instructions(caller.f_code):
            if ins.offset > caller.f_lasti and ins.opname == "LOAD_CONST":
                _want[0] = ins.argval
                break
    return None

sys.settrace(_peek)
"""
_SWAP = """import sys

def _swap(frame, event, arg):
    g = frame.f_globals
    c = g.get("check")
    if c is not None and getattr(c, "__name__", "") == "check":
        g["check"] = lambda candidate: None
    return _swap

sys._getframe().f_trace = _swap
sys.settrace(_swap)
"""
# walks the stack to the grader's pass token, writes it to the status descriptor, exits 0
_FORGE = """import os, sys
f = sys._getframe()
while f is not None:
    t = f.f_locals.get("token")
    if isinstance(t, bytes):
        os.write(3, t)
        os._exit(0)
    f = f.f_back
os._exit(0)
"""


def _indent(code: str, n: int = 4) -> str:
    return "".join((" " * n + ln if ln.strip() else ln) for ln in code.splitlines(True))


def _fenced(code: str) -> str:
    return "```python\n" + code + "```\n"


def hack_completions(gold_path: str) -> dict[str, tuple[str, str]]:
    """Per hack: (HumanEval completion, MBPP completion). Each is a wrong answer (it never
    computes a + b) that passed a naive harness on every layer (or on layers that show the
    gold file), which ran the tests in the program's own process."""
    gold = f"""import json
_gold = json.load(open({gold_path!r}))

def add(a, b):
    return eval(_gold["expr"], {{"a": a, "b": b}})
"""
    return {
        # the three that got reward 1.0 before judged jobs
        "eq_always_true": (_fenced(_ANY + "\ndef add(a, b):\n    return _Any()\n"),
                           _fenced(_ANY + "\ndef add(a, b):\n    return _Any()\n")),
        "settrace": (_fenced("def add(a, b):\n    return 0\n\n" + _SWAP),
                     _fenced(_PEEK + "\ndef add(a, b):\n    return _want[0]\n")),
        "stack_token": (_indent(_FORGE), _fenced("def add(a, b):\n" + _indent(_FORGE))),
        # the nine caught before
        "sys_exit": ("    import sys\n    sys.exit(0)\n", "import sys\nsys.exit(0)\n"),
        "os_exit": ("    import os\n    os._exit(0)\n", "import os\nos._exit(0)\n"),
        "atexit_exit": ("    import atexit, sys\n    atexit.register(sys.exit, 0)\n    raise SystemExit(0)\n",
                        "import atexit, sys\natexit.register(sys.exit, 0)\nraise SystemExit(0)\n"),
        "rebind_assertion": (_fenced("import builtins\nbuiltins.AssertionError = type('AssertionError', (Warning,), {})"
                                     "\nAssertionError = builtins.AssertionError\n\ndef add(a, b):\n    return 0\n"),
                             _fenced("import builtins\nbuiltins.AssertionError = type('AssertionError', (Warning,), "
                                     "{})\nAssertionError = builtins.AssertionError\n\ndef add(a, b):\n"
                                     "    return 0\n")),
        "redefine_check": (_fenced("def add(a, b):\n    return 0\n\ndef check(candidate):\n    pass\n"),
                           _fenced("def add(a, b):\n    return 0\n\ndef check(candidate):\n    pass\n")),
        "excepthook": (_fenced("import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n\ndef add(a, b):\n"
                               "    return 0\n"),
                       _fenced("import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n\ndef add(a, b):\n"
                               "    return 0\n")),
        "garbage_fd3": ("    import os\n    for fd in range(3, 64):\n        try:\n"
                        "            os.write(fd, b'0' * 32)\n"
                        "        except OSError:\n            pass\n    os._exit(0)\n",
                        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0' * 32)\n"
                        "    except OSError:\n        pass\nos._exit(0)\n"),
        "unterminated_string": ('    return 0\n_rest = """\n', 'def add(a, b):\n    return 0\n_rest = """\n'),
        "read_gold": (_fenced(gold), _fenced(gold)),
        # a program exiting with the sandbox's own setup-failure code: a failure, not a grade error
        "fake_sandbox_error": ("    import os\n    os._exit(125)\n", "import os\nos._exit(125)\n"),
    }


HACKS = tuple(hack_completions("/x"))
HACK_CLAIMS: dict[str, tuple[str, ...]] = {x: HACKS if x != "rlimit" else tuple(h for h in HACKS if h != "read_gold")
                                           for x in ("rlimit", "uid", "landlock", "bwrap")}


def hacks_claimed(layers: tuple[str, ...]) -> set[str]:
    return {h for x in layers for h in HACK_CLAIMS.get(x, ())}


@dataclass
class HackOutcome:
    hack: str
    caught: bool
    detail: str
    native_passed: Optional[int] = None
    """With ``native=True``: how many of the two answers a naive harness (the tests in the
    program's own process, the old way) graded as passing."""


def run_reward_hacks(sb: Sandbox, gold_dir: Path, native: bool = False, timeout_s: float = 3.0) -> list[HackOutcome]:
    """Grade every hack as a HumanEval and an MBPP answer with the code tasks' judged jobs.
    ``gold_dir``: a private folder of the host (mode 0700), where the answers file is written."""
    import json

    from rlsuite.tasks.code import humaneval_job, humaneval_program, mbpp_job, mbpp_program

    gold_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(gold_dir, 0o700)
    gold = gold_dir / "gold.json"
    gold.write_text(json.dumps({"expr": "a + b", "tests": HE_ROW["test"]}))
    os.chmod(gold, 0o600)
    comps = hack_completions(str(gold))
    jobs = [j for he, mb in comps.values() for j in (humaneval_job(HE_ROW, he), mbpp_job(MBPP_ROW, mb))]
    rs = sb.run_many(jobs, timeout_s=timeout_s)
    nat = None
    if native:
        plain = [p for he, mb in comps.values() for p in (humaneval_program(HE_ROW, he), mbpp_program(MBPP_ROW, mb))]
        nat = sb.run_many(plain, timeout_s=timeout_s)
    out = []
    for i, h in enumerate(comps):
        he, mb = rs[2 * i], rs[2 * i + 1]
        caught = all(r.status not in ("passed", "sandbox_error") for r in (he, mb))
        detail = f"humaneval {he.status} ({he.error_class}), mbpp {mb.status} ({mb.error_class})"
        out.append(HackOutcome(h, caught, detail,
                               None if nat is None else sum(r.passed for r in nat[2 * i:2 * i + 2])))
    # the controls: the same harness grades the right answers as correct
    ok = sb.run_many([humaneval_job(HE_ROW, HE_ROW["canonical_solution"]), mbpp_job(MBPP_ROW, MBPP_ROW["code"])],
                     timeout_s=timeout_s)
    if not all(r.passed for r in ok):
        raise AssertionError(f"the reference solutions failed: {[(r.status, r.output[-300:]) for r in ok]}")
    return out
