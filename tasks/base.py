"""The task protocol: data splits, prompt format, grader, eval protocol, optional environment.

A task is a subclass of :class:`Task` registered in ``TASKS`` with its own frozen config
class (``task.*`` keys of a run spec). Tasks know nothing about algorithms.

Splits: ``train``, ``val`` and ``test``; where a dataset has no validation split, ``val`` is
a fixed hash-selected slice of train (:func:`hash_split`) so it never depends on order.

Multi-turn tasks return an :class:`Environment` from ``make_env``: after each policy turn
that ends on one of ``stop_strings``, ``step(turn_text)`` returns an observation (appended
to the context as token ids, masked out of the loss) or None to end the episode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Hashable, Mapping, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import Registry


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Fields every task has."""

    name: str = ""
    """Registry name of the task (set from ``--task``; not a knob)."""

    ranges: ClassVar[dict[str, str]] = {}
    """The declared range of every numeric field of a task config: field name → interval such as
    ``"(0, 0.5)"`` or ``"[1, inf)"`` (:class:`rlsuite.suite.config.Range`), merged over the MRO, checked
    at resolution (exit 2, nothing written); NaN and ±inf are refused for every float field. The
    same mechanism as :attr:`rlsuite.algorithms.base.AlgoConfig.ranges` (see there); the contract test
    ``tests/contract/test_config_ranges.py`` covers every registered task."""


@dataclass(frozen=True)
class Grade:
    """A graded completion: ``reward`` in the task's declared range, ``correct`` for
    accuracy metrics, ``parsed`` the extracted answer (None = nothing extractable; such a
    completion does not vote in maj@k). ``error_class``: the equivalence class of a wrong
    answer for error-diversity methods (EDAS): the canonical final answer for math-like tasks
    (None = same as ``parsed``; use :meth:`error_key`), the exception type or failure status
    for code.

    ``error``: None for a real verdict; otherwise why the *grader* could not grade this
    completion (its pool or sandbox failed, math-verify crashed, an infrastructure timeout).
    An errored grade is not a wrong answer: it carries ``reward`` 0, ``correct`` False and no
    vote, and the trainer counts it (``reward/grade_errors``), leaves its row out of the policy
    loss, and fails the run when every grade of a batch errored (see :class:`GraderError`).
    A candidate that fails its tests or times out is a wrong answer, not an error.

    ``components``: the named reward components of this grade, one value for each name in the
    task's :attr:`Task.reward_components` (e.g. ``{"correct": 1.0, "format": 0.0}``), raw and
    unweighted, for multi-reward estimators (GDPO's ``reward_keys``); ``reward`` stays the task's
    one scalar reward (how the task combines them). None: the task reports no components (or the
    grade errored; its components then count as 0, like its reward)."""

    reward: float
    correct: bool
    parsed: Optional[str]
    error_class: Optional[str] = None
    error: Optional[str] = None
    components: Optional[Mapping[str, float]] = field(default=None, hash=False)

    def component(self, name: str) -> float:
        """The named component's value (0 for an errored grade); KeyError naming the ones it has."""
        if self.error is not None:
            return 0.0
        if self.components is None or name not in self.components:
            raise KeyError(f"grade has no reward component {name!r}; it has: "
                           f"{', '.join(self.components or {}) or 'none'}")
        return float(self.components[name])

    @classmethod
    def errored(cls, why: str, error_class: Optional[str] = None) -> "Grade":
        """A grade the grader could not produce (reward 0, no vote), with the reason."""
        return cls(reward=0.0, correct=False, parsed=None, error_class=error_class, error=why)

    @property
    def error_key(self) -> Optional[str]:
        """The error class, falling back to the parsed answer (None: nothing extractable)."""
        return self.error_class if self.error_class is not None else self.parsed


class GraderError(RuntimeError):
    """A task's grader cannot grade at all (its worker pool died on start-up, its sandbox cannot
    start, every grade of a batch errored). Raised, never turned into reward 0: the run stops
    as ``failed`` (exit 1) with this message as the reason."""


class Environment:
    """A multi-turn environment for one episode."""

    stop_strings: tuple[str, ...] = ()

    def step(self, text: str) -> Optional[str]:
        """Consume the policy's last turn; return the observation text, or None when done."""
        return None

    def state(self) -> Optional[Hashable]:
        """The environment state the next policy turn acts in, hashable (e.g. the current
        observation), or None when the environment exposes none. The rollout records it before
        every policy turn (``Rollout.turn_states``); turn-level estimators group the turns of one
        prompt group on it (GiGPO's anchor states; without one GiGPO falls back to exact histories)."""
        return None


class Task:
    """Base class of every task."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    citation: ClassVar[str] = ""
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    reward_components: ClassVar[tuple[str, ...]] = ()
    """Names of the reward components every (non-errored) grade carries in ``Grade.components``
    (the rollout carries them as ``Rollout.reward_components``; GDPO's ``reward_keys`` choose among
    them). Empty: the task reports only its one scalar reward."""
    Config: ClassVar[type[TaskConfig]] = TaskConfig
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}
    """Section overrides per model family: ``{"embedded": {...}, "hf": {...}}``."""
    inert: ClassVar[dict[str, str]] = {}
    """Config fields that deliberately change none of prompts, data, grades or environment
    observations on the contract's sample data, with the reason (the "no dead configuration
    fields" test in ``tests/contract/test_tasks_contract.py`` skips them; every key must be a
    field of ``Config``)."""

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg

    def splits(self) -> dict[str, list[Any]]:
        """``{"train": [...], "val": [...], "test": [...]}`` of examples (cached by callers)."""
        raise NotImplementedError

    def prompt(self, example: Any) -> str | list[dict[str, str]]:
        """Raw prompt text, or chat messages (formatted with the model's chat template)."""
        raise NotImplementedError

    def grade(self, example: Any, completion: str) -> Grade:
        raise NotImplementedError

    def grade_batch(self, examples: Sequence[Any], completions: Sequence[str]) -> list[Grade]:
        """Grade many completions (tasks with slow graders override this to use a pool)."""
        return [self.grade(e, c) for e, c in zip(examples, completions)]

    def gold(self, example: Any) -> Optional[str]:
        """The reference answer as text (for samples.jsonl)."""
        return None

    def eval_metrics(self, examples: Sequence[Any], grades: Sequence[Grade]) -> dict[str, float]:
        """Task-specific scores of graded eval completions (``examples[i]`` graded ``grades[i]``; an
        example repeats once per sample), e.g. per-kind accuracies; :func:`rlsuite.suite.evaluate.evaluate`
        reports them next to ``greedy_acc`` as ``greedy_<name>`` / ``sampled_<name>``. Default: none."""
        return {}

    def make_env(self, example: Any) -> Optional[Environment]:
        return None

    # -- verifier feedback (FBOS-RL's second round) ----------------------------------------
    def feedback(self, example: Any, completion: str, grade: Grade, detail: str = "full") -> str:
        """Rule-based verifier feedback on one graded completion: where and why it fails.

        ``detail = "binary"``: only whether it is correct; ``"full"``: the task's template (this
        default: whether an answer could be extracted, and that it is wrong — tasks override it
        with their own diagnosis). Never reveals the gold answer.
        """
        if grade.correct:
            return "Your answer is correct."
        if detail == "binary":
            return "Your answer is incorrect."
        if grade.parsed is None:
            return "No final answer could be extracted from your response."
        return f"Your answer {grade.parsed} is incorrect."

    def revision_prompt(self, example: Any, completion: str, feedback: str) -> str | list[dict[str, str]]:
        """The feedback-augmented prompt: prompt + first answer + feedback, asking again.

        Text prompts: ``prompt + completion + "\n" + feedback + "\n" + prompt`` (the question is
        restated so the model answers in the task's own format); chat prompts: the conversation
        continued with the answer as the assistant turn and the feedback as a user turn.
        """
        p = self.prompt(example)
        if isinstance(p, list):
            return [*p, {"role": "assistant", "content": completion},
                    {"role": "user", "content": f"{feedback} Please solve the problem again."}]
        return f"{p}{completion}\n{feedback}\n{p}"

    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, float]]:
        """Supervised warm start for models built from scratch; None = the task has none."""
        return None

    def close(self) -> None:
        """Release worker pools."""

    @classmethod
    def describe(cls) -> dict[str, Any]:
        cfg = cls.Config()
        return {"name": cls.name, "summary": cls.summary, "citation": cls.citation, "fidelity": None,
                "assumptions": [], "version": cls.version, "reward_range": list(cls.reward_range),
                "switches": {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "name"},
                "needs": []}


TASKS: Registry[type[Task]] = Registry("task", "rlsuite.tasks")


def register(cls: type[Task]) -> type[Task]:
    TASKS.register(cls.name, cls)
    return cls


def direction_hint(parsed: Optional[str], gold: Optional[str]) -> str:
    """`` It is too high.`` / `` It is too low.`` when both parse as numbers, else ``""``."""
    try:
        a, b = float(str(parsed).replace(",", "")), float(str(gold).replace(",", ""))
    except (TypeError, ValueError):
        return ""
    return "" if a == b else f" It is too {'high' if a > b else 'low'}."


def hash_split(key: str, fraction: float, salt: str = "val") -> bool:
    """Deterministic membership of ``key`` in a ``fraction`` slice (order-independent)."""
    h = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < fraction


def generated_splits(problems: Sequence[Any], fraction: float) -> dict[str, list[Any]]:
    """Train/val/test of a generated task's problems (the embedded tasks): val is the
    ``hash_split(p.text, fraction, "val")`` slice, test the ``"test"`` slice minus val, train the
    rest; so the three are disjoint by construction and the same on every machine."""
    val = [p for p in problems if hash_split(p.text, fraction, "val")]
    val_set = set(val)
    test = [p for p in problems if hash_split(p.text, fraction, "test") and p not in val_set]
    held = val_set | set(test)
    return {"train": [p for p in problems if p not in held], "val": val, "test": test}


def carve_splits(train: list[dict], test: Optional[list[dict]], key: str, fraction: float) -> dict[str, list[dict]]:
    """Train/val/test from a train file and an optional test file, one rule for every data task:
    with no test file, test is carved first (``hash_split(row[key], fraction, "test")``), then val
    from what is left (salt ``"val"``), so a row selected for both lands in test for every task."""
    if test is None:
        test = [r for r in train if hash_split(r[key], fraction, "test")]
        train = [r for r in train if not hash_split(r[key], fraction, "test")]
    val = [r for r in train if hash_split(r[key], fraction)]
    train = [r for r in train if not hash_split(r[key], fraction)]
    return {"train": train, "val": val, "test": test}


def data_root() -> Path:
    """``$RLSUITE_DATA`` (default ``../shared/data`` relative to the working directory)."""
    return Path(os.environ.get("RLSUITE_DATA", "../shared/data"))


def read_jsonl(path: Path, required: Sequence[str], types: Optional[dict[str, Any]] = None) -> list[dict]:
    """Read a JSONL file; a line that is not UTF-8 text, a malformed row, a row missing
    ``required`` fields or (with ``types``: field → type or tuple of types) a field of the wrong
    type → BadInput naming the file, line and problem."""
    rows = []
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}") from None
    with fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadInput(f"{path}:{n}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                               f"expected JSONL, one JSON object per line") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"{path}:{n}: not valid JSON ({e.msg})") from None
            missing = [k for k in required if k not in row] if isinstance(row, dict) else list(required)
            if missing:
                raise BadInput(f"{path}:{n}: row lacks field(s) {', '.join(missing)}; "
                               f"expected fields: {', '.join(required)}")
            for k, tp in (types or {}).items():
                if k in row and not _has_type(row[k], tp):
                    raise BadInput(f"{path}:{n}: field '{k}' must be {_type_words(tp)}, got {json.dumps(row[k])}")
            rows.append(row)
    if not rows:
        raise BadInput(f"{path}: no rows")
    return rows


def _has_type(value: Any, tp: Any) -> bool:
    if isinstance(tp, tuple):
        return any(_has_type(value, t) for t in tp)
    if tp is list:  # a list of strings (test lists, gold answer lists)
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_words(tp: Any) -> str:
    names = {str: "a string", int: "an integer", list: "a list of strings"}
    return " or ".join(names.get(t, t.__name__) for t in (tp if isinstance(tp, tuple) else (tp,)))
