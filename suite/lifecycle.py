"""A run's lifecycle around the loop: stop signals agreed across ranks, the counted grader of
the evals, and the cleanup of a resumed run folder."""

from __future__ import annotations

import signal
from typing import Any, Optional

from rlsuite.suite.errors import Interrupted
from rlsuite.suite.runfolder import RunFolder, atomic_write_text, dumps, read_jsonl


class Signals:
    """SIGINT/SIGUSR2 (preempted, 130) and SIGTERM (cancelled, 143), noted for the loop to stop on."""

    def __init__(self) -> None:
        self.signal: Optional[Interrupted] = None
        self._old_handlers: dict = {}

    def install(self) -> None:
        def handler(state: str, code: int):
            def h(signum, frame):
                self.signal = Interrupted(state, code)
            return h
        self._old_handlers = {}
        try:
            for sig, (state, code) in ((signal.SIGINT, ("preempted", 130)),
                                       (signal.SIGUSR2, ("preempted", 130)),  # submitit's preemption/timeout
                                       (signal.SIGTERM, ("cancelled", 143))):
                self._old_handlers[sig] = signal.signal(sig, handler(state, code))
        except ValueError:  # not in the main thread
            pass

    def agreed(self, world) -> Optional[Interrupted]:
        """The stop signal, agreed across data-parallel ranks (the strongest exit code wins), so
        every rank stops after the same step."""
        if not world.active:
            return self.signal
        code = int(world.all_reduce_max([self.signal.code if self.signal else 0])[0])
        return Interrupted({130: "preempted", 143: "cancelled"}[code], code) if code else None

    def restore(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)


class CountingGrader:
    """The task, with the grade errors (``Grade.error``) of its ``grade``/``grade_batch`` counted."""

    def __init__(self, task) -> None:
        self._task, self.graded, self.errors, self.first = task, 0, 0, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def _count(self, grades: list) -> list:
        errs = [g.error for g in grades if g.error is not None]
        self.graded += len(grades)
        self.errors += len(errs)
        if errs and self.first is None:
            self.first = errs[0]
        return grades

    def grade(self, example, completion: str):
        return self._count([self._task.grade(example, completion)])[0]

    def grade_batch(self, examples, completions):
        return self._count(list(self._task.grade_batch(examples, completions)))


def drop_final_rows(f: RunFolder) -> None:
    """Resuming after the last checkpoint re-runs the final evals: drop their old rows."""
    for name in ("evals.jsonl", "samples.jsonl", "problems.jsonl"):
        path = f.file(name)
        if not path.exists():
            continue
        rows = [r for r in read_jsonl(path) if not r.get("final")]
        atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))
