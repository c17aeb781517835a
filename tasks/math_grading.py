"""Answer extraction and math-verify grading in worker processes.

math-verify's timeouts use ``signal.alarm`` and only work in a process's main thread, and
forking after torch has started threads is unsafe; so grading runs in a *spawn*-context
process pool whose workers call ``parse``/``verify`` in their main thread (its own timeouts
work there), with an outer per-call timeout as a backstop: a worker that overruns is killed
with its pool, the item scores 0 and a fresh pool is started.

Argument order is always **gold first**: ``verify(gold, prediction)`` is not symmetric.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import re
from typing import Optional, Sequence

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


def _verify_many(pairs: list[tuple[str, str]], timeout: int) -> list[bool]:
    out = []
    for gold, pred in pairs:
        try:
            out.append(_verify_one(gold, pred, timeout))
        except Exception:  # noqa: BLE001 - a grader crash on hostile output scores 0
            out.append(False)
    return out


class MathVerifyPool:
    """A lazily started spawn pool for ``verify(gold, pred)`` with timeouts."""

    def __init__(self, workers: int = 1, timeout_s: int = 5, chunk: int = 32) -> None:
        self.workers, self.timeout_s, self.chunk = workers, timeout_s, chunk
        self._pool: Optional[cf.ProcessPoolExecutor] = None

    def _get(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"))
        return self._pool

    def verify(self, golds: Sequence[str], preds: Sequence[str]) -> list[bool]:
        pairs = list(zip(golds, preds))
        chunks = [pairs[i:i + self.chunk] for i in range(0, len(pairs), self.chunk)]
        futures = [self._get().submit(_verify_many, c, self.timeout_s) for c in chunks]
        out: list[bool] = []
        for c, fut in zip(chunks, futures):
            try:
                out += fut.result(timeout=self.timeout_s * (2 * len(c) + 10))
            except (cf.TimeoutError, cf.process.BrokenProcessPool):
                self.close(kill=True)
                out += [False] * len(c)
        return out

    def close(self, kill: bool = False) -> None:
        if self._pool is not None:
            if kill:
                for p in list(getattr(self._pool, "_processes", {}).values()):
                    p.kill()
            self._pool.shutdown(wait=not kill, cancel_futures=True)
            self._pool = None
