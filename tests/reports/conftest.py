"""Shared fixtures for the reports tests: synthetic run folders and a small, fast config.

Run: python -m pytest tests/reports -q   (add -m "not slow" to skip the slower checks)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlsuite.reports import synthetic


@pytest.fixture(scope="session")
def synthetic_root_ro(tmp_path_factory) -> Path:
    """A shared root: leaderboard + 2x2 ablation + batch sweep, 2 tasks x 3 seeds (do not modify)."""
    root = tmp_path_factory.mktemp("root")
    synthetic.write_root(root, synthetic.default_arms(), ["arith", "gsm"], [0, 1, 2])
    return root


@pytest.fixture()
def synthetic_root(synthetic_root_ro, tmp_path) -> Path:
    """A private copy of the shared root that a test may modify."""
    dst = tmp_path / "root"
    shutil.copytree(synthetic_root_ro, dst)
    return dst
