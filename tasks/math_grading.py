"""Answer extraction and math-verify grading in worker processes.

math-verify's timeouts use ``signal.alarm`` and only work in a process's main thread, and
forking after torch has started threads is unsafe; so grading runs in a *spawn*-context
process pool whose workers call ``parse``/``verify`` in their main thread (its own timeouts
work there), with an outer per-call timeout as a backstop.

A grader that cannot grade fails; it never scores 0 (``MathVerifyPool.verify_each``):

* every fresh pool is probed before use; workers that die on start-up raise
  :class:`rlsuite.tasks.base.GraderError` naming the cause and the fix. The usual cause: spawn
  re-imports the main script in every worker, so a script without an
  ``if __name__ == "__main__":`` guard re-runs its run (and starts a pool) in each worker,
  which Python refuses. We raise rather than grade in-process: in-process grading has no
  backstop for a hang (a worker can be killed, the trainer cannot) and math-verify's
  ``signal.alarm`` timeouts only work in the main thread;
* a worker that dies or overruns mid-batch is killed with its pool, and the items of its chunk
  are re-graded one by one in a fresh pool; an item that still kills or hangs its worker, and
  an exception escaping math-verify, is a per-item *grade error* (returned with the reason,
  never a plain "wrong"); ``max_consecutive_failures`` such items in a row with no verdict in
  between raise GraderError (a pool that keeps dying);
* an exception that stops a worker running the grader at all (math-verify not importable)
  raises GraderError.

Argument order is always **gold first**: ``verify(gold, prediction)`` is not symmetric.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import re
import sys
from typing import Optional, Sequence

from rlsuite.tasks.base import GraderError

Verdict = tuple[bool, Optional[str]]
"""``(correct, error)``: ``error`` is None for a real verdict, else why the grader could not grade."""

_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (brace-matched, nested braces kept) or ``\\boxed x``."""
    i = text.rfind("\\boxed")
    if i < 0:
        i = text.rfind("\\fbox")
        if i < 0:
            return None
    j = i + len("\\boxed") if text.startswith("\\boxed", i) else i + len("\\fbox")
    if j < len(text) and text[j] == " ":
        m = re.match(r" ([^\s$]+)", text[j:])
        return m.group(1) if m else None
    if j >= len(text) or text[j] != "{":
        return None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k]
    return None


def last_number(text: str) -> Optional[str]:
    """The last number in ``text`` with thousands separators removed ("1,000" → "1000")."""
    nums = _NUM.findall(text)
    return nums[-1].replace(",", "") if nums else None


def _verify_one(gold: str, pred: str, timeout: int) -> bool:
    from math_verify import parse, verify

    g = parse(gold if "\\boxed" in gold or "$" in gold else f"${gold}$", parsing_timeout=timeout)
    p = parse(pred, parsing_timeout=timeout)
    return bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=timeout))


def _verify_many(pairs: list[tuple[str, str]], timeout: int) -> list[Verdict]:
    import math_verify  # noqa: F401 - not importable: raises in the caller (the pool cannot grade at all)

    out: list[Verdict] = []
    for gold, pred in pairs:
        try:
            out.append((_verify_one(gold, pred, timeout), None))
        except Exception as e:  # noqa: BLE001 - math-verify swallows its own errors; this one is a grader crash
            out.append((False, f"math-verify raised {type(e).__name__}: {str(e)[:200]}"))
    return out


def _ping() -> int:
    return os.getpid()


def _startup_error(detail: str) -> GraderError:
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    script = f" ({main})" if main else ""
    return GraderError(
        f"the math-verify grading pool's worker processes died on start-up ({detail}; their traceback, if any, "
        f"is printed above); the pool uses the spawn start method, so every worker re-imports the main "
        f"script{script}: a script that starts a run or grades must guard its entry point with "
        f"`if __name__ == '__main__':` (module-level code must not start a run, grade or start a pool), "
        f"and the script must import cleanly in a fresh interpreter")


class MathVerifyPool:
    """A lazily started spawn pool for ``verify(gold, pred)`` with timeouts (see the module
    docstring for how failures surface)."""

    start_timeout_s: float = 300.0
    """Seconds a fresh pool may take to answer its start-up probe (workers import the main script)."""
    max_consecutive_failures: int = 8
    """Single items in a row that kill or hang their worker (no verdict between) before GraderError."""
    work = staticmethod(_verify_many)
    """What a worker runs on a chunk, ``(pairs, timeout) → [Verdict]`` (a module-level function)."""

    def __init__(self, workers: int = 1, timeout_s: int = 5, chunk: int = 32) -> None:
        self.workers, self.timeout_s, self.chunk = workers, timeout_s, chunk
        self._pool: Optional[cf.ProcessPoolExecutor] = None

    def _get(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"))
            fut = pool.submit(_ping)
            procs = list(getattr(pool, "_processes", {}).values())
            try:
                fut.result(timeout=self.start_timeout_s)
            except cf.process.BrokenProcessPool:
                codes = []
                for p in procs:
                    p.join(5)
                    codes.append(p.exitcode)
                _kill(pool)
                raise _startup_error("exit code " + ", ".join(str(c) for c in codes) if codes else "no exit code") \
                    from None
            except cf.TimeoutError:
                _kill(pool)
                raise GraderError(f"the math-verify grading pool's workers did not answer a start-up probe within "
                                  f"{self.start_timeout_s:.0f} s (the spawn start method re-imports the main script "
                                  f"in every worker: is its module-level code slow, or not guarded by "
                                  f"`if __name__ == '__main__':`?)") from None
            self._pool = pool
        return self._pool

    def verify_each(self, golds: Sequence[str], preds: Sequence[str]) -> list[Verdict]:
        """``(correct, error)`` per pair (identical pairs are graded once)."""
        pairs = list(zip(golds, preds))
        uniq = list(dict.fromkeys(pairs))
        done: list[Optional[Verdict]] = [None] * len(uniq)
        pending = [(i, uniq[i:i + self.chunk]) for i in range(0, len(uniq), self.chunk)]
        failures = 0  # consecutive single items that killed or hung their worker
        while pending:
            pool = self._get()  # raises GraderError when a fresh pool cannot start
            jobs = [(s, c, pool.submit(self.work, c, self.timeout_s)) for s, c in pending]
            pending = []
            for k, (s, c, fut) in enumerate(jobs):
                try:
                    res = fut.result(timeout=self.timeout_s * (2 * len(c) + 10))
                except (cf.TimeoutError, cf.process.BrokenProcessPool) as e:
                    self.close(kill=True)
                    if len(c) > 1:  # which item? re-grade the chunk's items one by one in a fresh pool
                        pending += [(s + j, [p]) for j, p in enumerate(c)]
                    else:
                        failures += 1
                        why = (f"did not return within {self.timeout_s * 12} s" if isinstance(e, cf.TimeoutError)
                               else "killed its worker process")
                        done[s] = (False, f"math-verify {why} on gold {c[0][0][:60]!r}, prediction "
                                          f"{c[0][1][:60]!r} (worker killed, pool restarted)")
                        if failures >= self.max_consecutive_failures:
                            raise GraderError(f"the math-verify grading pool failed on {failures} items in a row "
                                              f"(last: {done[s][1]}); its workers keep dying or hanging") from None
                    for s2, c2, f2 in jobs[k + 1:]:  # keep what other workers finished, re-queue the rest
                        if f2.done() and not f2.cancelled() and f2.exception() is None:
                            done[s2:s2 + len(c2)] = f2.result()
                        else:
                            pending.append((s2, c2))
                    break
                except Exception as e:  # noqa: BLE001 - the worker could not run the grader at all
                    self.close(kill=True)
                    raise GraderError(f"the math-verify grading pool cannot grade: {type(e).__name__}: {e}") from e
                failures = 0
                done[s:s + len(c)] = res
        verdict = dict(zip(uniq, done))
        return [verdict[p] for p in pairs]  # type: ignore[misc]

    def verify(self, golds: Sequence[str], preds: Sequence[str]) -> list[bool]:
        """Correctness per pair; GraderError when any pair could not be graded."""
        out = self.verify_each(golds, preds)
        errors = [e for _, e in out if e is not None]
        if errors:
            raise GraderError(f"math-verify could not grade {len(errors)} of {len(out)} items (first: {errors[0]})")
        return [ok for ok, _ in out]

    def close(self, kill: bool = False) -> None:
        if self._pool is not None:
            if kill:
                _kill(self._pool)
            else:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _kill(pool: cf.ProcessPoolExecutor) -> None:
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        p.kill()
    pool.shutdown(wait=False, cancel_futures=True)
