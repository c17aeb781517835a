"""Algorithm entries. Importing this package registers every built-in entry.

Add an algorithm (three steps, README "Add an algorithm"): write one module here (see ``grpo.py``)
whose class is decorated with ``@register``; write its hand test ``tests/algorithms/test_<name>.py``;
regenerate the catalogue. Every module of this package whose name does not start with ``_`` is
imported below, so no list needs editing. Outside packages use the entry-point group
``rlsuite.algorithms`` instead.
"""

import importlib
import pkgutil

from rlsuite.algorithms.base import ALGORITHMS, AdvOut, AlgoConfig, Algorithm, Behaviour, Context, Group, register

__all__ = ["ALGORITHMS", "AdvOut", "AlgoConfig", "Algorithm", "Behaviour", "Context", "Group", "register"]

NOT_ENTRIES = frozenset({"base"})
"""Modules of this package that hold no entry (imported by the entries that need them)."""


def entry_modules() -> list[str]:
    """The names of this package's entry modules, sorted: every module but ``_*`` and
    :data:`NOT_ENTRIES`."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and m.name not in NOT_ENTRIES)


for _module in entry_modules():
    importlib.import_module(f"{__name__}.{_module}")
