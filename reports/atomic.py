"""Atomic file writes: write a temporary file beside the target, then rename over it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` atomically (tmp file in the same folder + os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; reports are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write UTF-8 `text` to `path` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))
