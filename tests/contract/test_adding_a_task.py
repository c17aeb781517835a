"""Adding a task the documented way works: the task module of ``docs/extending.md`` ("Adding a task"),
written into ``tasks/`` with the one import line the page asks for, is registered and passes every
task contract.

The test builds a copy of the package namespace in a temporary folder (the other packages linked,
``tasks/`` a folder of links to this checkout's modules plus the page's module, ``tasks/__init__.py``
a copy with the import line added), then runs ``tests/contract`` against it in a subprocess, selected
by the task's name. A variant whose config field changes nothing must fail the live-fields contract,
so this test can fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.contract import added_package
from tests.contract.added_package import REPO
IMPORT = "from rlsuite.tasks import reverse  # noqa: F401"


def page_task() -> str:
    """The python block of the "Adding a task" section of docs/extending.md."""
    page = (REPO / "docs" / "extending.md").read_text()
    section = page.split("## Adding a task", 1)[1].split("\n## ", 1)[0]
    assert IMPORT in section, "the page no longer names the import line this test adds"
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def namespace(tmp: Path, task_source: str) -> Path:
    """A folder whose ``rlsuite`` is this checkout with ``tasks/reverse.py`` added and imported."""
    init = (REPO / "tasks" / "__init__.py").read_text() + IMPORT + "\n"
    return added_package.namespace(tmp, "tasks", {"reverse.py": task_source, "__init__.py": init})


def contract_run(ns: Path):
    return added_package.contract_run(ns, "reverse", "tests/contract/test_tasks_contract.py",
                                      "tests/contract/test_config_ranges.py")


def test_the_pages_task_is_the_one_tested():
    src = page_task()
    assert "@register" in src and 'name = "reverse"' in src
    compile(src, "reverse.py", "exec")


@pytest.mark.slow
def test_a_task_added_as_the_page_says_is_registered_and_passes_the_contracts(tmp_path):
    src = page_task()
    ok = contract_run(namespace(tmp_path / "ok", src))
    tail = (ok.stdout + ok.stderr)[-3000:]
    assert ok.returncode == 0, tail
    passed = int(ok.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 6, tail  # the task was registered and the per-task contracts ran on it
    # the same task whose `length` is ignored (a dead field) breaks the live-fields contract
    dead = src.replace("repeat=self.cfg.length", "repeat=3")
    assert dead != src
    bad = contract_run(namespace(tmp_path / "bad", dead))
    failed = [ln for ln in bad.stdout.splitlines() if ln.startswith("FAILED ")]
    assert bad.returncode == 1 and failed, (bad.stdout + bad.stderr)[-3000:]
    assert all("reverse" in ln and "live" in ln for ln in failed), failed
