"""Build-once caches shared by processes: a folder built under an exclusive file lock and
published atomically, so array jobs on one node build it once and a reader never sees half of it.
Used by the locally built warm-start bases (``suite/warmstart.py``) and the BM25 indexes
(``tasks/retrieval.py``)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Optional


def cache_root() -> Path:
    """``$RLSUITE_CACHE`` (default ``~/.cache/rlsuite``): the root of every build-once cache."""
    return Path(os.environ.get("RLSUITE_CACHE", Path.home() / ".cache" / "rlsuite"))


def build_once(folder: Path, build: Callable[[Path], Optional[dict]]) -> tuple[Optional[dict], bool]:
    """Return ``(info, built)``: the ``info.json`` of ``folder``, building it first when missing.

    ``build(tmp)`` writes the artefacts into the empty folder ``tmp`` and returns the info to
    publish (``None``: nothing to cache; nothing is published and ``(None, True)`` comes back).
    The build runs under an exclusive ``flock`` on ``<folder>.lock``; ``tmp`` is renamed onto
    ``folder`` in one step.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(str(folder) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "info.json").exists():
            return json.loads((folder / "info.json").read_text()), False
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            info = build(tmp)
            if info is None:
                return None, True
            (tmp / "info.json").write_text(json.dumps(info))
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return info, True
