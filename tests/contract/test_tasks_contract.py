"""Contract tests over every registered task (names starting with ``_`` are test fakes).

Each task must: carry metadata (summary, version, reward range, a frozen config, presets that
resolve into valid run specs); load its train/val/test splits (from ``$RLSUITE_DATA`` where
it needs data, through the overrides in ``DATA`` below), deterministically, with val and
test disjoint from train; format a prompt; grade its own reference completion correct with
the top reward and a parsed answer (a maj@k vote), and another example's reference
completion incorrect; build its environment, if any; and have no dead configuration field:
changing any field of its config from the default changes the data, a prompt, a grade or an
environment observation, unless the task lists the field in ``inert`` with the reason (as
algorithms do; see ``test_every_config_field_is_live`` below for the values tried and the
probes).

A task's reference completion is ``task.reference_completion(example)`` when it defines
one, else ``task.gold(example)``. A new task that needs data adds a line to ``DATA``.
Run: ``python -m pytest -q tests/contract/test_tasks_contract.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from rlsuite import tasks  # noqa: F401  (registers the built-in tasks)
from rlsuite.suite.errors import BadInput
from rlsuite.suite.spec import resolve
from rlsuite.tasks.base import TASKS, Environment, Grade, TaskConfig
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


# ---------------------------------------------------------------------------------------
# No dead configuration fields: every field of every task's config changes something the task
# exposes, unless the task lists it in ``inert`` (a dict field → reason on the task class, as
# algorithms do). "Something" is the task's observable surface on the contract's data: the
# splits (sizes and contents), the prompt of every example, the gold, grade and feedback of
# probe (example, completion) pairs (the eval metrics are functions of these), and the
# observations of the task's environment on probe turns. Values tried per field: the
# ``VALUES`` table where it has an entry, else one derived from the type (bools flipped,
# numbers moved, strings altered, other Literal options); a value the config or the task
# rejects (ValueError, TypeError, BadInput) is skipped.

PROBE_SLEEP_S = 0.6  # a probe program sleeps this long; timeout_s is set below it (and defaults above)


def _jsonl_subset(src: Path, dst: Path, n: int) -> str:
    """The first ``n`` rows of ``src`` in a file under the test's temporary folder."""
    with open(src, encoding="utf-8") as fh:
        rows = [line for line in fh if line.strip()][:n]
    dst.write_text("".join(rows), encoding="utf-8")
    return str(dst)


class Probe:
    """Temporary files and a retrieval server for values that need them (made on first use)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self._server = tmp, None

    def corpus(self) -> str:
        path = self.tmp / "corpus.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in _PASSAGES), encoding="utf-8")
        return str(path)

    def retriever_url(self) -> str:
        if self._server is None:
            from rlsuite.tasks.retrieval import TinyBM25, make_server

            self._server = make_server(TinyBM25(_PASSAGES))
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}/retrieve"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


_PASSAGES = [{"id": "x1", "contents": '"Zeta"\nZeta is a made-up place for the contract test.'},
             {"id": "x2", "contents": '"Omega"\nOmega is another made-up place.'}]

VALUES: dict[str, dict[str, Callable[[Probe], list]]] = {
    # task → field → non-default values to try (instead of the type-derived ones)
    "arith": {"ops": lambda p: ["+", "+-*"]},
    "reasoning_gym": {"datasets": lambda p: [("leg_counting:max_animals=3",),
                                             ("basic_arithmetic:min_terms=2,max_terms=2,max_digits=2,operators=[+,-]",
                                              "leg_counting:max_animals=3")],
                      "pool": lambda p: [2000],  # the default's train is capped at n_train: a smaller pool binds
                      "max_answer_share": lambda p: [0.005]},  # the default's top answer is ~1.8% of its pool
    "gsm8k": {"data_path": lambda p: [str(data_dir("gsm8k") / "train_sample.jsonl")]},
    "math": {"data_path": lambda p: [str(data_dir("math") / "train_sample.jsonl")]},
    "search": {"data_path": lambda p: [str(data_dir("search") / "nq_open_dev_sample.jsonl")],
               "corpus_path": lambda p: [p.corpus()], "retriever_url": lambda p: [p.retriever_url()]},
    "humaneval": {"data_path": lambda p: [_jsonl_subset(data_dir("code") / "humaneval.jsonl",
                                                        p.tmp / "humaneval_sub.jsonl", 60)],
                  "timeout_s": lambda p: [PROBE_SLEEP_S / 2], "sandbox_memory_mb": lambda p: [128]},
    "mbpp": {"data_path": lambda p: [_jsonl_subset(data_dir("code") / "mbpp_sample.jsonl",
                                                   p.tmp / "mbpp_sub.jsonl", 100)],
             "timeout_s": lambda p: [PROBE_SLEEP_S / 2], "sandbox_memory_mb": lambda p: [128]},
    "code_toy": {"timeout_s": lambda p: [PROBE_SLEEP_S / 2]},
}


def _code_probes(code: str, entry: Optional[str]) -> list[str]:
    """Full solutions that sleep, that allocate 300 MiB, and (given the entry point) that fail
    from the second call of the function on (all tests in one program fail; one test per
    program passes)."""
    out = [f"{code}\nimport time\ntime.sleep({PROBE_SLEEP_S})\n", f"{code}\n_big = bytearray(300 << 20)\n"]
    if entry:
        out.append(f"{code}\n_orig_{entry} = {entry}\n_calls_{entry} = [0]\n\n\ndef {entry}(*a, **k):\n"
                   f"    _calls_{entry}[0] += 1\n    if _calls_{entry}[0] > 1:\n"
                   f"        raise ValueError('second call')\n    return _orig_{entry}(*a, **k)\n")
    return out


def _mbpp_entry(ex: dict) -> Optional[str]:
    tests = "\n".join(ex["test_list"])
    return next((n for n in re.findall(r"^def (\w+)", ex["code"], re.M) if f"{n}(" in tests), None)


EXTRA_COMPLETIONS: dict[str, Callable[[Any, Any, Any], list[str]]] = {
    # task → (task, example, another example) → more probe completions for that example
    "gsm8k": lambda t, ex, other: [f"so \\boxed{{{t.gold(other)}}}"],
    # the scorers' partial credit: an answer that contains the gold scores len(gold) / len(answer)
    "reasoning_gym": lambda t, ex, other: [f"<answer>{t.gold(ex)} or so</answer>"],
    "search": lambda t, ex, other: [f"<answer> {t.gold(ex).split(' | ')[0]} and more words </answer>"],
    "humaneval": lambda t, ex, other: _code_probes(ex["prompt"] + ex["canonical_solution"], ex["entry_point"]),
    "mbpp": lambda t, ex, other: _code_probes(ex["code"], _mbpp_entry(ex)),
    # the expression runs once per assert (6 of them): PROBE_SLEEP_S in all
    "code_toy": lambda t, ex, other: [f"(__import__('time').sleep({PROBE_SLEEP_S / 6}) or {t.gold(ex)})"],
}

TURNS: dict[str, Callable[[Any], list[str]]] = {
    # task → example → policy turns fed to its environment
    "search": lambda ex: [f"<search> {ex['question']} </search>", "no action here"],
    "search_toy": lambda ex: [f"<search>{ex.name}</search>"],
    "hops_toy": lambda ex: [f"<search>{ex.start}</search>", "no action here"],
}


def _candidates(value, tp) -> list:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return [v for v in typing.get_args(tp) if v != value]
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        return [] if value is None else [None] + _candidates(value, inner)
    if tp is bool:
        return [not value]
    if tp is int:
        return [value + 1, max(0, value - 1)]
    if tp is float:
        return [value * 0.5, value * 2 + 0.1, value + 1.0]
    if tp is str:
        return [value + " (altered)", ""]
    return []


def _digest(obj) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()


def _surface(task, probes: list[tuple[Any, list[str]]], turns) -> Iterator[tuple[str, Any]]:
    """Everything the contract observes of ``task``, cheapest first (probe examples come from the
    default task): the caller stops at the first difference, so most values never grade."""
    s = task.splits()
    for k, v in s.items():
        yield f"data/{k}", (len(v), _digest(v))
        yield f"prompts/{k}", _digest([task.prompt(e) for e in v])
    yield "prompts/probes", [task.prompt(e) for e, _ in probes]
    yield "gold", [task.gold(e) for e, _ in probes]
    obs = []
    for e, _ in probes:
        env = task.make_env(e)
        obs.append(None if env is None else [env.step(t) for t in (turns(e) if turns else [])])
    yield "env", obs
    exs = [e for e, cs in probes for _ in cs]
    comps = [c for _, cs in probes for c in cs]
    grades = task.grade_batch(exs, comps)
    yield "grades", [dataclasses.astuple(g) for g in grades]
    yield "feedback", [task.feedback(e, c, g) for e, c, g in zip(exs, comps, grades)]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    p = Probe(tmp_path_factory.mktemp("dead_fields"))
    yield p
    p.close()


@pytest.mark.parametrize("name", NAMES)
def test_inert_fields_are_real_fields_with_reasons(name):
    cls = TASKS.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)} - {"name"}
    assert set(cls.inert) <= fields, f"{name}: inert names unknown fields {set(cls.inert) - fields}"
    assert all(isinstance(r, str) and r.strip() for r in cls.inert.values()), \
        f"{name}: every inert field needs a reason"
    stale = set(VALUES.get(name, {})) - (fields - set(cls.inert))
    assert not stale, f"{name}: VALUES lists {stale}, which are not live-checked fields"


@pytest.mark.parametrize("name", NAMES)
def test_every_config_field_is_live(name, probe):
    cls = TASKS.get(name)
    over = overrides(name)
    base_task = cls(cls.Config(name=name, **over))
    try:
        s = base_task.splits()
        examples = s["test"][:2] + s["val"][:2]
        probes = []
        for ex in examples:
            other = next(e for e in examples + s["train"][:50] if base_task.gold(e) != base_task.gold(ex))
            extra = EXTRA_COMPLETIONS.get(name, lambda *a: [])(base_task, ex, other)
            probes.append((ex, [reference(base_task, ex), reference(base_task, other), "\x00 ?", *extra]))
        base = dict(_surface(base_task, probes, TURNS.get(name)))
        default = base_task.cfg
    finally:
        base_task.close()
    hints = typing.get_type_hints(cls.Config)
    dead, untried = [], []
    for f in dataclasses.fields(cls.Config):
        if f.name == "name" or f.name in cls.inert:
            continue
        value = getattr(default, f.name)
        table = VALUES.get(name, {})
        cands = table[f.name](probe) if f.name in table else _candidates(value, hints[f.name])
        live = tried = False
        for cand in (c for c in cands if c != value):
            try:
                task = cls(cls.Config(name=name, **{**over, f.name: cand}))
            except (ValueError, TypeError, BadInput):
                continue
            try:
                live = any(v != base[k] for k, v in _surface(task, probes, TURNS.get(name)))
                tried = True
            except BadInput:
                continue
            finally:
                task.close()
            if live:
                break
        if not live:
            (dead if tried else untried).append(f.name)
    problems = []
    if untried:
        problems.append(f"no valid non-default value found for {untried} (add values to VALUES in this file)")
    if dead:
        problems.append(f"fields {dead} change no prompt, data, grade or environment observation")
    assert not problems, (f"{name}: " + "; ".join(problems)
                          + f"; make them live or list them in {cls.__name__}.inert with a reason")
