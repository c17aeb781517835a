"""The README is a front door and the documentation site is complete.

* ``README.md`` stays short (≤ 250 lines) and keeps what a newcomer needs: the two set-up commands
  (the second is ``.ci/run``'s test command), one run, one sweep, one report, SLURM, the real model
  and its one-family caveat, the report's columns, adding an algorithm, the layout map, the links.
* Every page of ``docs/`` is in ``mkdocs.yml``'s nav and every nav entry exists (``mkdocs build
  --strict`` checks the links; this runs without mkdocs).
* The ``docs`` extra pins mkdocs, mkdocs-material and mkdocstrings-python, and ``.ci/run`` installs
  it and builds the site strictly before the tests.
* The results index (``docs/results.md``) has a row for every committed results file under
  ``benchmarks/`` (a row may name a folder, which covers what it holds), and names no path that
  does not exist; every study folder ``benchmarks/<study>/`` has a ``README.md`` and a line in
  ``benchmarks/index.md``.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250


def test_readme_setup_is_two_commands_the_second_is_the_ci_test_command():
    setup = README.split("## Set-up (two commands)", 1)[1].split("\n## ", 1)[0]
    first, second = bash_blocks(setup)
    assert "pip install -e" in first and first.endswith("rlsuite quickstart")
    ci_test = next(ln.strip() for ln in CI.splitlines() if ln.strip().startswith("python3 -m pytest"))
    assert second.endswith(ci_test), (second, ci_test)
    for var in ("CI=true", "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false"):
        assert var in second and var.split("=")[0] in CI, var
    # the README's extras are installed by CI too
    extras = re.search(r'pip install -e "\.\[([^\]]+)\]"', first).group(1).split(",")
    ci_extras = re.search(r'pip install -q -e "\.\[([^\]]+)\]"', CI).group(1).split(",")
    assert set(extras) <= set(ci_extras)


def test_readme_keeps_what_a_newcomer_needs():
    for needle in ("rlsuite run --task arith", "rlsuite sweep run", "rlsuite report", "--cluster slurm",
                   "rlsuite models fetch smollm2-135m", "cover one model family",
                   "(docs/reports.md#leaderboard-columns)", "`resolution_floor`", "## Add an algorithm",
                   "python scripts/gen_docs.py", "## Layout", "**`Trainer.step`**", "(docs/extending.md)",
                   "(docs/cli.md)", "(docs/sweeps.md)", "(docs/results.md)"):
        assert needle in " ".join(README.split()), needle  # line breaks are layout, not content


def nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for v in item.values():
                out += nav_pages(v) if isinstance(v, list) else [v]
    return out


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists():
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = nav_pages(cfg["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert set(nav) == pages, {"not in the nav": sorted(pages - set(nav)), "missing": sorted(set(nav) - pages)}
    assert len(nav) == len(set(nav))


def test_the_docs_extra_is_pinned_and_ci_builds_the_site_strictly():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = {re.split(r"==", d)[0]: d for d in extras["docs"]}
    assert set(pins) >= {"mkdocs", "mkdocs-material", "mkdocstrings-python"}
    assert all("==" in d for d in pins.values()), pins
    assert "docs" in re.search(r'pip install -q -e "\.\[([^\]]+)\]"', CI).group(1).split(",")
    build = CI.index("mkdocs build --strict")
    assert build < CI.index("python3 -m pytest"), "the site is built before the tests"
    assert "/site/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


SCRIPT_SUFFIXES = (".py", ".sh")
"""A study's code, not its results: listed in ``benchmarks/index.md``, not in the results index."""


def benchmark_files() -> list[str]:
    """The committed files under ``benchmarks/`` (git's view, so a results file still being written
    is not held against the index; without git, the folder's contents)."""
    try:
        out = subprocess.run(["git", "ls-files", "benchmarks"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if out:
        return out
    return [p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").rglob("*")
            if p.is_file() and not any(part.startswith((".", "__")) for part in p.relative_to(ROOT).parts)]


def results_files() -> set[str]:
    """The committed results under ``benchmarks/``: every file but the scripts, the shared modules,
    the index and the study folders' READMEs."""
    return {f for f in benchmark_files() if not f.endswith(SCRIPT_SUFFIXES) and f != "benchmarks/index.md"
            and not (f.count("/") == 2 and f.endswith("/README.md"))}


def study_folders() -> set[str]:
    return {f.split("/")[1] for f in benchmark_files() if f.count("/") >= 2 and f.split("/")[1] != "results"}


def test_the_results_index_has_a_row_for_every_results_file():
    index = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `((?:benchmarks|tests/fixtures)/[^`]+)` \|", index, re.M))
    have = results_files()
    missing = sorted(f for f in have if not any(f == r or (r.endswith("/") and f.startswith(r)) for r in rows))
    assert not missing, f"docs/results.md has no row for: {missing}"
    absent = sorted(r for r in rows if not (ROOT / r).exists())
    assert not absent, f"docs/results.md lists files that do not exist: {absent}"


def test_every_study_folder_has_a_readme_and_a_line_in_the_benchmarks_index():
    index = (ROOT / "benchmarks" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[`([a-z0-9_]+)/`\]\(\1/README\.md\) \|", index, re.M))
    folders = study_folders()
    assert folders, "no study folder under benchmarks/"
    assert folders == listed, {"not in benchmarks/index.md": sorted(folders - listed),
                               "listed but absent": sorted(listed - folders)}
    assert all((ROOT / "benchmarks" / f / "README.md").is_file() for f in folders), \
        [f for f in folders if not (ROOT / "benchmarks" / f / "README.md").is_file()]
