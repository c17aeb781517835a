"""The test run's own scheduling (tests/conftest.py): xdist groups handed out longest first."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.conftest import DURATIONS, SERIAL_GROUPS, order_by_cost


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_groups_come_longest_first_and_stay_contiguous():
    items = _items("tests/a.py::t1", "tests/integration/test_fsdp.py::f1", "tests/b.py::t1", "tests/a.py::t2",
                   "tests/integration/test_data_parallel.py::d1", "tests/integration/test_fsdp.py::f2")
    cost = {"tests/a.py": 5.0, "tests/b.py": 50.0, "ranks": 300.0}
    out = [i.nodeid for i in order_by_cost(items, cost)]
    # ranks (fsdp + data parallel, one serial group) 300 s, then b 50 s, then a 5 s; collected order within a group
    assert out == ["tests/integration/test_fsdp.py::f1", "tests/integration/test_data_parallel.py::d1",
                   "tests/integration/test_fsdp.py::f2", "tests/b.py::t1", "tests/a.py::t1", "tests/a.py::t2"]


def test_a_group_without_a_recorded_cost_is_costed_per_test():
    # known: 2 tests, 40 s in all -> 20 s a test; the unknown group of 3 tests is costed 60 s
    items = _items("tests/new.py::x", "tests/new.py::y", "tests/new.py::z", "tests/a.py::t1", "tests/b.py::t1")
    out = [i.nodeid for i in order_by_cost(items, {"tests/a.py": 30.0, "tests/b.py": 10.0})]
    assert out == ["tests/new.py::x", "tests/new.py::y", "tests/new.py::z", "tests/a.py::t1", "tests/b.py::t1"]
    # ties (no costs at all) keep the collected order
    assert [i.nodeid for i in order_by_cost(items, {})] == [i.nodeid for i in items]


def test_the_committed_durations_name_the_serial_groups():
    doc = json.loads(DURATIONS.read_text())
    assert set(SERIAL_GROUPS.values()) <= set(doc["groups"]), \
        "re-record: RLSUITE_RECORD_DURATIONS=1 python -m pytest -q"
    assert all(v >= 0 for v in doc["groups"].values()) and doc["cpu"]
