"""Studies that survive interruption and a change of machine: pre-registration at a commit,
compact run copies written into the repository as runs finish, and the path-identity check
before runs done at different code are pooled.

A *study folder* lies inside the repository (``benchmarks/<study>/``) and holds:

``study.json``  the registration (:func:`register`): the git commit (HEAD; refused while tracked
                files under :data:`REGISTER_PATHS` have uncommitted changes), the spec file's
                path and sha256, the expanded run ids, seeds, budget, the planned
                ``comparisons`` and ``checks``, report score settings (when the spec has any),
                the metrics the compact copies keep, and a timestamp. Never overwritten.
``runs/<sweep>/<run_id>/``  one compact copy per finished (``completed`` or ``diverged``) run
                (:func:`compact_copy`): ``spec.json``, ``status.json``, ``env.json`` and
                ``evals.jsonl`` whole, ``metrics.jsonl`` cut to :data:`COMPACT_KEEP`, the checks'
                signals and the ``budget/`` counters (the format of ``benchmarks/effects/effects.py
                export``); ``env.json`` gains a ``study`` block: the registered commit, the commit
                the run finished at, whether the run code differed from the registered one and
                who wrote the copy. Written by the sweep job itself the moment its run finishes
                (``rlsuite sweep run --study``), under a temporary name renamed into place, so
                a copy is whole or absent. ``rlsuite report STUDY/runs/<sweep>`` reads them.
``verify.jsonl`` one row per :func:`verify` (path-identity check).

``rlsuite sweep run --study STUDY`` skips every run id whose copy is already there, refuses
(exit 2) when the code that decides the runs (:data:`RUN_PATHS`) differs from the registered
commit unless ``--allow-code-change`` (each copy then records the commit it ran at), and refuses
finished runs in ``--out`` that began before the registration.

:func:`verify` (``rlsuite sweep verify STUDY``) is the light check before pooling runs done at
another commit (the model: ``benchmarks/reference_runs/reference_runs.py``, bit-identical
``metrics.jsonl`` before and after): one reference run id of the study at a short budget (``budget.updates=2``),
run at the registered commit (a ``git worktree`` in a temporary folder, imported through a
``PYTHONPATH`` that maps its folders into the ``rlsuite`` namespace) and at the current code;
``path-identical`` when every ``metrics.jsonl`` and ``evals.jsonl`` row agrees exactly
(``perf/*`` and wall-clock fields excluded), else the first differing step and key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.suite.runfolder import atomic_write_json, dumps, now_iso, read_json, read_jsonl

SCHEMA = 1
STUDY_FILE = "study.json"
VERIFY_FILE = "verify.jsonl"
REGISTER_PATHS = ("suite", "algorithms", "tasks", "sweeps", "reports")
"""Registration refuses uncommitted changes to tracked files here (code that would change the runs
or their analysis)."""
RUN_PATHS = ("suite", "algorithms", "tasks", "sweeps/*.py")
"""The code that decides what a run computes: ``sweep run --study`` compares it with the registered
commit (``git diff --name-only COMMIT -- RUN_PATHS``: commits since and uncommitted changes)."""
COMPACT_KEEP = ("step", "time", "reward/mean", "reward/std", "len/response_mean", "len/correct_mean",
                "len/wrong_mean", "len/truncated_frac", "stats/entropy", "stats/grad_norm", "stats/kl_ref",
                "group/mixed_frac", "perf/step_time", "perf/rollout_time", "perf/train_time", "stats/clip_frac",
                "stats/approx_kl", "stability/nonfinite", "loss/policy")
"""The metrics a compact copy keeps (``benchmarks/effects/effects.py``'s ``KEEP``), besides the checks'
signals and the keys starting with a kept prefix (``budget/`` always)."""
FINISHED = ("completed", "diverged")
WALL_KEYS = frozenset({"budget/wall_s", "time", "t", "wall_s", "timestamp"})
"""Wall-clock fields left out of the path-identity comparison (with every ``perf/*`` key)."""
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")


def code_root() -> Path:
    """The checkout this code runs from (the repository a study is registered in)."""
    return Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------
# git


def _git(repo: Path, *args: str, check: bool = True) -> str:
    try:
        res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise BadInput(f"git is needed for a study (git {' '.join(args)}: {e})") from None
    if check and res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise BadInput(f"git {' '.join(args)} failed in {repo}: {msg[-1] if msg else f'exit {res.returncode}'}")
    return res.stdout if res.returncode == 0 else ""


def head(repo: Path) -> str:
    """HEAD's full commit id; BadInput outside a git checkout."""
    out = _git(repo, "rev-parse", "--verify", "HEAD", check=False).strip()
    if not out:
        raise BadInput(f"{repo} is not a git checkout with a commit: a study is registered at a git commit")
    return out


def dirty_files(repo: Path, paths: Sequence[str] = REGISTER_PATHS) -> list[str]:
    """``git status --porcelain`` lines of tracked files under ``paths`` with uncommitted changes."""
    out = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", *paths)
    return [line for line in out.splitlines() if line.strip()]


def has_commit(repo: Path, commit: str) -> bool:
    return bool(commit) and bool(_git(repo, "cat-file", "-t", f"{commit}^{{commit}}", check=False).strip())


def changed_since(repo: Path, commit: str, paths: Sequence[str] = RUN_PATHS, to: Optional[str] = None) -> list[str]:
    """Files under ``paths`` that differ between ``commit`` and the working tree (tracked files:
    commits since and uncommitted changes), or between ``commit`` and ``to``."""
    if not has_commit(repo, commit):
        raise BadInput(f"commit {commit} is not in {repo}: fetch it (git fetch) or clone the full history")
    rev = [commit] if to is None else [commit, to]
    return [f for f in _git(repo, "diff", "--name-only", *rev, "--", *paths).splitlines() if f.strip()]


def _inside(path: Path, root: Path) -> Optional[Path]:
    try:
        return path.resolve().relative_to(root.resolve())
    except ValueError:
        return None


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------
# registration


def register(spec_ref: str, study_dir: Path, keep_prefixes: Sequence[str] = (), repo: Optional[Path] = None) -> Path:
    """Write ``study_dir/study.json`` (see the module docstring); returns its path. BadInput (exit 2,
    nothing written) for a dirty tree, a folder outside the repository or already registered."""
    from rlsuite.sweeps.spec import as_dict, expand, load, resolve_path

    repo = Path(repo or code_root())
    study_dir = Path(study_dir)
    commit = head(repo)
    if _inside(study_dir, repo) is None:
        raise BadInput(f"--out {study_dir} is outside the repository {repo}: only what is committed there survives a "
                       f"change of machine; give a folder inside it, e.g. benchmarks/<study>")
    target = study_dir / STUDY_FILE
    if target.exists():
        old = read_json(target) or {}
        raise BadInput(f"{target} already exists (registered at commit {str(old.get('commit'))[:12]} on "
                       f"{old.get('registered_at')}); a registration is never overwritten: give another --out")
    dirty = dirty_files(repo, REGISTER_PATHS)
    if dirty:
        shown = "\n".join(f"    {d}" for d in dirty[:20])
        shown += f"\n    ... {len(dirty) - 20} more" if len(dirty) > 20 else ""
        raise BadInput(f"refusing to register at {commit[:12]}: the working tree has uncommitted changes to tracked "
                       f"files under {', '.join(f'{p}/' for p in REGISTER_PATHS)} (code that would change the runs):\n"
                       f"{shown}\n  commit them first (a study records the commit its runs are done at)")
    spec_path = resolve_path(spec_ref)
    sweep = load(spec_ref)
    runs = expand(sweep)
    rel = _inside(spec_path, repo)
    committed = rel is not None and bool(_git(repo, "ls-files", "--", str(rel)).strip()) \
        and not _git(repo, "status", "--porcelain", "--", str(rel)).strip()
    if not committed:
        print(f"note: the spec {spec_path} is not committed unchanged at {commit[:12]}; commit it beside "
              f"{target} (study.json records its sha256)", file=sys.stderr)
    keep = list(dict.fromkeys([*COMPACT_KEEP, *(c.signal for c in sweep.checks)]))
    doc = {
        "schema": SCHEMA, "name": sweep.name, "registered_at": now_iso(), "registered_unix": time.time(),
        "commit": commit, "run_paths": list(RUN_PATHS),
        "spec": {"path": str(rel) if rel is not None else str(spec_path.resolve()), "sha256": sha256_file(spec_path),
                 "committed": committed},
        "seeds": list(sweep.seeds), "budget": dict(sweep.budget), "model": sweep.model,
        "comparisons": [dataclasses.asdict(c) for c in sweep.comparisons],
        "checks": [dataclasses.asdict(c) for c in sweep.checks],
        "report": dict(sweep.score) or None,  # the spec's `score`: how the comparisons are judged
        "compact": {"keep": keep, "keep_prefixes": list(dict.fromkeys(["budget/", *keep_prefixes]))},
        "runs": [{"run_id": r.run_id, "task": r.task.name, "algo": r.algo.name, "seed": r.seed, "variant": r.variant,
                  "factors": r.factors} for r in runs],
        "sweep": as_dict(sweep),
    }
    study_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(target, doc)
    return target


def load_study(study_dir: Path) -> dict:
    path = Path(study_dir) / STUDY_FILE
    doc = read_json(path)
    if doc is None:
        what = "is not a folder" if not Path(study_dir).is_dir() else f"has no readable {STUDY_FILE}"
        raise BadInput(f"--study {study_dir} {what}; register a study first: rlsuite sweep register SPEC --out "
                       f"{study_dir}")
    missing = [k for k in ("schema", "name", "commit", "spec", "runs", "compact") if k not in doc]
    if missing or doc.get("schema") != SCHEMA:
        raise BadInput(f"{path}: not a study registration of schema {SCHEMA} (missing {', '.join(missing) or '-'}, "
                       f"schema {doc.get('schema')!r})")
    return doc


def copies_dir(study_dir: Path, study: dict) -> Path:
    """Where the compact copies go: ``STUDY/runs/<sweep name>/`` (``rlsuite report`` reads it)."""
    return Path(study_dir) / "runs" / study["name"]


def copied(dest: Path) -> set[str]:
    """Run ids with a (whole) compact copy under ``dest``."""
    if not dest.is_dir():
        return set()
    return {p.name for p in dest.iterdir() if not p.name.startswith(".") and (p / "status.json").is_file()}


# ---------------------------------------------------------------------------------------
# compact copies


def compact_copy(src: Path, dest: Path, keep: Sequence[str] = COMPACT_KEEP, keep_prefixes: Sequence[str] = ("budget/",),
                 study_meta: Optional[dict] = None) -> bool:
    """Copy the run folder ``src`` compactly to ``dest`` (``benchmarks/effects/effects.py export``'s format:
    spec/status/env/evals whole, metrics cut to ``keep`` and ``keep_prefixes``, every file and row
    naming the CPU model; no samples, no weights), ``study_meta`` as ``env.json``'s ``study``.
    Written under a temporary name and renamed into place; False (nothing written) when ``dest``
    exists already."""
    from rlsuite.suite.runfolder import _fsync_path, cpu_model

    src, dest = Path(src), Path(dest)
    if dest.exists():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    keep, prefixes = set(keep), tuple(keep_prefixes)
    try:
        env = read_json(src / "env.json") or {}
        cpu = env.get("cpu_model") or cpu_model()
        for name in ("spec.json", "status.json", "env.json"):
            doc = read_json(src / name)
            if doc is None and name != "env.json":
                raise BadInput(f"{src / name}: missing or unreadable; not a finished run folder")
            doc = doc or {}
            doc.setdefault("cpu_model", cpu)
            if name == "env.json" and study_meta is not None:
                doc["study"] = study_meta
            (tmp / name).write_text(json.dumps(doc, indent=1, default=str) + "\n")
        for name, cut in (("evals.jsonl", False), ("metrics.jsonl", True), ("problems.jsonl", False)):
            if name == "problems.jsonl" and not (src / name).exists():
                continue  # runs written before per-problem results existed
            with open(tmp / name, "w", encoding="utf-8") as g:
                for row in read_jsonl(src / name):
                    if cut:
                        row = {k: v for k, v in row.items() if k in keep or k.startswith(prefixes)}
                    g.write(dumps({**row, "cpu_model": cpu}) + "\n")
        for f in tmp.iterdir():
            _fsync_path(f)
        _fsync_path(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:  # another writer put it there first (a rename onto a non-empty folder fails)
            if dest.exists():
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            raise
        _fsync_path(dest.parent)
        return True
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_finished_run(info: dict, run_dir: Path, copied_by: str = "job") -> Optional[Path]:
    """The sweep job's hook (:class:`rlsuite.sweeps.launch.SweepJob`): the compact copy of a
    finished run into the study, the moment it finishes. ``info``: :meth:`StudyRun.job_info`."""
    st = read_json(Path(run_dir) / "status.json") or {}
    if st.get("state") not in FINISHED:
        return None
    dest = Path(info["dest"]) / Path(run_dir).name
    meta = {**info["meta"], "copied_by": copied_by, "copied_at": now_iso()}
    compact_copy(run_dir, dest, info["keep"], info["keep_prefixes"], meta)
    return dest


def _first_time(run_dir: Path) -> Optional[float]:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    t = rows[0].get("time") if rows else None
    return float(t) if isinstance(t, (int, float)) else None


@dataclasses.dataclass
class StudyRun:
    """A study opened for ``sweep run --study`` (:func:`prepare_run`)."""

    dir: Path
    study: dict
    spec_path: Path
    repo: Path
    commit: str
    changed: list[str]
    dirty: bool
    allow_code_change: bool

    @property
    def dest(self) -> Path:
        return copies_dir(self.dir, self.study)

    @property
    def meta(self) -> dict:
        """What each copy records about the code it ran at (``env.json``'s ``study``)."""
        return {"study": self.study["name"], "registered_commit": self.study["commit"], "commit": self.commit,
                "dirty": self.dirty, "code_changed": bool(self.changed), "changed_files": self.changed[:50],
                "allow_code_change": self.allow_code_change}

    def job_info(self) -> dict:
        c = self.study["compact"]
        return {"dest": str(self.dest), "keep": list(c["keep"]), "keep_prefixes": list(c["keep_prefixes"]),
                "meta": self.meta}

    def check_runs(self, runs: list) -> None:
        """The spec must still expand to the registered run ids."""
        reg = [r["run_id"] for r in self.study["runs"]]
        now = [r.run_id for r in runs]
        if set(reg) != set(now):
            new, gone = sorted(set(now) - set(reg)), sorted(set(reg) - set(now))
            raise BadInput(f"the spec now expands to other run ids than {self.dir / STUDY_FILE} registered "
                           f"({len(new)} new, e.g. {', '.join(new[:3]) or '-'}; {len(gone)} registered ones gone, "
                           f"e.g. {', '.join(gone[:3]) or '-'}): what the runs are has changed; register a new study")

    def split(self, runs: list) -> tuple[list, list[str]]:
        """(runs still to do, run ids whose copy is already in the study folder)."""
        have = copied(self.dest)
        return [r for r in runs if r.run_id not in have], sorted(r.run_id for r in runs if r.run_id in have)

    def check_found(self, root: Path, runs: list) -> None:
        """Refuse run folders in ``root`` without a copy that began before the registration, or (without
        ``--allow-code-change``) finished ones done at other code: they must not enter the study."""
        reg_t = float(self.study.get("registered_unix") or 0)
        early, other = [], []
        for r in runs:
            d = root / r.run_id
            t = _first_time(d)
            if t is not None and t < reg_t:
                early.append(r.run_id)
            elif not self.allow_code_change and (read_json(d / "status.json") or {}).get("state") in FINISHED:
                if self._env_meta(d)["code_changed"] is not False:
                    other.append(r.run_id)
        problems = []
        if early:
            problems.append(f"{len(early)} run folder(s) in {root} began before the study was registered "
                            f"({self.study.get('registered_at')}), e.g. {', '.join(early[:3])}: a pre-registered "
                            f"study counts only runs started after its registration; use another --out")
        if other:
            problems.append(f"{len(other)} finished run folder(s) in {root} have no copy in the study and ran at code "
                            f"other than the registered commit {self.study['commit'][:12]} (or unknown code), e.g. "
                            f"{', '.join(other[:3])}; use another --out, or --allow-code-change to pool them (each "
                            f"copy records its commit)")
        if problems:
            raise BadInput(problems)

    def _env_meta(self, run_dir: Path) -> dict:
        """The study block of a run found finished (not run by this invocation): its own env.json's commit."""
        env = read_json(run_dir / "env.json") or {}
        commit = env.get("git_commit")
        try:
            changed: Optional[list[str]] = changed_since(self.repo, self.study["commit"], RUN_PATHS, commit) \
                if commit else None
        except BadInput:
            changed = None  # a commit this clone does not have
        return {"study": self.study["name"], "registered_commit": self.study["commit"], "commit": commit,
                "dirty": env.get("git_dirty"), "code_changed": None if changed is None else bool(changed),
                "changed_files": (changed or [])[:50], "allow_code_change": self.allow_code_change}

    def copy_finished(self, root: Path, runs: list, launched: set[str]) -> int:
        """Copy every finished run of ``root`` that has no copy yet (a job that stopped between its
        run's end and the copy, a run finished before this invocation). Returns how many."""
        have, n = copied(self.dest), 0
        c = self.study["compact"]
        for r in runs:
            d = root / r.run_id
            if r.run_id in have or (read_json(d / "status.json") or {}).get("state") not in FINISHED:
                continue
            meta = self.meta if r.run_id in launched else self._env_meta(d)
            n += compact_copy(d, self.dest / r.run_id, c["keep"], c["keep_prefixes"],
                              {**meta, "copied_by": "launcher", "copied_at": now_iso()})
        return n


def registered_spec(study_dir: Path, study: dict, repo: Path) -> Path:
    """The spec file ``study.json`` registered: at the path it records (from the repository root),
    or, where that file is gone because the study folder moved inside the repository since (e.g.
    ``benchmarks/results/<study>/`` → ``benchmarks/<study>/``), the file of the same name in the
    study folder. The callers' sha256 check decides whether it is the registered spec."""
    reg = Path(study["spec"]["path"])
    reg = reg if reg.is_absolute() else Path(repo) / reg
    beside = Path(study_dir) / reg.name
    return beside if not reg.is_file() and beside.is_file() else reg


def prepare_run(study_dir: Path, spec_ref: Optional[str], allow_code_change: bool,
                repo: Optional[Path] = None) -> StudyRun:
    """Open a study for ``sweep run --study``: the spec (``spec_ref`` or the registered one) must be
    the registered file (sha256), and the run code (:data:`RUN_PATHS`) the registered commit's
    unless ``allow_code_change``. BadInput (exit 2) otherwise."""
    from rlsuite.sweeps.spec import resolve_path

    repo = Path(repo or code_root())
    study = load_study(study_dir)
    spec_path = resolve_path(spec_ref) if spec_ref else registered_spec(study_dir, study, repo)
    if not spec_path.is_file():
        raise BadInput(f"the study's spec {spec_path} is missing; give SPEC (the registered one, sha256 "
                       f"{study['spec']['sha256'][:12]})")
    sha = sha256_file(spec_path)
    if sha != study["spec"]["sha256"]:
        raise BadInput(f"{spec_path} (sha256 {sha[:12]}) is not the spec {study_dir}/{STUDY_FILE} registered "
                       f"({study['spec']['path']}, sha256 {study['spec']['sha256'][:12]}); a registered study runs "
                       f"its registered spec: register a new study for a changed one")
    commit = head(repo)
    changed = changed_since(repo, study["commit"], RUN_PATHS)
    if changed and not allow_code_change:
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        raise BadInput(f"the code that decides the runs differs from the registered commit {study['commit'][:12]} "
                       f"(HEAD {commit[:12]}; changed: {shown}); check out {study['commit'][:12]}, or give "
                       f"--allow-code-change to run at this code (each copy records its commit; check the paths "
                       f"with: rlsuite sweep verify {study_dir})")
    return StudyRun(Path(study_dir), study, spec_path, repo, commit, changed,
                    bool(dirty_files(repo, RUN_PATHS)), allow_code_change)


# ---------------------------------------------------------------------------------------
# path identity


_DRIVER = r"""
import dataclasses, json, sys
from pathlib import Path
a = json.loads(sys.argv[1])
import torch
from rlsuite.sweeps.spec import expand, load
from rlsuite.suite.config import resolve_threads
from rlsuite.suite.runner import execute
import rlsuite
sweep = load(a["spec"])
ids = [r.run_id for r in expand(sweep)]
res = {"code_from": str(Path(rlsuite.__file__).resolve().parent.parent), "ids": len(ids)}
if a["run_id"] not in ids:
    print("RESULT " + json.dumps({**res, "missing": True, "example": ids[:3]}))
    sys.exit(0)
i = ids.index(a["run_id"])
short = dataclasses.replace(sweep, budget={"updates": a["updates"]}, set={**sweep.set, **a["set"]})
run = expand(short)[i]
torch.set_num_threads(resolve_threads(run.train.num_threads))
code, d = execute(run, Path(a["out"]))
print("RESULT " + json.dumps({**res, "exit": code, "run_dir": str(d), "short_run_id": run.run_id}))
"""


def namespace_path(src: Path, tmp: Path) -> str:
    """A PYTHONPATH under which ``import rlsuite.*`` reads the checkout ``src`` (its folders mapped
    into the namespace as its pyproject maps them; ``benchmarks/reference_runs/reference_runs.py``'s
    ``before_path``)."""
    pkg = tmp / "rlsuite"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text((src / "rlsuite" / "__init__.py").read_text())
    for p in PACKAGES:
        if (src / p).is_dir() and not (pkg / p).is_symlink():
            (pkg / p).symlink_to(src / p)
    return str(tmp)


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("perf/") and k not in WALL_KEYS} for r in rows]


def first_difference(a: list[dict], b: list[dict]) -> Optional[dict]:
    """The first row (in order) where two runs' rows differ and its first differing key (sorted),
    or None when they are equal (``perf/*`` and :data:`WALL_KEYS` excluded)."""
    a, b = _comparable(a), _comparable(b)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            key = next(k for k in sorted(set(x) | set(y)) if x.get(k, "<absent>") != y.get(k, "<absent>"))
            return {"row": i + 1, "step": x.get("step", y.get("step")), "key": key,
                    "registered": x.get(key, "<absent>"), "other": y.get(key, "<absent>")}
    if len(a) != len(b):
        return {"row": min(len(a), len(b)) + 1, "step": None, "key": "<rows>", "registered": len(a), "other": len(b)}
    return None


def _side(pythonpath: Optional[str], args: dict, log: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    fh = open(log, "w")
    return subprocess.Popen([sys.executable, "-c", _DRIVER, json.dumps(args)], env=env, cwd=tempfile.gettempdir(),
                            stdout=fh, stderr=subprocess.STDOUT, text=True)


def _result(label: str, log: Path) -> dict:
    text = log.read_text(errors="replace")
    line = next((x for x in reversed(text.splitlines()) if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the {label} side's reference run failed:\n{text[-3000:]}")
    return json.loads(line[len("RESULT "):])


def verify(study_dir: Path, run_id: Optional[str] = None, updates: int = 2, against: str = "current",
           sets: Sequence[tuple[str, Any]] = (), out: Optional[Path] = None, repo: Optional[Path] = None) -> dict:
    """Run ``run_id`` (default: the study's first) at ``updates`` steps at the registered commit and
    at ``against`` (``current``: this code, uncommitted changes included; or a commit), and compare
    their ``metrics.jsonl`` and ``evals.jsonl`` exactly. Appends the result to ``STUDY/verify.jsonl``
    and returns it (``identical``, ``first_difference``, the commits, the copies by commit)."""
    repo = Path(repo or code_root())
    study = load_study(study_dir)
    ids = [r["run_id"] for r in study["runs"]]
    run_id = run_id or ids[0]
    if run_id not in ids:
        from rlsuite.suite.registry import suggest

        raise BadInput(f"--run-id {run_id!r} is not a run of this study; {suggest(run_id, ids)}valid: "
                       f"{', '.join(ids[:5])}{f' (and {len(ids) - 5} more in study.json)' if len(ids) > 5 else ''}")
    if not (isinstance(updates, int) and updates >= 1):
        raise BadInput(f"--updates must be a whole number ≥ 1, got {updates!r}")
    reg = study["commit"]
    if not has_commit(repo, reg):
        raise BadInput(f"the registered commit {reg[:12]} is not in {repo}: fetch it (git fetch) first")
    if against != "current":
        resolved = _git(repo, "rev-parse", "--verify", f"{against}^{{commit}}", check=False).strip()
        if not resolved:
            raise BadInput(f"--against {against!r} is not a commit of {repo}; give 'current' (this code) or a commit")
        against = resolved
    spec = registered_spec(study_dir, study, repo)
    if not spec.is_file() or sha256_file(spec) != study["spec"]["sha256"]:
        raise BadInput(f"{spec} is missing or not the registered spec (sha256 {study['spec']['sha256'][:12]})")
    tmp = Path(out) if out else Path(tempfile.mkdtemp(prefix="rlsuite-verify-"))
    tmp.mkdir(parents=True, exist_ok=True)
    trees: list[Path] = []
    try:
        def worktree(commit: str, name: str) -> str:
            wt = tmp / f"src-{name}"
            _git(repo, "worktree", "add", "--detach", "--force", str(wt), commit)
            trees.append(wt)
            return namespace_path(wt, tmp / f"path-{name}")

        sides = {"registered": worktree(reg, "registered"),
                 "other": None if against == "current" else worktree(against, "against")}
        base = {"spec": str(spec.resolve()), "run_id": run_id, "updates": updates, "set": dict(sets)}
        procs = {k: _side(pp, {**base, "out": str(tmp / f"runs-{k}")}, tmp / f"{k}.log") for k, pp in sides.items()}
        for p in procs.values():
            p.wait()
        res = {k: _result(k, tmp / f"{k}.log") for k in procs}
        result = {"time": now_iso(), "run_id": run_id, "updates": updates, "set": dict(sets),
                  "registered_commit": reg, "against": against,
                  "against_commit": head(repo) if against == "current" else against,
                  "against_dirty": bool(dirty_files(repo, RUN_PATHS)) if against == "current" else False,
                  "code_changed": changed_since(repo, reg, RUN_PATHS, None if against == "current" else against)}
        if res["registered"].get("missing"):
            raise RuntimeError(f"the registered commit's code does not expand the spec to {run_id} "
                               f"(e.g. {res['registered'].get('example')}): not the code the study registered")
        if res["other"].get("missing"):
            diff = {"row": None, "step": None, "key": "<run id>", "registered": run_id,
                    "other": f"absent (the spec resolves to other ids, e.g. {res['other'].get('example')})"}
        else:
            a, b = Path(res["registered"]["run_dir"]), Path(res["other"]["run_dir"])
            diff = None
            for name in ("metrics.jsonl", "evals.jsonl"):
                diff = first_difference(read_jsonl(a / name), read_jsonl(b / name))
                if diff is not None:
                    diff = {"file": name, **diff}
                    break
            if diff is None and res["registered"].get("exit") != res["other"].get("exit"):
                diff = {"file": "exit code", "row": None, "step": None, "key": "<exit>",
                        "registered": res["registered"].get("exit"), "other": res["other"].get("exit")}
            rows = read_jsonl(a / "metrics.jsonl")
            result["rows"] = len(rows)
            # no reward variation at any step: every advantage is 0 and most code paths are never exercised
            result["degenerate"] = bool(rows) and all(r.get("reward/std") == 0 for r in rows)
            result["short_run_id"] = res["registered"].get("short_run_id")
        result["code"] = {k: v.get("code_from") for k, v in res.items()}
        result.update(identical=diff is None, first_difference=diff, copies=copies_by_commit(study_dir, study))
        with open(Path(study_dir) / VERIFY_FILE, "a", encoding="utf-8") as fh:
            fh.write(dumps(result) + "\n")
        return result
    finally:
        for wt in trees:
            _git(repo, "worktree", "remove", "--force", str(wt), check=False)
        _git(repo, "worktree", "prune", check=False)
        if out is None:
            shutil.rmtree(tmp, ignore_errors=True)


def copies_by_commit(study_dir: Path, study: dict) -> dict[str, int]:
    """How many copies of the study finished at each commit (``env.json``'s ``study.commit``)."""
    counts: dict[str, int] = {}
    dest = copies_dir(study_dir, study)
    for rid in sorted(copied(dest)):
        c = str(((read_json(dest / rid / "env.json") or {}).get("study") or {}).get("commit"))
        counts[c] = counts.get(c, 0) + 1
    return counts


def describe_verify(res: dict) -> str:
    """The human-readable verdict of :func:`verify`."""
    reg = res["registered_commit"][:12]
    other = "the current code" if res["against"] == "current" else res["against"][:12]
    if res["against"] == "current":
        other += f" (HEAD {res['against_commit'][:12]}{', uncommitted changes' if res['against_dirty'] else ''})"
    head_line = (f"{res['run_id']} at budget.updates={res['updates']}: registered commit {reg} vs {other}; "
                 f"run code changed in {len(res['code_changed'])} file(s)")
    if res["identical"]:
        verdict = (f"path-identical: all {res.get('rows')} metrics.jsonl rows and the evals.jsonl rows agree "
                   f"exactly (perf/* and wall-clock fields excluded)")
    else:
        d = res["first_difference"]
        where = f"{d.get('file', '')} row {d['row']} (step {d['step']})" if d.get("row") else d.get("file", "")
        verdict = (f"NOT path-identical: first difference at {where}, key {d['key']}: {d['registered']!r} "
                   f"(registered) vs {d['other']!r}")
    counts = res.get("copies") or {}
    lines = [head_line, verdict]
    if res.get("degenerate"):
        lines.append("warning: the reference run's rewards never vary (reward/std 0 at every step), so its advantages "
                     "are 0 and an identical path says little; pick another --run-id or --set (a warm start, larger "
                     "groups)")
    if counts:
        lines.append("copies by the commit they finished at: " + ", ".join(
            f"{c[:12]}{' (registered)' if c == res['registered_commit'] else ''}: {n}" for c, n in counts.items()))
    return "\n".join(lines)

