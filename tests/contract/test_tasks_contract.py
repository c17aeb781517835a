"""Contract tests over every registered task (names starting with ``_`` are test fakes).

Each task must: carry metadata (summary, version, reward range, a frozen config, presets that
resolve into valid run specs); load its train/val/test splits (from ``$RLSUITE_DATA`` where
it needs data, through the overrides in ``DATA`` below), deterministically, with val and
test disjoint from train; format a prompt; grade its own reference completion correct with
the top reward and a parsed answer (a maj@k vote), and another example's reference
completion incorrect; build its environment, if any.

A task's reference completion is ``task.reference_completion(example)`` when it defines
one, else ``task.gold(example)``. A new task that needs data adds a line to ``DATA``.
Run: ``python -m pytest -q tests/contract/test_tasks_contract.py``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

import tasks  # noqa: F401  (registers the built-in tasks)
from suite.spec import resolve
from tasks.base import TASKS, Environment, Grade, TaskConfig
from tests.conftest import data_dir

NAMES = [n for n in TASKS.names() if not n.startswith("_")]

DATA: dict[str, dict[str, str]] = {
    # task name → {config field: path under $RLSUITE_DATA}
    "gsm8k": {"data_path": "gsm8k"},
    "math": {"data_path": "math"},
    "search": {"data_path": "search"},
    "humaneval": {"data_path": "code"},
    "mbpp": {"data_path": "code"},
}


def overrides(name: str) -> dict[str, str]:
    """Config overrides pointing ``name`` at the sample data (skips when it is absent)."""
    cls = TASKS.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    spec = DATA.get(name)
    if spec is None and "data_path" in fields:  # a new task: try $RLSUITE_DATA/<name>
        root = Path(os.environ.get("RLSUITE_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
        spec = {"data_path": name} if (root / name).exists() else {}
    return {k: str(data_dir(v)) for k, v in (spec or {}).items()}


_TASKS: dict[str, Any] = {}


@pytest.fixture(scope="module")
def make_task():
    def make(name: str):
        if name not in _TASKS:
            cls = TASKS.get(name)
            _TASKS[name] = cls(cls.Config(name=name, **overrides(name)))
        return _TASKS[name]

    yield make
    for t in _TASKS.values():
        t.close()
    _TASKS.clear()


def reference(task, example) -> str:
    ref = getattr(task, "reference_completion", None)
    return ref(example) if ref is not None else task.gold(example)


def test_there_are_tasks_to_check():
    assert {"arith", "gsm8k", "math", "search", "search_toy"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_metadata_and_presets(name):
    cls = TASKS.get(name)
    d = cls.describe()
    assert d["name"] == name == cls.name and d["summary"] and isinstance(d["version"], str) and d["version"]
    lo, hi = cls.reward_range
    assert lo < hi
    assert issubclass(cls.Config, TaskConfig) and cls.Config.__dataclass_params__.frozen
    cfg = cls.Config(name=name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "x"  # type: ignore[misc]
    assert set(cls.presets) <= {"embedded", "hf"}
    for family, model in (("embedded", "tiny"), ("hf", "org/some-model")):
        if family in cls.presets:
            spec = resolve(name, "grpo", model, 0)  # every preset key is a real field with a valid value
            assert spec.task.name == name and spec.budget.limits()


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_declared_deterministic_and_disjoint(name, make_task):
    task = make_task(name)
    s = task.splits()
    assert set(s) == {"train", "val", "test"} and all(len(s[k]) > 0 for k in s), {k: len(v) for k, v in s.items()}
    cls = TASKS.get(name)
    again = cls(cls.Config(name=name, **overrides(name)))
    try:
        s2 = again.splits()
        for k in s:
            assert [repr(task.prompt(e)) for e in s[k]] == [repr(again.prompt(e)) for e in s2[k]], k
    finally:
        again.close()
    train = {repr(task.prompt(e)) for e in s["train"]}
    assert not train & {repr(task.prompt(e)) for e in s["val"]}, "val overlaps train"
    assert not train & {repr(task.prompt(e)) for e in s["test"]}, "test overlaps train"


@pytest.mark.parametrize("name", NAMES)
def test_prompt_and_own_gold_grade_correct_other_gold_wrong(name, make_task):
    task = make_task(name)
    examples = task.splits()["test"][:2] + task.splits()["val"][:2]
    ex = examples[0]
    p = task.prompt(ex)
    assert (isinstance(p, str) and p) or (isinstance(p, list) and all({"role", "content"} <= set(m) for m in p))
    assert isinstance(task.gold(ex), str) and task.gold(ex)
    # another example with a different gold supplies the wrong answer
    other = next(e for e in examples[1:] + task.splits()["train"][:50] if task.gold(e) != task.gold(ex))
    right, wrong, garbage = task.grade_batch([ex, ex, ex], [reference(task, ex), reference(task, other), "\x00 ?"])
    lo, hi = task.reward_range
    assert isinstance(right, Grade) and right.correct and right.reward == hi and right.parsed is not None
    assert not wrong.correct and lo <= wrong.reward < hi
    assert not garbage.correct and lo <= garbage.reward < hi
    assert task.grade(ex, reference(task, ex)).correct  # grade and grade_batch agree


@pytest.mark.parametrize("name", NAMES)
def test_environment_if_any(name, make_task):
    task = make_task(name)
    env = task.make_env(task.splits()["test"][0])
    if env is None:
        return
    assert isinstance(env, Environment)
    assert env.stop_strings and all(isinstance(s, str) and s for s in env.stop_strings)
