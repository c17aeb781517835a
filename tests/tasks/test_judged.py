"""Judged jobs (what the code tasks grade with): the codec between the candidate's process
and the judge, the tests' own comparison semantics on builtin values, the reward hacks on
every layer this machine provides, and that the candidate's process never holds the tests.

    pytest tests/tasks/test_judged.py
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from fractions import Fraction

import pytest

from rlsuite.tasks.sandbox import LAYERS, Judged, Sandbox, SandboxConfig, detect, inside_source
from rlsuite.tasks.sandbox._inside import ProtocolError, _decode, _encode, _Remote
from rlsuite.tasks.sandbox.battery import HACKS, hacks_claimed, run_reward_hacks
from tests.conftest import require_sandbox

require_sandbox()

# -- the codec (no sandbox) ------------------------------------------------------------------

Point = namedtuple("Point", "x y")
VALUES = [None, True, False, 0, 1, -7, 2 ** 70, -(2 ** 20000), 1.5, -0.0, 1e300, float("inf"), float("-inf"), "s",
          "\ud800é", b"\x00\xff", bytearray(b"ab"), 1 + 2j, (1, 2), (), [1, (2,)], [(1,), {2}],
          {1: "a", (1, 2): [3], None: True}, {"a": {"b": None}}, set(), frozenset({1, (2, 3)}), range(1, 9, 2),
          Counter("aab"), OrderedDict(a=1), defaultdict(list, {1: [2]}), deque([1, 2], 5), Decimal("1.10"),
          Fraction(3, 4)]


def _cross(v, refs=None):
    """One trip candidate → judge, through real JSON as on the pipe."""
    return _decode(json.loads(json.dumps(_encode(v, [] if refs is None else refs), allow_nan=False)), None)


@pytest.mark.parametrize("v", VALUES, ids=[type(v).__name__ + str(i) for i, v in enumerate(VALUES)])
def test_codec_keeps_type_and_value(v):
    out = _cross(v)
    assert type(out) is type(v) and out == v
    if isinstance(v, dict) and not isinstance(v, (Counter, OrderedDict)):
        assert list(out) == list(v)  # insertion order
    if isinstance(v, defaultdict):
        assert out.default_factory is v.default_factory


def test_codec_keeps_distinctions_python_makes():
    assert _cross((1, 2)) != [1, 2] and _cross([1, 2]) == [1, 2]
    assert _cross(True) is True and type(_cross(1)) is int and type(_cross(1.0)) is float
    assert math.isnan(_cross(float("nan")))
    assert _cross(Point(1, 2)) == (1, 2) and type(_cross(Point(1, 2))) is tuple  # a namedtuple compares as a tuple
    g = _cross(x for x in range(3))
    assert list(g) == [0, 1, 2]
    assert _cross({1: 2}.keys()) == {1} and list(_cross({1: 2}.items())) == [(1, 2)]


def test_other_objects_cross_as_opaque_references():
    class Hostile:
        def __eq__(self, other):
            return True

        def __bool__(self):
            return True

    refs: list = []
    r = _cross(Hostile(), refs)
    assert isinstance(r, _Remote) and len(refs) == 1
    assert r != 1 and not (r == 1)  # the judge's own identity comparison, not the candidate's __eq__
    with pytest.raises(TypeError, match="truth value is not trusted"):
        bool(r)
    assert _encode(r, None) == {"$": "ref", "id": 0}  # can be passed back to the candidate


@pytest.mark.parametrize("bad", [{"$": "pickle", "v": "gASV"}, {"a": 1}, {"$": "tuple", "v": 1},
                                 {"$": "float", "v": "1"},
                                 {"$": "defaultdict", "f": "os.system", "v": []}, {"$": "module", "v": "os; x"},
                                 {"$": "module", "v": "antigravity"},
                                 {"$": "range", "v": [1.5, 2, 1]}, {"$": "deque", "v": [], "m": -1}])
def test_the_judge_refuses_malformed_values(bad):
    with pytest.raises(ProtocolError):
        _decode(bad, None)


def test_the_judge_passes_only_builtin_values_to_the_candidate():
    for v in (lambda x: x, object(), print):
        with pytest.raises(TypeError, match="only builtin values cross"):
            _encode(v, None)


def test_the_inside_source_fits_one_command_line_argument():
    assert len(inside_source().encode()) < 120_000  # Linux: MAX_ARG_STRLEN = 128 KiB per argument


# -- semantics in the sandbox ----------------------------------------------------------------

ADD = "def f(a, b):\n    return a + b\n"
SEMANTICS = [  # (solution, tests, remote, expected status, expected error class)
    (ADD, "assert f(1, 2) == 3\nassert f((1,), (2,)) == (1, 2)\nassert f([1], [2]) == [1, 2]", ("f",), "passed", None),
    ("def f():\n    return [1, 2]\n", "assert f() == (1, 2)", ("f",), "failed", "AssertionError"),
    ("def f():\n    return 1\n", "assert f() == True", ("f",), "passed", None),
    ("def f():\n    return 1\n", "assert f() is True", ("f",), "failed", "AssertionError"),
    ("def f():\n    return 0.1 + 0.2\n", "import math\nassert abs(f() - 0.3) < 1e-9\nassert math.isclose(f(), 0.3)",
     ("f",), "passed", None),
    ("def f():\n    return 0.1 + 0.2\n", "assert f() == 0.3", ("f",), "failed", "AssertionError"),
    ("def f():\n    return {1: {2, 3}, 'k': (None, b'x')}\n", "assert f() == {1: {3, 2}, 'k': (None, b'x')}", ("f",),
     "passed", None),
    ("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
     "try:\n    f(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\nelse:\n    raise AssertionError\n",
     ("f",), "passed", None),
    ("def f(x):\n    raise KeyError(x)\n", "f(1)", ("f",), "failed", "KeyError"),
    ("class MyError(Exception):\n    pass\n\ndef f():\n    raise MyError('x')\n", "f()", ("f",), "failed", "MyError"),
    ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n\n"
     "def longest(ps):\n    return sum(p.b - p.a for p in ps)\n",
     "assert longest([Pair(1, 3), Pair(5, 6)]) == 3\nassert Pair(1, 2).a == 1", ("Pair", "longest"), "passed", None),
    ("class A:\n    def __eq__(s, o):\n        return True\n\ndef f():\n    return A()\n", "assert f() == 3", ("f",),
     "failed", "AssertionError"),
    ("class A:\n    def __bool__(s):\n        return True\n\ndef f():\n    return A()\n", "assert f()", ("f",),
     "failed", "TypeError"),
    ("def sum(a, b):\n    return a - b\n", "assert sum(3, 1) == 2", ("sum",), "passed", None),
    ("x = 1\n", "assert sum([3, 1]) == 4", ("sum",), "passed", None),  # not defined: the builtin
    ("x = 1\n", "assert g(1) == 1", ("g",), "failed", "NameError"),
    ("import math\ndef f():\n    return 0.5\n", "assert math.isclose(f(), 0.5)", ("f", "math"), "passed", None),
    (ADD, "assert f(lambda: 1, 2) == 3", ("f",), "failed", "TypeError"),  # functions do not cross
    ("def f(xs):\n    xs.append(1)\n", "xs = []\nf(xs)\nassert xs == []", ("f",), "passed", None),  # by value
    ("def f():\n    return (i * i for i in range(4))\n", "assert list(f()) == [0, 1, 4, 9]", ("f",), "passed", None),
    ("def f():\n    while True:\n        pass\n", "f()", ("f",), "timeout", "timeout"),
    ("def f():\n    import sys\n    sys.exit(0)\n", "f()", ("f",), "failed", "failed"),
    ("def f():\n    import os\n    os._exit(0)\n", "f()", ("f",), "failed", "failed"),
    ("def f(:\n", "f()", ("f",), "failed", "SyntaxError"),
    ("def f():\n    return 1\n", "import os\nos._exit(0)", ("f",), "failed", "failed"),  # even the tests must end
]


def _layer_cfgs():
    d = detect()
    out = [pytest.param(("auto",), None, id="auto")]
    for x in LAYERS:
        if d.available[x]:
            out.append(pytest.param((x,), None, id=x))
    if d.python != os.path.realpath(os.sys.executable):  # also the running interpreter (e.g. landlock as root)
        out.append(pytest.param(("landlock",), os.sys.executable, id="landlock-running-python"))
    return out


@pytest.mark.parametrize("layers, python", _layer_cfgs())
def test_judged_semantics(layers, python):
    d = detect(python)
    if not all(d.available[x] for x in layers if x != "auto"):
        pytest.skip(f"{layers} unavailable for {python}")
    with Sandbox(SandboxConfig(layers=layers, python=python, workers=2, timeout_s=2.0,
                               allow_unisolated=layers == ("rlimit",))) as sb:
        rs = sb.run_many([Judged(s, t, remote=r) for s, t, r, _, _ in SEMANTICS], timeout_s=1.5)
    got = [(r.status, r.error_class) for r in rs]
    want = [(st, ec) for _, _, _, st, ec in SEMANTICS]
    bad = [(i, SEMANTICS[i][1], g, w, rs[i].output[-300:]) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, bad


def test_the_candidate_output_comes_first_and_the_verdict_last():
    with Sandbox(SandboxConfig(workers=1)) as sb:
        r = sb.run(Judged("print('hello')\ndef f():\n    print('in f')\n    return 2\n", "assert f() == 3",
                          remote=("f",)))
    assert r.status == "failed" and r.output.splitlines() == ["hello", "in f", "AssertionError"]


# -- the reward hacks, on every layer --------------------------------------------------------


@pytest.mark.parametrize("layers, python", _layer_cfgs())
def test_reward_hacks_are_caught(layers, python, tmp_path):
    d = detect(python)
    if not all(d.available[x] for x in layers if x != "auto"):
        pytest.skip(f"{layers} unavailable for {python}")
    with Sandbox(SandboxConfig(layers=layers, python=python, workers=2, allow_unisolated=layers == ("rlimit",))) as sb:
        outs = run_reward_hacks(sb, tmp_path / "gold", native=True)
        must = hacks_claimed(sb.layers)
    assert [o.hack for o in outs] == list(HACKS) and len(HACKS) == 13
    missed = [f"{o.hack}: {o.detail}" for o in outs if o.hack in must and not o.caught]
    assert not missed
    assert must == set(HACKS) or sb.layers == ("rlimit",)
    # the controls: the three newly defended hacks do pass a naive harness (tests in the program's process)
    native = {o.hack: o.native_passed for o in outs}
    assert native["eq_always_true"] == native["settrace"] == native["stack_token"] == 2, native


# -- the candidate's process never holds the tests ------------------------------------------

_SCAN = '''
def _count(marker):
    m = marker.encode()
    n = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    with open("/proc/self/mem", "rb", 0) as mem:
        for ln in maps:
            addr, perms = ln.split()[:2]
            if not perms.startswith("r") or "[v" in ln:
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(lo)
                n += mem.read(hi - lo).count(m)
            except (OSError, OverflowError, ValueError):
                pass
    return n

# built the same way, so each leaves the same copies: only extra copies of a marker count
_CONTROL = _count("ZQXJ" + "-NEVER-SEEN-4711")
_SEEN = {k: _count("ZQXJ" + k) - _CONTROL for k in ("-TESTS-A-4711", "-PLAIN-A-4711", "-TESTS-B-4711",
                                                    "-SOLUTION-B-4711")}

def seen():
    return _SEEN
'''


def test_no_test_text_reaches_the_candidates_memory():
    """Earlier jobs' texts (tests, programs) and the job's own tests are absent from the memory
    of the candidate's process; its own solution is there (the scan works). Needs /proc/self/mem,
    which only the rlimit layer leaves readable; the zygote does the same on every layer."""
    with Sandbox(SandboxConfig(layers=("rlimit",), workers=1, timeout_s=10.0, allow_unisolated=True)) as sb:
        first = sb.run_many([Judged("def f():\n    return 1\n", "assert f() == 1  # ZQXJ-TESTS-A-4711", remote=("f",)),
                             "x = 'ZQXJ-PLAIN-A-4711'\n"], timeout_s=5)
        assert [r.status for r in first] == ["passed", "passed"]
        r = sb.run(Judged("# ZQXJ-SOLUTION-B-4711\n" + _SCAN,
                          "s = seen()  # ZQXJ-TESTS-B-4711\nassert s['-SOLUTION-B-4711'] >= 1, s\n"
                          "assert s['-TESTS-A-4711'] == s['-PLAIN-A-4711'] == s['-TESTS-B-4711'] == 0, s\n",
                          remote=("seen",)), timeout_s=10)
    assert r.passed, r.output


# -- sandbox errors stay sandbox errors --------------------------------------------------------


def test_a_real_setup_failure_is_a_sandbox_error_and_exit_125_is_not(monkeypatch):
    with Sandbox(SandboxConfig(workers=1)) as sb:
        rs = sb.run_many(["import os\nos._exit(125)\n", Judged("import os\nos._exit(125)\n", "f()", remote=("f",))])
        assert [r.status for r in rs] == ["failed", "failed"]
    plans = Sandbox._plans

    def broken(self):
        out = plans(self)
        for p in out:
            p.zygote["limits"] = dict(p.zygote["limits"], nofile="not a number")  # setrlimit fails in setup
        return out

    monkeypatch.setattr(Sandbox, "_plans", broken)
    with Sandbox(SandboxConfig(workers=1)) as sb:
        rs = sb.run_many(["pass", Judged("def f():\n    return 1\n", "assert f() == 1", remote=("f",))])
        assert [r.status for r in rs] == ["sandbox_error", "sandbox_error"], [r.output for r in rs]
        assert "sandbox setup failed" in rs[0].output


def test_root_prefers_a_world_usable_interpreter_for_the_uid_layer():
    from rlsuite.tasks.sandbox import SYSTEM_PYTHON, _detect, _python_path, world_usable

    running = _python_path(None)
    if os.geteuid() != 0 or world_usable(running) or not world_usable(SYSTEM_PYTHON):
        pytest.skip("needs root, a running interpreter other users cannot use and a world-usable /usr/bin/python3")
    own = _detect(running, 61000, 1024)
    alt = _detect(_python_path(SYSTEM_PYTHON), 61000, 1024)
    version = lambda d: d.python_info["version"].split(".")[:2]
    if not alt.available["uid"] or version(alt) != version(own):
        pytest.skip("/usr/bin/python3 is another Python version or not usable by the uid layer here")
    d = detect()
    assert not own.available["uid"] and d.available["uid"] and d.python == _python_path(SYSTEM_PYTHON)
    assert "runs the programs" in d.reasons["uid"]
    assert detect(running).python == running  # an explicit choice is kept
