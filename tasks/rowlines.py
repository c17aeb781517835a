"""Line numbers for row-level errors in JSONL files read by :func:`rlsuite.tasks.base.read_jsonl`."""

from __future__ import annotations

from pathlib import Path


def line_of(path: Path, row_index: int) -> int:
    """The 1-based line of the ``row_index``-th non-empty line (``read_jsonl`` skips blank lines)."""
    seen = -1
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                seen += 1
                if seen == row_index:
                    return n
    return 0
