"""CLI wiring (issue 17 §4): subcommands registered explicitly, a missing optional extra gives one
message naming it (exit 2), no import cycle between the CLI, the sweeps and the engine; and the
keys moved by the config sections (issue 32 §3)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path


from rlsuite.suite.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_every_subcommand_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    assert set(sub.choices) == set(COMMANDS) >= {"run", "eval", "list", "warmstart", "sweep", "quickstart", "report"}


def test_report_without_the_report_extra_names_it_and_exits_2(monkeypatch, tmp_path, capsys):
    for mod in [m for m in sys.modules if m.split(".")[0] in ("seaborn", "matplotlib")
                or m in ("rlsuite.reports.build", "rlsuite.reports.figures")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "seaborn", None)  # import seaborn raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install -e ".[report]"' in err[0], err


def _top_level_imports(path: Path) -> set[str]:
    """Modules a file imports, at any depth of its code (function-level imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_no_import_cycle_between_cli_sweeps_and_tune():
    mods = ["rlsuite.suite.cli", "rlsuite.sweeps.cli", "rlsuite.sweeps.tune", "rlsuite.sweeps.launch",
            "rlsuite.sweeps.spec", "rlsuite.reports.cli"]
    path = lambda m: ROOT / (m.removeprefix("rlsuite.").replace(".", "/") + ".py")
    graph = {m: {n for n in _top_level_imports(path(m)) if n in mods and n != m} for m in mods}
    assert "rlsuite.suite.cli" not in set().union(*(graph[m] for m in mods if m != "rlsuite.suite.cli")), graph

    def reach(m, seen):
        for n in graph[m]:
            if n not in seen:
                seen.add(n)
                reach(n, seen)
        return seen

    assert not [m for m in mods if m in reach(m, set())], graph


def test_importing_each_cli_module_alone_works_and_the_engine_never_imports_the_cli():
    code = ("import sys; import {m}; print(json.dumps(sorted(k for k in sys.modules "
            "if k.split('.')[:2] in (['rlsuite', 'suite'], ['rlsuite', 'sweeps'], ['rlsuite', 'reports']))))")
    for m in ("rlsuite.sweeps.cli", "rlsuite.sweeps.tune", "rlsuite.suite.cli"):
        res = subprocess.run([sys.executable, "-c", "import json; " + code.format(m=m)], capture_output=True,
                             text=True, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        loaded = json.loads(res.stdout)
        if m != "rlsuite.suite.cli":
            assert "rlsuite.suite.cli" not in loaded, (m, loaded)


def test_an_old_key_is_exit_2_with_one_line_naming_its_new_key(tmp_path, capsys):
    from rlsuite.suite.cli import main

    code = main(["run", "--task", "arith", "--algo", "rloo", "--set", "train.world_size=2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "train.world_size was moved: set dist.world_size instead" in err, err
    assert not any(tmp_path.iterdir())  # nothing written
    cfg = tmp_path / "old.yaml"
    cfg.write_text("train:\n  is_correction: token_tis\nalgo:\n  clip_eps: 0.1\n")
    code = main(["run", "--task", "arith", "--algo", "rloo", "--config", str(cfg), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "train.is_correction was moved: set loss.is_correction instead" in err
    assert "algo.clip_eps was moved: set algo.clip_eps_low and algo.clip_eps_high instead" in err


def test_version_is_the_package_version(capsys):
    import pytest

    import tomllib
    from pathlib import Path

    import rlsuite
    from rlsuite.suite.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert capsys.readouterr().out.strip() == f"rlsuite {rlsuite.__version__}" == f"rlsuite {project['version']}"
