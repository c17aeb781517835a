"""Declared ranges: every numeric field of every registered algorithm and task config has one
(``ranges``, see ``algorithms/base.py`` ``AlgoConfig.ranges``); it admits the default and the
entry's tuning grid; a value outside it, NaN or infinity is refused at resolution (``BadInput``;
the CLI exits 2 and writes nothing).

Run: pytest tests/contract/test_config_ranges.py
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from rlsuite import algorithms  # noqa: F401  (registration)
from rlsuite import tasks  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS
from rlsuite.suite.cli import main
from rlsuite.suite.config import SECTION_CLASSES, declared_ranges, numeric_fields, range_problems
from rlsuite.suite.errors import BadInput
from rlsuite.suite.spec import resolve
from rlsuite.tasks.base import TASKS

ENTRIES = [("algo", n) for n in ALGORITHMS.names() if not n.startswith("_")] + \
          [("task", n) for n in TASKS.names() if not n.startswith("_")]
SECTIONS = {k: v for k, v in SECTION_CLASSES.items() if k != "model"}


def config_class(kind: str, name: str) -> type:
    return (ALGORITHMS if kind == "algo" else TASKS).get(name).Config


def outside(cls: type, field: str) -> list:
    """Values just outside the field's declared range (ints for int fields), plus NaN and inf."""
    r = declared_ranges(cls)[field]
    vals = []
    if math.isfinite(r.lo):
        vals.append(r.lo - 1 if r.lo_closed else r.lo)
    if math.isfinite(r.hi):
        vals.append(r.hi + 1 if r.hi_closed else r.hi)
    return vals + [math.nan, math.inf, -math.inf]


def resolve_with(kind: str, name: str, key: str, value):
    task, algo = (name, "grpo") if kind == "task" else ("arith", name)
    return resolve(task, algo, "tiny", 0, sets=[(key, value)])


def test_every_builtin_entry_is_covered():
    assert len([e for e in ENTRIES if e[0] == "algo"]) >= 29 and len([e for e in ENTRIES if e[0] == "task"]) >= 8


@pytest.mark.parametrize("kind, name", ENTRIES)
def test_every_numeric_field_has_a_range_admitting_default_and_tuning_grid(kind, name):
    cls = config_class(kind, name)
    ranges, fields, cfg = declared_ranges(cls), numeric_fields(cls), cls()
    assert fields == [f for f in fields if f in ranges], f"{name}: no declared range for {set(fields) - set(ranges)}"
    assert set(ranges) <= set(fields), f"{name}: ranges for non-numeric or unknown fields {set(ranges) - set(fields)}"
    for f in fields:
        assert not range_problems(cls, f, getattr(cfg, f), f), (name, f, getattr(cfg, f))
    knob = getattr((ALGORITHMS if kind == "algo" else TASKS).get(name), "tune_knob", None)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in (knob[0].split("+") if knob else ()):  # "a+b" sets each of its fields
        assert key in names, f"{name}: tune_knob names {key!r}, not a field; fields: {sorted(names)}"
        for v in (knob[1] if key in ranges else ()):
            assert not range_problems(cls, key, v, key), (name, key, v)


@pytest.mark.parametrize("kind, name", ENTRIES)
def test_out_of_range_and_non_finite_values_are_bad_input(kind, name):
    cls = config_class(kind, name)
    tuple_fields = {f for f in numeric_fields(cls) if isinstance(getattr(cls(), f), tuple)}
    for f in numeric_fields(cls):
        for v in outside(cls, f):
            with pytest.raises(BadInput) as e:
                resolve_with(kind, name, f"{kind}.{f}", [v] if f in tuple_fields else v)
            assert f"{kind}.{f}" in str(e.value), (name, f, v, str(e.value))


@pytest.mark.parametrize("kind, name", ENTRIES)
def test_cli_exits_2_and_writes_nothing(kind, name, tmp_path, capsys):
    cls = config_class(kind, name)
    task, algo = (name, "grpo") if kind == "task" else ("arith", name)
    out = tmp_path / "out"
    for f in numeric_fields(cls):
        value = outside(cls, f)[0]
        arg = f"{kind}.{f}=[{value}]" if isinstance(getattr(cls(), f), tuple) else f"{kind}.{f}={value}"
        assert main(["run", "--task", task, "--algo", algo, "--set", arg, "--out", str(out)]) == 2, arg
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and f"{kind}.{f}" in err, err
    assert not out.exists()


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_run_sections_refuse_non_finite_and_out_of_range(section):
    cls = SECTIONS[section]
    assert set(numeric_fields(cls)) <= set(declared_ranges(cls)), section
    for f in numeric_fields(cls):
        for v in outside(cls, f):
            value = [v] if isinstance(getattr(cls(), f), tuple) else v
            with pytest.raises(BadInput) as e:
                if section == "budget":
                    resolve("arith", "grpo", "tiny", 0, budgets=[(f, value)])
                else:
                    resolve("arith", "grpo", "tiny", 0, sets=[(f"{section}.{f}", value)])
            assert f"{section}.{f}" in str(e.value), (f, v, str(e.value))


@pytest.mark.parametrize("text, yes, no", [("[0, 1)", [0, 0.5], [1, -0.1]), ("(0, inf)", [1e-9, 1e9], [0, -1]),
                                           ("[1, 2]", [1, 2], [0, 3]), ("(-inf, inf)", [-1e9, 1e9], [])])
def test_range_notation(text, yes, no):
    from rlsuite.suite.config import Range

    r = Range.parse(text)
    assert all(v in r for v in yes) and not any(v in r for v in no)
    with pytest.raises(ValueError):
        Range.parse("0..1")
