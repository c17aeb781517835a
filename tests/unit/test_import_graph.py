"""No import cycle at any level (issue 32 §6): the graph of ``rlsuite.*`` imports, read from the AST
with function-level imports included, has no cycle. A function-level import that only defers an
optional extra (vllm, wandb, scipy, ...) is an edge to a module outside ``rlsuite`` and cannot close
a cycle; an edge between two ``rlsuite`` modules that must stay is listed in ALLOWED with its reason
(none today)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")

ALLOWED: dict[tuple[str, str], str] = {}
"""(importer, imported) → why this edge may close a cycle. Empty: every cycle is a failure."""


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """``rlsuite.<folder>.<module>`` → its file, for every module of the installed packages."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["rlsuite." + ".".join(parts)] = f
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """importer → {imported rlsuite module: first line}, over every import statement at any depth
    (module level, functions, methods, ``TYPE_CHECKING`` blocks). ``import a.b.c`` and
    ``from a.b import c`` count as an edge to the most specific module that exists (not to the
    parent packages, which Python also runs: a package's ``__init__`` importing its entries is the
    registration pattern, not a cycle)."""

    def known(name: str):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                hit = known(t) if t.startswith("rlsuite.") else None
                if hit and hit != name and (name, hit) not in ALLOWED:
                    edges.setdefault(hit, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _describe(comp: list[str], graph: dict[str, dict[str, int]]) -> str:
    inside = set(comp)
    return "; ".join(f"{a} -> {b} (line {ln})" for a in comp for b, ln in graph[a].items() if b in inside)


def test_the_finder_sees_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "suite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from rlsuite.suite import a  # registration: not an edge back\n")
    (pkg / "a.py").write_text("from rlsuite.suite.b import g\n")
    (pkg / "b.py").write_text("def g():\n    from rlsuite.suite import a\n    return a\n")
    (pkg / "c.py").write_text("from . import a\n")  # relative import, no cycle
    graph = import_graph(modules(tmp_path, ("suite",)))
    assert graph["rlsuite.suite.c"] == {"rlsuite.suite.a": 1}
    assert cycles(graph) == [["rlsuite.suite.a", "rlsuite.suite.b"]]


def test_no_import_cycle_at_any_level():
    graph = import_graph(modules())
    assert len(graph) > 100  # every module was read
    found = cycles(graph)
    assert not found, "import cycles (pass a callable down instead of importing up): " + " | ".join(
        _describe(c, graph) for c in found)
