"""Progress of long work on stderr: a run's training loop, the warm start's SFT loop, a model
conversion. No third-party dependency.

Modes (``log.progress``; :data:`MODES`): ``bar`` redraws one line in place (``\\r``), at most
every ``redraw_s`` seconds; ``lines`` writes the same text as a plain line at the first update
and then at most every ``every_s`` seconds (``log.progress_every_s``; SLURM logs, captured
output); ``auto`` is ``bar`` when the stream is a terminal (``isatty()``) and ``lines``
otherwise; ``off`` writes nothing. Permanent lines (an eval's result, the end of the work) are
written in every mode but ``off``; in ``bar`` mode the bar is cleared first and redrawn after.

:class:`Printer` does the writing (stream and clock injectable: the tests drive it with a fake
clock); :class:`Meter` counts a loop towards a total (``warm start: 120/4000 steps (3%), …``);
:class:`RunProgress` is the trainer's (budget %, step, reward mean, throughput, ETA, and one
line per eval). Progress goes to stderr only, so the last stdout lines of ``rlsuite run``
(``run_dir: <path>``) are unchanged. Only data-parallel rank 0 prints (the others are ``off``).

:func:`configure` sets the process defaults a :class:`Meter` uses when it is not given a mode
(``rlsuite run`` sets them from ``log.progress`` around the warm start: :func:`using`).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from typing import Any, Callable, Iterator, Optional, TextIO

MODES = ("auto", "bar", "lines", "off")
_DEFAULTS: dict[str, Any] = {"mode": "auto", "every_s": 30.0}


def configure(mode: Optional[str] = None, every_s: Optional[float] = None) -> None:
    """Set this process's default mode and line interval (for :class:`Meter`\\ s built without them)."""
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}; valid: {', '.join(MODES)}")
        _DEFAULTS["mode"] = mode
    if every_s is not None:
        _DEFAULTS["every_s"] = float(every_s)


def defaults() -> tuple[str, float]:
    return _DEFAULTS["mode"], _DEFAULTS["every_s"]


@contextlib.contextmanager
def using(mode: Optional[str] = None, every_s: Optional[float] = None) -> Iterator[None]:
    """:func:`configure` for the duration of a ``with`` block (the previous defaults come back)."""
    saved = dict(_DEFAULTS)
    configure(mode, every_s)
    try:
        yield
    finally:
        _DEFAULTS.update(saved)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def resolve_mode(mode: str, stream: Any) -> str:
    """``bar``, ``lines`` or ``off``: ``auto`` picks by whether ``stream`` is a terminal."""
    if mode not in MODES:
        raise ValueError(f"progress mode {mode!r}; valid: {', '.join(MODES)}")
    if mode == "auto":
        return "bar" if _isatty(stream) else "lines"
    return mode


def fmt_duration(s: Optional[float]) -> str:
    """``12s``, ``3m05s``, ``2h07m``; ``?`` when unknown."""
    if s is None or s != s or s < 0 or s == float("inf"):
        return "?"
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_count(x: float, unit: str = "") -> str:
    """``950``, ``1.2k``, ``3.4M`` (bytes: ``12.3 MB``)."""
    if unit == "B":
        for u, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if abs(x) >= f:
                return f"{x / f:.1f} {u}"
        return f"{x:.0f} B"
    for u, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.1f}{u}"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


class Printer:
    """One progress line on ``stream`` (default: ``sys.stderr`` at the time of each write).

    ``update(text)`` shows the current state: redrawn in place in ``bar`` mode (throttled to
    ``redraw_s``), a plain line in ``lines`` mode (the first one at once, then at most every
    ``every_s``); ``force=True`` skips the throttle. ``note(text)`` writes a permanent line.
    ``clock``: seconds (monotonic), injectable; ``width``: the terminal width of ``bar`` mode
    (default: the terminal's), longer text is cut so that ``\\r`` can redraw it."""

    def __init__(self, mode: Optional[str] = None, every_s: Optional[float] = None, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic, redraw_s: float = 0.2,
                 width: Optional[int] = None) -> None:
        d_mode, d_every = defaults()
        self._stream = stream
        self.mode = resolve_mode(mode if mode is not None else d_mode, self.stream)
        self.every_s = float(every_s if every_s is not None else d_every)
        self.clock, self.redraw_s, self._width = clock, redraw_s, width
        self._last: Optional[float] = None  # when the bar was drawn / a line was written
        self._shown = ""  # the bar's text on screen ("" when none)
        self.text = ""  # the latest state

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def _cut(self, text: str) -> str:
        width = self._width or shutil.get_terminal_size((120, 20)).columns
        return text if len(text) < width else text[: max(1, width - 2)] + "…"

    def _write(self, s: str) -> None:
        try:
            self.stream.write(s)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream never fails the work
            pass

    def _draw(self, text: str) -> None:
        text = self._cut(text)
        pad = " " * max(0, len(self._shown) - len(text))
        self._write("\r" + text + pad)
        self._shown = text

    def update(self, text: str, force: bool = False) -> bool:
        """Show ``text`` as the current state; returns whether it was written."""
        self.text = text
        if not self.active:
            return False
        now = self.clock()
        wait = self.redraw_s if self.mode == "bar" else self.every_s
        if not force and self._last is not None and now - self._last < wait:
            return False
        self._last = now
        if self.mode == "bar":
            self._draw(text)
        else:
            self._write(text + "\n")
        return True

    def note(self, text: str) -> None:
        """A permanent line (the bar, when shown, is cleared first and redrawn below it)."""
        if not self.active:
            return
        if self.mode == "bar" and self._shown:
            self._write("\r" + " " * len(self._shown) + "\r" + text + "\n")
            self._shown = ""
            if self.text:
                self._draw(self.text)
        else:
            self._write(text + "\n")

    def close(self) -> None:
        """End the bar's line (``bar`` mode); a later update starts a new one."""
        if self.mode == "bar" and self._shown:
            self._write("\n")
            self._shown = ""
        self.text = ""


class Meter:
    """Progress of a loop towards ``total`` (``None``: unknown) in ``unit``\\ s, as
    ``<label>: 120/4000 steps (3%), 12.3 steps/s, ETA 5m10s, <note>``; a final line on
    :meth:`close`. ``unit="B"``: bytes, shown as kB/MB/GB. ``delay_s``: nothing is shown
    before the loop has run that long (a short loop prints nothing, its final line included).
    A context manager."""

    def __init__(self, label: str, total: Optional[float] = None, unit: str = "", *, mode: Optional[str] = None,
                 every_s: Optional[float] = None, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic, width: Optional[int] = None,
                 printer: Optional[Printer] = None, delay_s: float = 0.0) -> None:
        self.label, self.total, self.unit, self.delay_s = label, total, unit, delay_s
        self.printer = printer or Printer(mode, every_s, stream, clock, width=width)
        self.clock = self.printer.clock
        self.t0 = self.clock()
        self.done, self.note = 0.0, ""
        self.shown = False  # a line (or the bar) was written

    def _amount(self, x: float) -> str:
        return fmt_count(x, "B") if self.unit == "B" else fmt_count(x)

    def text(self) -> str:
        elapsed = self.clock() - self.t0
        unit = "" if self.unit in ("", "B") else f" {self.unit}"
        parts = [f"{self._amount(self.done)}/{self._amount(self.total)}{unit}" if self.total
                 else f"{self._amount(self.done)}{unit}"]
        if self.total:
            parts[0] += f" ({100 * min(1.0, self.done / self.total):.0f}%)"
        if elapsed > 0 and self.done > 0:
            rate = self.done / elapsed
            num = f"{rate:.1f}" if rate < 1000 else fmt_count(rate)
            per = f"{fmt_count(rate, 'B')}/s" if self.unit == "B" else f"{num} {self.unit or 'it'}/s"
            parts.append(per)
            if self.total:
                parts.append(f"ETA {fmt_duration(max(0.0, self.total - self.done) / rate)}")
        if self.note:
            parts.append(self.note)
        return f"{self.label}: " + ", ".join(parts)

    def update(self, done: float, note: Optional[str] = None, force: bool = False) -> None:
        """The loop has done ``done`` units (absolute); ``note``: shown after the numbers."""
        self.done = float(done)
        if note is not None:
            self.note = note
        if self.clock() - self.t0 >= self.delay_s:
            self.shown = self.printer.update(self.text(), force=force) or self.shown

    def advance(self, n: float = 1, note: Optional[str] = None) -> None:
        self.update(self.done + n, note)

    def close(self, note: Optional[str] = None) -> None:
        """The final line: the numbers and ``done in <elapsed>``."""
        if note is not None:
            self.note = note
        if not self.printer.active or (self.delay_s > 0 and not self.shown):
            return
        self.printer.close()
        self.printer.note(self.text() + f", done in {fmt_duration(self.clock() - self.t0)}")

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.printer.close()


def main_metric(row: dict) -> Optional[tuple[str, float]]:
    """The headline metric of an ``evals.jsonl`` row: ``greedy_acc`` when present, else the first
    ``eval/<task>/<metric>`` value."""
    evals = [(k.split("/", 2)[-1], v) for k, v in row.items() if k.startswith("eval/")
             and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return next(((k, v) for k, v in evals if k == "greedy_acc"), evals[0] if evals else None)


class RunProgress:
    """The trainer's progress (rank 0): after each step ``train 42% step 12 | reward 0.531 | 1.2k tok/s
    32.0 samples/s | ETA 1m23s`` (a bar or periodic lines, ``log.progress``), one line per eval
    (``eval val step 8: greedy_acc 0.412``) and one at the end (``completed at step 16 (100%) in
    1m02s``). Throughput is generated tokens and samples per second of step time (the budget's
    ``wall_s``, evals left out) since this attempt started; the ETA extrapolates the budget's
    progress over the wall-clock time since then (evals included)."""

    def __init__(self, log_cfg, budget, active: bool = True, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic, width: Optional[int] = None) -> None:
        self.budget = budget
        self.printer = Printer(log_cfg.progress if active else "off", log_cfg.progress_every_s, stream, clock,
                               width=width)
        self.clock = clock
        self._t0: Optional[float] = None
        self._p0 = 0.0
        self._c0: dict[str, float] = {}
        self.step = 0

    def start(self, step: int = 0) -> None:
        """This attempt starts at ``step`` (the budget as it is now: resumed or fresh)."""
        self._t0, self._p0, self._c0 = self.clock(), self.budget.progress, dict(self.budget.counters)
        self.step = step

    def text(self, row: Optional[dict] = None) -> str:
        p = self.budget.progress
        parts = [f"{100 * p:.0f}% step {self.step}"]
        if row is not None and isinstance(row.get("reward/mean"), (int, float)):
            parts.append(f"reward {row['reward/mean']:.3f}")
        c = self.budget.counters
        dt = c.get("wall_s", 0.0) - self._c0.get("wall_s", 0.0)
        if dt > 0:
            tok = (c.get("gen_tokens", 0.0) - self._c0.get("gen_tokens", 0.0)) / dt
            smp = (c.get("samples", 0.0) - self._c0.get("samples", 0.0)) / dt
            parts.append(f"{fmt_count(tok)} tok/s {smp:.1f} samples/s")
        eta = None
        if self._t0 is not None and p > self._p0:
            eta = (self.clock() - self._t0) * (1.0 - p) / (p - self._p0)
        parts.append(f"ETA {fmt_duration(eta)}")
        bar = ""
        if self.printer.mode == "bar":
            full = int(round(20 * p))
            bar = "[" + "#" * full + "." * (20 - full) + "] "
        return "train " + bar + " | ".join(parts)

    def on_step(self, row: dict) -> None:
        if self._t0 is None:
            self.start(int(row.get("step", 1)) - 1)
        self.step = int(row.get("step", self.step))
        self.printer.update(self.text(row))

    def on_eval(self, row: dict) -> None:
        m = main_metric(row)
        what = f"{m[0]} {m[1]:.3f}" if m else "no metrics"
        final = " (final)" if row.get("final") else ""
        self.printer.note(f"eval {row.get('split')} step {row.get('step')}: {what}{final}")

    def finish(self, state: str, step: Optional[int] = None) -> None:
        """The end line: the run's state at ``step`` (default: the last step shown)."""
        if step is not None:
            self.step = step
        if not self.printer.active:
            return
        self.printer.close()
        took = fmt_duration(self.clock() - self._t0) if self._t0 is not None else "?"
        self.printer.note(f"{state} at step {self.step} ({100 * self.budget.progress:.0f}% of the budget) in {took}")


__all__ = ["MODES", "Meter", "Printer", "RunProgress", "configure", "using", "fmt_count", "fmt_duration", "main_metric",
           "resolve_mode"]
