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

import importlib.util
import json
import os
import sys
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


DURATIONS = REPO / "tests" / "durations.json"
"""Worker-seconds per xdist group measured on a full run (``RLSUITE_RECORD_DURATIONS=1 python -m
pytest -q`` rewrites it). Only the order of the groups is read from it, so its figures need not
match this machine: the groups are handed out longest first (with ``--no-loadscope-reorder``; the
xdist default orders by the number of tests), so a long serial group (the ranks) starts at once
instead of becoming the run's tail. A group it does not list is costed at the listed groups'
mean seconds per test."""


def _group(item) -> str:
    """The xdist group of a collected item or a test report (anything with a ``nodeid``)."""
    module = item.nodeid.split("::")[0]
    return SERIAL_GROUPS.get(module, module)


def order_by_cost(items: list, cost: dict[str, float]) -> list:
    """``items`` with their groups in decreasing ``cost`` (seconds; a group not in ``cost`` at the
    mean seconds per test of those that are), each group's items contiguous and in their collected
    order; ties keep the collected order."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(_group(item), []).append(item)
    known = [(cost[g], len(v)) for g, v in groups.items() if g in cost]
    per_test = sum(c for c, _ in known) / max(1, sum(n for _, n in known))
    est = {g: cost.get(g, per_test * len(v)) for g, v in groups.items()}
    ranked = sorted(groups, key=lambda g: -est[g])  # stable: ties in collected order
    return [item for g in ranked for item in groups[g]]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    try:
        cost = json.loads(DURATIONS.read_text())["groups"]
    except (OSError, ValueError, KeyError):
        return
    items[:] = order_by_cost(items, cost)


_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Under ``RLSUITE_RECORD_DURATIONS=1``: add up each group's setup, call and teardown seconds
    (in the controller, which receives every worker's reports)."""
    if os.environ.get("RLSUITE_RECORD_DURATIONS") == "1":
        group = _group(report)
        _SPENT[group] = _SPENT.get(group, 0.0) + float(report.duration)


def pytest_sessionfinish(session, exitstatus):
    """Under ``RLSUITE_RECORD_DURATIONS=1``, rewrite :data:`DURATIONS` (the controller, or a
    ``-n 0`` run; never a worker) after a run that collected the whole suite."""
    opt = session.config.option
    chosen = session.config.args_source == pytest.Config.ArgsSource.ARGS  # paths given: not the whole suite
    if os.environ.get("RLSUITE_RECORD_DURATIONS") != "1" or hasattr(session.config, "workerinput") or not _SPENT \
            or chosen or opt.keyword or opt.markexpr:
        return
    import platform

    from rlsuite.suite.runfolder import cpu_model

    doc = {"about": "worker-seconds per xdist group of one full `python -m pytest -q` run (tests/conftest.py "
                    "orders the groups by them, longest first)",
           "cpu": cpu_model() or platform.processor(), "torch": torch.__version__,
           "total_s": round(sum(_SPENT.values()), 1),
           "groups": {g: round(s, 2) for g, s in sorted(_SPENT.items(), key=lambda kv: -kv[1])}}
    DURATIONS.write_text(json.dumps(doc, indent=1) + "\n")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core, at most 8 (each worker holds torch and a model; tests that
    spawn ranks add processes of their own). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def load_script(relpath: str, name: str):
    """A repository script (``benchmarks/...``, ``scripts/...``; path from the repository root) loaded
    as the module ``name`` and registered in ``sys.modules`` (dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / relpath)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


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


@pytest.fixture(autouse=True)
def _base_evals_computed(request, monkeypatch):
    """In-process runs compute their step-0 evals: tests monkeypatch graders, sandboxes and models
    below what the memo's key can see (``eval.cache_base``; its own tests and every subprocess run
    use the memo)."""
    if request.module.__name__.rsplit(".", 1)[-1] != "test_base_eval_cache":
        import rlsuite.suite.eval_stage as eval_stage

        monkeypatch.setattr(eval_stage, "memo_base_eval", lambda parts, compute: (compute(), True))
