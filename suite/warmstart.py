"""The cached supervised warm start: one shared base for every algorithm and seed.

Models built from scratch (``tiny``) get the task's ``warm_start`` before RL. The result is
cached under ``$RLSUITE_CACHE`` (default ``~/.cache/rlsuite``) keyed by the task config and
version, the model, the thread count and the torch version, built under an exclusive file
lock (array jobs on one node build it once) and published atomically (write to a temporary
folder, then rename), so a reader never sees a half-written base.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

WARM_SEED = 0  # the same base for every run of a comparison, whatever its seed


def cache_root() -> Path:
    return Path(os.environ.get("RLSUITE_CACHE", Path.home() / ".cache" / "rlsuite"))


def warm_key(task, model_name: str, num_threads: int) -> str:
    blob = json.dumps({"task": dataclasses.asdict(task.cfg), "task_version": task.version, "model": model_name,
                       "threads": num_threads, "torch": torch.__version__.split("+")[0]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def warm_started(task, model, tokenizer, model_name: str, num_threads: int) -> dict[str, Any]:
    """Load the cached warm start into ``model`` (building it first if needed).

    Returns the warm-start info (steps, check accuracy, cache path), or ``{}`` when the task
    has no warm start.
    """
    folder = cache_root() / "warmstart" / f"{task.name}-{warm_key(task, model_name, num_threads)}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(str(folder) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "info.json").exists():
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(WARM_SEED)
                info = task.warm_start(model, tokenizer, WARM_SEED)
            if info is None:
                return {}
            tmp.mkdir()
            torch.save(model.state_dict(), tmp / "model.pt")
            (tmp / "info.json").write_text(json.dumps(info))
            os.replace(tmp, folder)
            return {**info, "path": str(folder), "cached": False}
    model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
    return {**json.loads((folder / "info.json").read_text()), "path": str(folder), "cached": True}
