"""Studies (``rlsuite/sweeps/study.py``): registration at a commit, compact copies written as runs
finish, skipping what the study folder holds, the code-change refusal, the path-identity check.

The git checks run real git on a temporary repository (``code_root`` points there); the runs
themselves use this checkout's code (the tiny model, one update, ``--cluster debug``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import rlsuite.suite.runner as runner
import rlsuite.sweeps.study as study
from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.sweeps.spec import expand, load

SPEC = """
name: st
tasks: [arith]
algorithms: [grpo, rloo]
seeds: [0]
budget: {updates: 1}
base: none
set: {eval.max_prompts: 4, eval.test_prompts: 4, rollout.prompts_per_step: 2, rollout.group_size: 2}
comparisons: [{a: grpo, b: rloo, direction: greater, smallest_effect: 0.03}]
checks: [{arm: all, signal: adv/mean, op: ">=", value: -1.0}]
score: {per_dataset: false}
"""
REPO = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A git repository with the layout the checks look at, and the study spec committed."""
    r = tmp_path / "repo"
    for f, text in {"suite/a.py": "A = 1\n", "sweeps/x.py": "X = 1\n", "reports/r.py": "R = 1\n",
                    "README.md": "readme\n", "specs/st.yaml": SPEC}.items():
        (r / f).parent.mkdir(parents=True, exist_ok=True)
        (r / f).write_text(text)
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "init")
    monkeypatch.setattr(study, "code_root", lambda: r)
    return r


def register(repo: Path, name: str = "st") -> Path:
    sd = repo / "benchmarks" / "results" / name
    assert main(["sweep", "register", str(repo / "specs" / "st.yaml"), "--out", str(sd)]) == 0
    return sd


def test_register_records_the_commit_run_ids_and_plan_and_refuses_a_dirty_tree(repo, capsys):
    sd = register(repo)
    doc = json.loads((sd / "study.json").read_text())
    runs = expand(load(str(repo / "specs" / "st.yaml")))
    assert doc["commit"] == git(repo, "rev-parse", "HEAD")
    assert [r["run_id"] for r in doc["runs"]] == [r.run_id for r in runs] and len(runs) == 2
    assert doc["spec"] == {"path": "specs/st.yaml", "sha256": study.sha256_file(repo / "specs" / "st.yaml"),
                           "committed": True}
    assert doc["seeds"] == [0] and doc["budget"] == {"updates": 1} and doc["registered_at"]
    assert doc["comparisons"] == [{"a": "grpo", "b": "rloo", "direction": "greater", "smallest_effect": 0.03}]
    assert doc["checks"][0]["signal"] == "adv/mean" and "adv/mean" in doc["compact"]["keep"]
    assert doc["report"] == {"per_dataset": False}  # the score the comparisons are judged by
    assert "registered st at commit" in capsys.readouterr().out
    # never overwritten
    assert main(["sweep", "register", str(repo / "specs" / "st.yaml"), "--out", str(sd)]) == 2
    assert "already exists" in capsys.readouterr().err
    # uncommitted change to a tracked file under suite/: refused, nothing written
    (repo / "suite" / "a.py").write_text("A = 2\n")
    other = repo / "benchmarks" / "results" / "st2"
    assert main(["sweep", "register", str(repo / "specs" / "st.yaml"), "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "suite/a.py" in err and not other.exists()
    (repo / "suite" / "a.py").write_text("A = 1\n")
    # untracked files and changes outside the code folders do not block a registration
    (repo / "suite" / "new.py").write_text("N = 1\n")
    (repo / "README.md").write_text("changed\n")
    assert main(["sweep", "register", str(repo / "specs" / "st.yaml"), "--out", str(other)]) == 0
    # a study folder outside the repository is refused (it would not survive a change of machine)
    assert main(["sweep", "register", str(repo / "specs" / "st.yaml"), "--out", str(repo.parent / "elsewhere")]) == 2
    assert "outside the repository" in capsys.readouterr().err


def test_study_run_copies_each_run_as_it_finishes_and_a_rerun_skips_them(repo, tmp_path, monkeypatch, capsys):
    sd = register(repo)
    dest = sd / "runs" / "st"
    seen: list[tuple[str, set]] = []  # (run id starting, copies present at that moment)
    real = runner.execute

    def spy(spec, out, *a, **k):
        seen.append((spec.run_id, study.copied(dest)))
        return real(spec, out, *a, **k)

    monkeypatch.setattr(runner, "execute", spy)
    assert main(["sweep", "run", "--study", str(sd), "--out", str(tmp_path / "m1"), "--cluster", "debug"]) == 0
    ids = [r["run_id"] for r in json.loads((sd / "study.json").read_text())["runs"]]
    assert [s[0] for s in seen] == ids
    assert seen[1][1] == {ids[0]}  # the first run's copy was there before the second run started
    assert study.copied(dest) == set(ids)
    for rid in ids:
        c = dest / rid
        assert sorted(p.name for p in c.iterdir()) == ["env.json", "evals.jsonl", "metrics.jsonl", "problems.jsonl",
                                                       "spec.json", "status.json"]
        env = json.loads((c / "env.json").read_text())
        assert env["study"]["copied_by"] == "job" and env["study"]["commit"] == env["study"]["registered_commit"]
        assert env["study"]["code_changed"] is False
        row = json.loads((c / "metrics.jsonl").read_text().splitlines()[0])
        keep = set(study.COMPACT_KEEP) | {"adv/mean", "cpu_model"}
        assert "adv/mean" in row and all(k in keep or k.startswith("budget/") for k in row)
    # another machine (a fresh --out): everything is in the study folder, nothing runs
    capsys.readouterr()
    seen.clear()
    assert main(["sweep", "run", "--study", str(sd), "--out", str(tmp_path / "m2"), "--cluster", "debug"]) == 0
    assert "2 of 2 runs already in" in capsys.readouterr().err and not seen
    assert not list((tmp_path / "m2").glob("*/*/spec.json"))
    # one copy missing (its run was interrupted): only that one runs
    import shutil

    shutil.rmtree(dest / ids[1])
    assert main(["sweep", "run", "--study", str(sd), "--out", str(tmp_path / "m2"), "--cluster", "debug"]) == 0
    assert "1 of 2 runs already in" in capsys.readouterr().err and [s[0] for s in seen] == [ids[1]]
    assert study.copied(dest) == set(ids)


def test_study_run_refuses_a_code_change_since_registration_unless_allowed(repo, tmp_path, capsys):
    sd = register(repo)
    reg = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "m"
    (repo / "suite" / "a.py").write_text("A = 2\n")
    git(repo, "commit", "-q", "-am", "change the trainer")
    new = git(repo, "rev-parse", "HEAD")
    assert main(["sweep", "run", "--study", str(sd), "--out", str(out), "--cluster", "debug"]) == 2
    err = capsys.readouterr().err
    assert "differs from the registered commit" in err and "suite/a.py" in err and "--allow-code-change" in err
    assert not out.exists()
    # an uncommitted change counts too
    (repo / "sweeps" / "x.py").write_text("X = 2\n")
    assert main(["sweep", "run", "--study", str(sd), "--out", str(out), "--cluster", "debug"]) == 2
    assert "suite/a.py, sweeps/x.py" in capsys.readouterr().err
    (repo / "sweeps" / "x.py").write_text("X = 1\n")
    # bad input: one clear error each, exit 2
    assert main(["sweep", "run", str(repo / "specs" / "st.yaml"), "--allow-code-change", "--out", str(out)]) == 2
    assert "--allow-code-change needs --study" in capsys.readouterr().err
    assert main(["sweep", "run", "--study", str(tmp_path / "nostudy"), "--out", str(out)]) == 2
    assert "rlsuite sweep register SPEC --out" in capsys.readouterr().err
    changed = tmp_path / "changed.yaml"
    changed.write_text(SPEC.replace("seeds: [0]", "seeds: [0, 1]"))
    assert main(["sweep", "run", str(changed), "--study", str(sd), "--out", str(out), "--allow-code-change"]) == 2
    assert "is not the spec" in capsys.readouterr().err
    # with the flag: runs, and every copy records the commit it ran at
    assert main(["sweep", "run", "--study", str(sd), "--out", str(out), "--cluster", "debug",
                 "--allow-code-change"]) == 0
    copies = sorted((sd / "runs" / "st").iterdir())
    assert len(copies) == 2
    for c in copies:
        meta = json.loads((c / "env.json").read_text())["study"]
        assert meta["commit"] == new and meta["registered_commit"] == reg
        assert meta["code_changed"] is True and meta["changed_files"] == ["suite/a.py"] and meta["allow_code_change"]


def test_a_study_folder_moved_inside_the_repository_still_opens_its_registered_spec(repo):
    """study.json records the spec's path at registration; after the study folder moves (its spec
    beside study.json, as benchmarks/results/<study>/ → benchmarks/<study>/), ``sweep run --study``
    and ``verify`` find the spec by name in the folder, and the sha256 check still refuses another file."""
    old = repo / "benchmarks" / "results" / "st"
    old.mkdir(parents=True)
    (old / "spec.yaml").write_text(SPEC)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "spec")
    assert main(["sweep", "register", str(old / "spec.yaml"), "--out", str(old)]) == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "register")
    new = repo / "benchmarks" / "st"
    git(repo, "mv", str(old), str(new))
    git(repo, "commit", "-q", "-m", "move")
    doc = study.load_study(new)
    assert doc["spec"]["path"] == "benchmarks/results/st/spec.yaml" and not (repo / doc["spec"]["path"]).exists()
    assert study.registered_spec(new, doc, repo) == new / "spec.yaml"
    assert study.prepare_run(new, None, False, repo=repo).spec_path == new / "spec.yaml"
    (new / "spec.yaml").write_text(SPEC.replace("seeds: [0]", "seeds: [1]"))
    with pytest.raises(BadInput, match="is not the spec"):
        study.prepare_run(new, None, False, repo=repo)
    # a spec still at its recorded path is that one, whatever lies in the folder
    assert study.registered_spec(new, {"spec": {"path": "specs/st.yaml"}}, repo) == repo / "specs" / "st.yaml"


def test_first_difference_names_the_first_differing_step_and_key():
    a = [{"step": 1, "time": 1.0, "perf/step_time": 3, "loss/policy": 0.5, "reward/mean": 0.1},
         {"step": 2, "time": 2.0, "loss/policy": 0.25, "reward/mean": 0.2}]
    b = [{"step": 1, "time": 9.0, "perf/step_time": 4, "loss/policy": 0.5, "reward/mean": 0.1},
         {"step": 2, "time": 8.0, "loss/policy": 0.26, "reward/mean": 0.3}]
    assert study.first_difference(a, a[:]) is None
    assert study.first_difference(a[:1], b[:1]) is None  # wall clock and perf/* are not the path
    d = study.first_difference(a, b)
    assert (d["step"], d["key"], d["registered"], d["other"]) == (2, "loss/policy", 0.25, 0.26)
    assert study.first_difference(a, a[:1])["key"] == "<rows>"


@pytest.mark.slow
def test_verify_reports_path_identical_for_unchanged_code(tmp_path, monkeypatch, capsys):
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("this checkout is not a git repository: verify checks out the registered commit")
    clone = tmp_path / "clone"  # the registered commit: this checkout's HEAD, clean
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True)
    monkeypatch.setattr(study, "code_root", lambda: clone)
    spec = clone / "benchmarks" / "results" / "vt" / "spec.yaml"
    spec.parent.mkdir(parents=True)
    text = SPEC.replace("name: st", "name: vt").split("comparisons:")[0]  # keys HEAD's parser knows
    spec.write_text(text.replace("base: none", "base: task").replace("group_size: 2", "group_size: 4"))  # rewards vary
    sd = spec.parent
    assert main(["sweep", "register", str(spec), "--out", str(sd)]) == 0
    capsys.readouterr()
    assert main(["sweep", "verify", str(sd), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["identical"] is True and res["first_difference"] is None and res["rows"] == 2
    assert res["degenerate"] is False
    assert res["registered_commit"] == git(clone, "rev-parse", "HEAD") and res["updates"] == 2
    assert str(tmp_path) not in res["code"]["other"] and "rlsuite-verify-" in res["code"]["registered"]
    assert json.loads((sd / "verify.jsonl").read_text().splitlines()[-1])["identical"] is True
    assert len(git(clone, "worktree", "list").splitlines()) == 1  # the temporary worktree is gone
    assert "path-identical" in study.describe_verify(res)
    # a commit that changes the path (GRPO's advantages scaled by 1.001) is caught at its first step
    grpo = clone / "algorithms" / "grpo.py"
    old = "adv=broadcast_to_tokens(adv, batch.loss_mask)"
    assert old in grpo.read_text()
    grpo.write_text(grpo.read_text().replace(old, "adv=broadcast_to_tokens(adv * 1.001, batch.loss_mask)"))
    git(clone, "commit", "-q", "-am", "scale the advantages")
    assert main(["sweep", "verify", str(sd), "--against", "HEAD"]) == 1
    out = capsys.readouterr().out
    assert "NOT path-identical: first difference at metrics.jsonl row 1 (step 1), key adv/" in out
    assert main(["sweep", "verify", str(sd), "--run-id", "nope"]) == 2
    assert "is not a run of this study" in capsys.readouterr().err
