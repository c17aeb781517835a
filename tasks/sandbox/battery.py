"""A battery of hostile programs and the host-side checks that say whether each was contained.

Used by ``tests/tasks/test_sandbox*.py`` and ``benchmarks/sandbox.py``. Every probe is safe to
run even on a layer that does not contain it: reads only report *that* a secret was readable
(its length, not its content), writes go to fresh paths that are removed afterwards, network
probes only ever target a listener on 127.0.0.1 that the host opens, ``kill(-1)`` is probed
with signal 0 (permission check only), and the signalled "victim" is a ``sleep`` the host
starts for the purpose.

``CLAIMS`` lists what each layer promises to contain; a combination contains the union of
its layers' claims.
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

from tasks.sandbox import RunResult, Sandbox

RESOURCE = ("fork_bomb", "memory_bomb", "infinite_loop", "huge_output", "signal_parent", "background_process",
            "exit_hack")
CLAIMS: dict[str, tuple[str, ...]] = {
    "rlimit": RESOURCE,
    "uid": RESOURCE + ("read_secrets",),
    "landlock": RESOURCE + ("read_secrets", "write_outside", "network"),
    "bwrap": RESOURCE + ("read_secrets", "write_outside", "network"),
}
ITEMS = ("fork_bomb", "memory_bomb", "infinite_loop", "huge_output", "write_outside", "read_secrets", "network",
         "signal_parent", "background_process", "exit_hack")


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
        made = env.cleanup_writes()
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

