"""The generated documentation matches the code (``scripts/gen_docs.py``).

One page per registered algorithm entry, the catalogue and the table of where the defaults come
from in ``algorithms/README.md``, the site's copies of ``README.md``, ``algorithms/README.md`` and
``reports/METRICS.md``, and the algorithm block of ``mkdocs.yml``'s nav are written by the script and
committed. A new entry, a changed default, summary or docstring, or an edited source page without a
rerun fails here, naming the command to run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python scripts/gen_docs.py"


def load_gen():
    return load_script("scripts/gen_docs.py", "rlsuite_gen_docs")


@pytest.fixture(scope="module")
def gen():
    return load_gen()


def test_the_committed_generated_docs_are_what_the_script_writes(gen):
    stale = gen.check()
    assert not stale, (f"generated docs out of date: {', '.join(stale)}. Run `{COMMAND}` and commit the "
                       f"files it writes (a new or changed algorithm entry, or an edit of README.md, "
                       f"algorithms/README.md or reports/METRICS.md, needs a rerun)")


def test_every_registered_entry_has_a_page_and_a_catalogue_row(gen):
    from rlsuite.algorithms import ALGORITHMS

    names = [n for n, cls in ALGORITHMS.items() if cls.__module__.startswith("rlsuite.algorithms.")]
    assert len(names) >= 43 and "rerule" in names
    catalogue = (ROOT / "algorithms" / "README.md").read_text(encoding="utf-8")
    block = catalogue.split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]
    for name in names:
        assert (ROOT / "docs" / "algorithms" / f"{name}.md").is_file(), f"no page for {name}: run `{COMMAND}`"
        assert f"[`{name}`](../docs/algorithms/{name}.md)" in block, f"{name} not in the catalogue: run `{COMMAND}`"


def test_every_reconstruction_says_where_its_defaults_come_from(gen):
    """A reconstruction (fidelity ``abstract``/``description``) has a "Source of the defaults" (or
    "Source (…):") paragraph in its module docstring: the catalogue's table quotes it."""
    missing = [name for name, cls in gen.entries()
               if cls.fidelity in ("abstract", "description")
               and not gen.source_of_defaults(cls)[1].startswith("source paragraph")]
    assert not missing, f"reconstructions without a 'Source of the defaults' paragraph: {missing}"


def test_the_defaults_table_shows_each_field_with_the_class_that_sets_it(gen):
    from rlsuite.algorithms import ALGORITHMS

    rows = {r[0]: r for r in gen.field_rows(ALGORITHMS.get("grpo"))}
    assert rows["kl_coef"][1:3] == ("0.04", "GRPOConfig (algorithms/grpo.py)")  # GRPO overrides the base's 0.0
    assert rows["kl_estimator"][1:3] == ('"k3"', "AlgoConfig (algorithms/base.py)")
    assert rows["clip_eps_low"][3] == "ε_low of the clipped ratio."
    assert "name" not in rows


def test_the_source_sentence_is_the_first_of_the_paragraph(gen):
    assert gen.first_sentence("the code (a fork; v1. read). Agree: x. More.") == "the code (a fork; v1. read)."
    assert gen.first_sentence("Li et al. 2026 and e.g. this. Next") == "Li et al. 2026 and e.g. this."
    assert gen.first_sentence("``a. B`` is code. Then") == "``a. B`` is code."


def copy_tree(tmp: Path) -> Path:
    for rel in ("README.md", "algorithms/README.md", "reports/METRICS.md", "mkdocs.yml"):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp / rel)
    shutil.copytree(ROOT / "docs", tmp / "docs")
    return tmp


def test_check_names_the_command_when_a_page_is_stale_or_an_entry_has_none(gen, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gen, "ROOT", copy_tree(tmp_path))
    assert gen.main(["--check"]) == 0
    # an edited generated page
    page = tmp_path / "docs" / "algorithms" / "grpo.md"
    page.write_text(page.read_text(encoding="utf-8") + "hand edit\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/algorithms/grpo.md" in err and f"run `{COMMAND}`" in err
    # a new entry registered without regenerating: its page and its catalogue row are missing
    from rlsuite.algorithms import ALGORITHMS

    real = gen.entries()
    grpo = ALGORITHMS.get("grpo")
    new = type("NewEntry", (grpo,), {"name": "new_entry", "__module__": grpo.__module__})
    monkeypatch.setattr(gen, "entries", lambda: sorted(real + [("new_entry", new)]))
    assert gen.main([]) == 0  # writes everything, the new entry included
    assert (tmp_path / "docs" / "algorithms" / "new_entry.md").is_file()
    assert gen.main(["--check"]) == 0
    monkeypatch.setattr(gen, "entries", lambda: real)
    assert gen.main(["--check"]) == 1  # the entry is gone: its page is left over, the catalogue differs
    err = capsys.readouterr().err
    assert "new_entry.md (no entry generates it: delete it)" in err and "algorithms/README.md" in err


def test_site_copies_rewrite_links_to_pages_and_paths(gen):
    src = "see [the metrics](reports/METRICS.md#2-evaluation-protocols), [cli](docs/cli.md), [x](sweeps/example.yaml)"
    out = gen.rewrite_links(src, "README.md", "docs/index.md")
    assert "[the metrics](reference/metrics.md#2-evaluation-protocols)" in out
    assert "[cli](cli.md)" in out
    assert "x (`sweeps/example.yaml`)" in out
    assert gen.rewrite_links("[`a/b.md`](../a/b.md)", "algorithms/README.md", "docs/algorithms/index.md") == "`a/b.md`"
