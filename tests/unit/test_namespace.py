"""One namespace (issue 32 §1-§2): the folders ``suite/``, ``tasks/``, ``algorithms/``, ``sweeps/``,
``reports/`` install as ``rlsuite.suite``, ``rlsuite.tasks``, ...; no code imports a bare top-level
name (a second copy of a module would register every entry twice), no string starts a module by
its bare name (``python -m suite.cli``), and the old shims of the engine split are gone."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")
SKIP = {".git", ".cache", "results", "node_modules", ".venv", ".venv-vllm"}  # .venv-vllm: scripts/vllm_cpu_env.sh
# a module started or imported by its bare name inside a string: a subprocess boot line, `-m`, a patch target
BARE_IN_STRING = re.compile(rf"(?:\b(?:from|import) |-m |^)({'|'.join(PACKAGES)})\.[a-z_]+(?:\.[a-z_]+)*"
                            r"(?: import|$|\s)")


def _sources() -> list[Path]:
    here = Path(__file__).resolve()  # (this file's own examples are bare on purpose)
    return sorted(p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts) and p != here)


def bare_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line name`` of every import, at any depth, whose top-level name is one of PACKAGES, and of
    every string constant that imports or starts one of them by its bare name."""
    out = []
    bare = lambda name: name.split(".")[0] in PACKAGES
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            hits = [a.name for a in node.names if bare(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            hits = [node.module] if bare(node.module) else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" not in node.value:
            m = BARE_IN_STRING.search(node.value)
            hits = [f"string {m.group(0).strip()!r}"] if m and not node.value.endswith((".py", ".md", ".yaml")) else []
        else:
            continue
        out += [f"{path.relative_to(root)}:{node.lineno} {h}" for h in hits]
    return out


def test_bare_import_finder_catches_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import suite\nimport tasks.code as c\nfrom algorithms.base import X\n"
                   "def f():\n    from reports import build\n    import rlsuite.sweeps\n"
                   "BOOT = 'import sys; from suite.cli import main'\nCMD = ['-m', 'tasks.retrieval']\n"
                   "OK = 'suite/config.py'\nNOTE = 'results from tasks in the registry'\n")
    found = bare_imports(src, tmp_path)
    assert [f.split(" ", 1)[1] for f in found] == [
        "suite", "tasks.code", "algorithms.base", "reports", "string 'from suite.cli import'",
        "string 'tasks.retrieval'"], found


def test_no_module_imports_a_bare_top_level_name():
    found = [f for p in _sources() for f in bare_imports(p)]
    assert not found, "import these through rlsuite.: " + "; ".join(found)


def test_the_shims_of_the_engine_split_are_gone():
    for old in ("sampler", "native_decode", "speculative", "vllm_engine"):
        assert not (ROOT / "suite" / f"{old}.py").exists(), old
        assert importlib.util.find_spec(f"rlsuite.suite.{old}") is None, old


def test_pyproject_maps_every_package_folder_under_rlsuite():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    st = cfg["tool"]["setuptools"]
    folders = sorted(str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/**/__init__.py")
                     if p.relative_to(ROOT).parts[0] in PACKAGES)
    want = sorted("rlsuite." + f.replace("/", ".") for f in folders)
    assert sorted(p for p in st["packages"] if p != "rlsuite") == want
    assert {k: v for k, v in st["package-dir"].items() if k != "rlsuite"} == {f"rlsuite.{p}": p for p in PACKAGES}
    assert cfg["project"]["scripts"]["rlsuite"] == "rlsuite.suite.cli:main"


@pytest.mark.parametrize("name", PACKAGES)
def test_installed_package_is_rlsuite_dot_name_and_the_bare_name_is_not_ours(name, tmp_path):
    """From a folder outside the repository (no checkout on sys.path): ``rlsuite.NAME`` resolves to the
    package folder, and a bare ``NAME`` is not the checkout's (it may be someone else's, or absent)."""
    code = (f"import importlib.util, json; s = importlib.util.find_spec('rlsuite.{name}'); "
            f"b = importlib.util.find_spec('{name}'); "
            "print(json.dumps([s and s.origin, b and (b.origin or str(list(b.submodule_search_locations)))]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ours, bare = __import__("json").loads(res.stdout)
    assert ours and Path(ours).parent.name == name and Path(ours).is_file(), ours
    assert bare is None or str(ROOT) not in bare, f"`import {name}` reaches the checkout: {bare}"
