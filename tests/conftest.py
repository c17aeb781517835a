"""Shared fixtures. Tests run with one torch thread (two shared cores) and a cache under
``RLSUITE_CACHE`` (default ``.cache/`` in the repo, so the arith warm start is built once).

The README's test command runs the tests in parallel (``-n auto --dist loadgroup``, pytest-xdist,
one torch thread per worker). Every test is put in an ``xdist_group`` (below): its module's, so a
module's fixtures are built on one worker only, or a shared serial group for the tests that start
processes of their own (ranks, SLURM jobs), so that at most one of those runs at a time.

Data tests read ``$RLSUITE_DATA`` (default ``../shared/data``) in place; where it is absent
they skip with the reason, unless ``RLSUITE_REQUIRE_DATA=1`` (CI), which turns the skip into
a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("RLSUITE_CACHE", str(REPO / ".cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


# modules whose tests spawn ranks or whole runs of their own, or submit SLURM jobs: one group each
# (run one after another on one worker, never two at once), the rest per module
SERIAL_GROUPS = {
    "tests/integration/test_data_parallel.py": "ranks",
    "tests/integration/test_fsdp.py": "ranks",
    "tests/sweeps/test_slurm.py": "slurm",
    "tests/sweeps/test_slurm_dp.py": "slurm",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(SERIAL_GROUPS.get(module, module)))


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core, at most 8 (each worker holds torch and a model; tests that
    spawn ranks add processes of their own). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def data_dir(sub: str) -> Path:
    """``$RLSUITE_DATA/<sub>``, or skip (fail under RLSUITE_REQUIRE_DATA=1) when absent."""
    root = Path(os.environ.get("RLSUITE_DATA", REPO.parent / "shared" / "data"))
    path = root / sub
    if not path.exists():
        msg = f"sample data {path} not found: set RLSUITE_DATA to the shared data folder"
        if os.environ.get("RLSUITE_REQUIRE_DATA") == "1":
            pytest.fail(msg + " (RLSUITE_REQUIRE_DATA=1)")
        pytest.skip(msg)
    return path


def require_sandbox() -> None:
    """Code tasks refuse to run without an isolating sandbox layer: skip the calling module (with
    the reason) on such a machine, or fail when RLSUITE_REQUIRE_SANDBOX is set (CI)."""
    from rlsuite.tasks.sandbox import SandboxConfig, SandboxUnavailable, detect

    try:
        detect().choose(SandboxConfig())
    except SandboxUnavailable as e:
        if os.environ.get("RLSUITE_REQUIRE_SANDBOX"):
            pytest.fail(f"{e} (RLSUITE_REQUIRE_SANDBOX)", pytrace=False)
        pytest.skip(str(e), allow_module_level=True)


@pytest.fixture
def gsm8k_dir() -> Path:
    return data_dir("gsm8k")
