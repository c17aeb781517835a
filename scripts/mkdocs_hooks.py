"""MkDocs hook (``hooks:`` in ``mkdocs.yml``): lay out the ``rlsuite`` namespace for mkdocstrings.

The repository's folders install as ``rlsuite.suite``, ``rlsuite.tasks``, ... through setuptools'
``package-dir`` (``pyproject.toml``); griffe, which reads the sources for mkdocstrings without
importing them, finds only top-level packages. Before the build this hook writes
``.cache/docs-namespace/rlsuite/`` with symbolic links to ``rlsuite/__init__.py`` and to each folder, so
``::: rlsuite.algorithms.base`` resolves to ``algorithms/base.py`` (``paths`` of the python handler).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = ROOT / ".cache" / "docs-namespace" / "rlsuite"
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=target.is_dir())


def on_startup(**kwargs) -> None:
    NAMESPACE.mkdir(parents=True, exist_ok=True)
    _link(NAMESPACE / "__init__.py", ROOT / "rlsuite" / "__init__.py")
    for name in PACKAGES:
        _link(NAMESPACE / name, ROOT / name)
