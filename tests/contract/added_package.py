"""A copy of the package namespace with one package folder rebuilt, for the tests that add an entry
the documented way (``tests/contract/test_adding_*.py``): the checkout's other packages are linked,
the rebuilt package is a folder of links to this checkout's files plus the files a test writes, and
the contract tests run against that namespace in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")


def namespace(tmp: Path, package: str, files: dict[str, str]) -> Path:
    """A folder whose ``rlsuite`` is this checkout with ``package/`` rebuilt: every file of the
    checkout's ``package/`` linked except those in ``files`` (name → text), which are written."""
    pkg = tmp / "rlsuite"
    (pkg / package).mkdir(parents=True)
    (pkg / "__init__.py").write_text((REPO / "rlsuite" / "__init__.py").read_text())
    for p in PACKAGES:
        if p != package:
            (pkg / p).symlink_to(REPO / p)
    for f in (REPO / package).iterdir():
        if f.name not in files and f.name != "__pycache__":
            (pkg / package / f.name).symlink_to(f)
    for name, text in files.items():
        (pkg / package / name).write_text(text)
    for f in ("tests", "pyproject.toml"):  # run from here: the checkout's own `rlsuite/` must not shadow
        (tmp / f).symlink_to(REPO / f)
    return tmp


def contract_run(ns: Path, select: str, *paths: str) -> subprocess.CompletedProcess:
    """``pytest -k select paths`` (default ``tests/contract``, this helper's callers deselected) in
    ``ns``, one process, one thread."""
    env = {**os.environ, "PYTHONPATH": f"{ns}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    own = [a for f in sorted((REPO / "tests" / "contract").glob("test_adding_*.py"))
           for a in ("--deselect", str(f.relative_to(REPO)))]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-k", select, *(paths or ("tests/contract",)), *own],
                          cwd=ns, env=env, capture_output=True, text=True, timeout=900)
