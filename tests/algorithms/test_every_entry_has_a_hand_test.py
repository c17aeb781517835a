"""Every registered algorithm entry has its hand-computed test: ``tests/algorithms/test_<name>.py``
exists and defines at least one test function (step 2 of adding an algorithm). Entries whose
name starts with ``_`` (test fakes) are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

from rlsuite import algorithms  # noqa: F401  (registers the built-in entries)
from rlsuite.algorithms.base import ALGORITHMS

HERE = Path(__file__).resolve().parent


def _test_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test_")]


def missing_hand_tests(folder: Path = HERE) -> list[str]:
    """One line per registered entry without a test file with a test function in ``folder``."""
    out = []
    for name in ALGORITHMS.names():
        if name.startswith("_"):
            continue
        path = folder / f"test_{name}.py"
        rel = f"tests/algorithms/test_{name}.py"
        if not path.is_file():
            out.append(f"{name}: {rel} is missing; add {rel} with a hand-computed example "
                       f"(step 2 of adding an algorithm)")
        elif not _test_functions(path):
            out.append(f"{name}: {rel} defines no test function; add one with a hand-computed example "
                       f"(step 2 of adding an algorithm)")
    return out


def test_every_registered_entry_has_a_hand_test_file():
    missing = missing_hand_tests()
    assert not missing, "entries without a hand test:\n" + "\n".join(missing)


def test_the_check_names_a_missing_file(tmp_path):
    (tmp_path / "test_grpo.py").write_text("def helper():\n    pass\n")
    lines = missing_hand_tests(tmp_path)
    assert len(lines) == len([n for n in ALGORITHMS.names() if not n.startswith("_")])
    assert "grpo: tests/algorithms/test_grpo.py defines no test function" in "\n".join(lines)
    assert ("ppo: tests/algorithms/test_ppo.py is missing; add tests/algorithms/test_ppo.py with a "
            "hand-computed example (step 2 of adding an algorithm)") in lines
