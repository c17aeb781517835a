"""The layered sandbox: config errors, detection, statuses, recovery, and the hostile battery
on every layer this machine provides.

A layer the machine cannot provide is skipped with the detection's reason; set
``RLSUITE_REQUIRE_SANDBOX=bwrap,landlock,uid`` (CI) to turn those skips into failures. The
``uid`` layer needs an interpreter its uid can read: the tests use ``/usr/bin/python3``
for it when the running one is not readable (e.g. under ``/root``).

    pytest tests/tasks/test_sandbox.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from rlsuite.tasks.sandbox import (
    LAYERS,
    Detection,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    detect,
)
from rlsuite.tasks.sandbox._inside import seccomp_program
from rlsuite.tasks.sandbox.battery import ITEMS, Env, claimed, run_battery

SYSTEM_PYTHON = "/usr/bin/python3"


def _python_for(layer: str):
    """The interpreter to test ``layer`` with (the uid layer may need a world-readable one;
    ``landlock-running``: Landlock with the running interpreter even where ``detect()`` picks
    /usr/bin/python3, i.e. root without the uid layer, Landlock's files-only protection)."""
    if layer == "landlock-running":
        return sys.executable
    if layer in ("uid", "auto") and not detect().available["uid"] and os.path.exists(SYSTEM_PYTHON):
        return SYSTEM_PYTHON
    return None


def _require(layer: str) -> Detection:
    d = detect(_python_for(layer))
    layer = layer.split("-")[0]
    if layer != "auto" and not d.available[layer]:
        msg = f"sandbox layer '{layer}' unavailable here: {d.reasons[layer]}"
        required = os.environ.get("RLSUITE_REQUIRE_SANDBOX", "")
        if layer in required.split(","):
            pytest.fail(msg + " (RLSUITE_REQUIRE_SANDBOX)")
        pytest.skip(msg)
    return d


def _cfg(layer: str, **kw) -> SandboxConfig:
    layers = ("auto",) if layer == "auto" else (layer.split("-")[0],)
    return SandboxConfig(layers=layers, python=_python_for(layer), allow_unisolated=layer == "rlimit",
                         timeout_s=kw.pop("timeout_s", 3.0), **kw)


# -- config and detection ------------------------------------------------------------------


@pytest.mark.parametrize("kw, msg", [
    ({"layers": ()}, "must not be empty"),
    ({"layers": ("bwarp",)}, "unknown sandbox layer"),
    ({"layers": ("auto", "bwrap")}, "cannot be combined"),
    ({"workers": 0}, "workers must be ≥ 1"),
    ({"timeout_s": 0}, "timeout_s must be > 0"),
    ({"memory_mb": 16}, "memory_mb must be ≥ 64"),
    ({"uid_base": 0}, "uid_base must be ≥ 1000"),
])
def test_config_errors_name_the_fix(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SandboxConfig(**kw)


def test_detection_reports_every_layer_with_a_reason():
    d = detect()
    assert set(d.available) == set(LAYERS)
    assert all(d.reasons[x] for x in LAYERS)
    text = d.report()
    assert all(x in text for x in LAYERS)


def _fake(**avail) -> Detection:
    a = {x: avail.get(x, False) for x in LAYERS}
    return Detection(a, {x: f"{x} reason" for x in LAYERS}, "/x/python")


def test_refuses_without_an_isolating_layer_unless_opted_in():
    d = _fake(rlimit=True)
    with pytest.raises(SandboxUnavailable, match="refusing to run untrusted code.*bubblewrap.*allow_unisolated"):
        d.choose(SandboxConfig())
    assert d.choose(SandboxConfig(allow_unisolated=True)) == ("rlimit",)


def test_auto_stacks_every_available_layer_and_explicit_layers_must_exist():
    d = _fake(rlimit=True, landlock=True, bwrap=True)
    assert d.choose(SandboxConfig()) == ("bwrap", "landlock", "rlimit")
    assert d.choose(SandboxConfig(layers=("landlock",))) == ("landlock", "rlimit")
    with pytest.raises(SandboxUnavailable, match="layer 'uid' is not available: uid reason"):
        d.choose(SandboxConfig(layers=("uid",)))


def test_metadata_calls_are_in_every_filter():
    from rlsuite.tasks.sandbox._inside import _METADATA, _NR, ARCH, RET_ALLOW

    for prog in (seccomp_program(1, False, True, True), seccomp_program(1, True, False, False)):
        checked = {k for code, _, _, k in prog if code == 0x15}
        assert {_NR[ARCH][n] for n in _METADATA if n in _NR[ARCH]} <= checked
        assert 0x40086602 in checked and prog[-3][3] == RET_ALLOW  # FS_IOC_SETFLAGS
        # the inode generation: FS_IOC_SETVERSION and ext4's EXT4_IOC_SETVERSION, long and int forms
        assert {0x40087602, 0x40047602, 0x40086604, 0x40046604} <= checked


def test_seccomp_program_fits_and_differs_by_policy():
    a = seccomp_program(1234, allow_fork=False, full=True, signal_scoped=True)
    b = seccomp_program(1234, allow_fork=True, full=False, signal_scoped=False)
    assert 20 < len(a) < 255 and len(b) < len(a)
    assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in a + b)


# -- behaviour on the default (strongest) combination ---------------------------------------


@pytest.fixture(scope="module")
def sb():
    box = Sandbox(_cfg("auto", workers=2, timeout_s=2.0))
    yield box
    box.close()


def test_statuses(sb):
    progs = ["assert sum(range(4)) == 6", "assert 1 == 2", "1/0", "while True: pass", "print('x' * 10**6)",
             "import os; os._exit(0)", "exit(0)", "raise SystemExit(0)", "import os, signal; os.kill(os.getpid(), 9)",
             "def f(:", "import math, typing, collections; print(math.sqrt(16))"]
    t0 = time.monotonic()
    rs = sb.run_many(progs, timeout_s=1.0)
    assert [r.status for r in rs] == ["passed", "failed", "failed", "timeout", "output_limit", "failed", "failed",
                                      "failed", "crashed", "failed", "passed"]
    assert "AssertionError" in rs[1].output and "ZeroDivisionError" in rs[2].output and "SyntaxError" in rs[9].output
    assert rs[10].output.strip() == "4.0"
    assert len(rs[4].output) == sb.cfg.output_bytes
    assert time.monotonic() - t0 < 6


def test_pass_cannot_be_forged_by_writing_to_descriptors(sb):
    prog = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0' * 32)\n    except OSError:\n" \
           "        pass\nos._exit(0)\n"
    assert sb.run(prog).status == "failed"


def test_kernel_surface_is_closed(sb):
    prog = """
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0, 4096, 0o1600) == -1 and ctypes.get_errno() == errno.EPERM
assert libc.ptrace(16, 1, 0, 0) == -1  # PTRACE_ATTACH to init
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
    try:
        socket.socket(family)
        raise AssertionError(family)
    except PermissionError:
        pass
"""
    r = sb.run(prog)
    assert r.passed, r.output


def test_programs_do_not_see_each_other(sb):
    sb.run("open('note.txt', 'w').write('x')\nimport builtins\nbuiltins.LEAK = 1")
    r = sb.run("import os, builtins\nassert not os.path.exists('note.txt')\nassert not hasattr(builtins, 'LEAK')")
    assert r.passed, r.output


def test_a_dead_worker_is_restarted(sb):
    sb.run("pass")
    for w in sb._workers:
        os.killpg(w.proc.pid, 9)
    rs = sb.run_many(["assert True"] * 4)
    assert [r.status for r in rs] == ["passed"] * 4


def test_fresh_interpreters_mode():
    with Sandbox(_cfg("auto", warm=False, workers=2)) as box:
        rs = box.run_many(["assert 2 + 2 == 4", "assert False", "import os; os._exit(0)"])
        assert [r.status for r in rs] == ["passed", "failed", "failed"]
        assert box.stats["worker_starts"] == 3


# -- the hostile battery per layer -----------------------------------------------------------


@pytest.mark.parametrize("layer", ["auto", "bwrap", "landlock", "uid", "rlimit", "landlock-running"])
def test_hostile_battery(layer, tmp_path):
    _require(layer)
    box = Sandbox(_cfg(layer, workers=1, memory_mb=256))
    env = Env(tmp_path / "host")
    try:
        outcomes = run_battery(box, env, timeout_s=1.0)
    finally:
        box.close()
        env.close()
    must = set(ITEMS) if layer == "auto" else claimed(box.layers)
    failed = [f"{o.item}: {o.detail}" for o in outcomes if o.item in must and not o.contained]
    assert not failed, f"{'+'.join(box.layers)} did not contain: {failed}"
    if layer == "auto":  # the default combination contains the whole battery
        assert all(o.contained for o in outcomes)
    assert not Path(env.home_secret).exists()
