"""Documentation references resolve inside the repository.

A user's clone has no `../shared/reference/` folder, so no .py or .md file may cite the
project-internal reference notes (`algorithms.md`, `metrics-and-eval`, `design.md`) or point
into `../shared` / `shared/reference`. The one legitimate `../shared` path is the sample-data
default of `$RLSUITE_DATA`, `../shared/data`, which is exempt. Relative markdown links in
README.md, the in-repo reference docs and the pages of ``docs/`` must point to files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve()

# (?<!\w): `seed_algorithms.md` (a results file) is not `algorithms.md`.
FORBIDDEN = {
    "algorithms.md": re.compile(r"(?<!\w)algorithms\.md"),
    "metrics-and-eval": re.compile(r"metrics-and-eval"),
    "design.md": re.compile(r"(?<!\w)design\.md"),
    "../shared": re.compile(r"\.\./shared"),
    "shared/reference": re.compile(r"shared/reference"),
}
SKIP = {".git", ".venv", ".venv-vllm", "venv", "node_modules", "__pycache__", ".pytest_cache", ".cache"}
"""Folders never scanned: VCS data, environments (``.venv-vllm``: ``scripts/vllm_cpu_env.sh``), caches."""
EXEMPT = "../shared/data"  # the RLSUITE_DATA default (code, tests, README, .ci)

DOCS = ("README.md", "algorithms/README.md", "reports/METRICS.md", "benchmarks/index.md", "tests/fixtures/README.md",
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").glob("*/README.md")),
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")))
"""The in-repository docs: the pages above (the benchmarks' index and each study folder's README, the
fixtures' README) and every page of the documentation site (``docs/``)."""
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _files() -> list[Path]:
    out = []
    for p in sorted(ROOT.rglob("*")):
        rel = p.relative_to(ROOT).parts
        if SKIP & set(rel) or any(part.endswith(".egg-info") for part in rel) or not p.is_file():
            continue
        if p.suffix in (".py", ".md", ".yaml") and p.resolve() != SELF:
            out.append(p)
    return out


def test_scan_sees_the_repository():
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"README.md", "suite/aggregation.py", *DOCS} <= names


def test_no_references_a_clone_cannot_follow():
    hits = []
    for p in _files():
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            text = line.replace(EXEMPT, "")
            for name, pat in FORBIDDEN.items():
                if pat.search(text):
                    hits.append(f"{p.relative_to(ROOT)}:{n}: cites {name!r}: {line.strip()[:120]}")
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_exemption_is_exactly_the_data_default():
    assert not FORBIDDEN["../shared"].search("default ../shared/data".replace(EXEMPT, ""))
    assert FORBIDDEN["../shared"].search("see ../shared/reference/x".replace(EXEMPT, ""))
    assert FORBIDDEN["../shared"].search("../shared/design".replace(EXEMPT, ""))
    assert not FORBIDDEN["algorithms.md"].search("benchmarks/results/seed_algorithms.md")
    assert FORBIDDEN["algorithms.md"].search("reference/algorithms.md §9")


@pytest.mark.parametrize("doc", DOCS)
def test_relative_markdown_links_resolve(doc):
    path = ROOT / doc
    assert path.is_file(), f"{doc} is missing"
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (http:, mailto:, …) or an anchor in the same file
        file_part = target.split("#", 1)[0]
        if not (path.parent / file_part).exists():
            broken.append(target)
    assert not broken, f"{doc}: links to missing files: {broken}"
