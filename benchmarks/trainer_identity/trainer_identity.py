"""The trainer split's check (issue #37 §1): four reference runs before and after, field by field.

Runs GRPO, PPO (a critic), RLOO and Dr. GRPO on ``arith`` (tiny model, seed 0,
``budget.updates=8``) with the code of a checkout from before the split (``--before-src``, e.g. a
worktree of the commit the split started from, mapped into the ``rlsuite`` namespace as
:func:`before_path` does) and with this checkout, each through its own CLI, one torch thread
(``OMP_NUM_THREADS=1``), on this machine. Every field of every ``metrics.jsonl`` row must be equal
(exact equality), ``perf/*``, ``budget/wall_s`` and wall-clock stamps excluded; ``evals.jsonl`` is
compared the same way, ``final/`` byte for byte and, in four more runs of the features whose code
moved (:data:`VARIANTS`, checkpoints kept), ``checkpoint/state.pt`` entry by entry. Writes
``benchmarks/trainer_identity/trainer_identity.md``.

    git worktree add /tmp/trainer_before <commit>
    python benchmarks/trainer_identity/trainer_identity.py --before-src /tmp/trainer_before [--before-src ...]
        [--after-src CHECKOUT] [--out DIR] [--only before|after]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from rlsuite.sweeps.study import namespace_path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
ALGOS = ("grpo", "ppo", "rloo", "dr_grpo")
VARIANTS = (  # the features whose code moved, each in one more run (checkpoints kept: compared too)
    ("ppo, separate critic", "ppo", ["model.critic=separate"]),
    ("grpo, adaptive KL", "grpo", ["algo.kl_coef=0.05", "algo.kl_target=0.01", "algo.kl_horizon=100"]),
    ("grpo, KL in the reward", "grpo", ["algo.kl_coef=0.05", "algo.kl_where=reward"]),
    ("grpo, lag 1, noise mismatch, token TIS", "grpo", ["rollout.sync=lag", "rollout.staleness=1",
                                                       "rollout.mismatch=noise", "loss.is_correction=token_tis"]),
)
KEEP = ["train.checkpoint_every=3", "train.keep_checkpoint=true"]
WALL = {"budget/wall_s", "time", "t", "wall_s", "timestamp"}
BASE = ["--task", "arith", "--seed", "0", "--set", "budget.updates=8", "--set", "log.progress=off"]


before_path = namespace_path  # a PYTHONPATH under which `import rlsuite.*` reads another checkout


def run(algo: str, out: Path, pythonpath: str | None, sets: list[str] = ()) -> Path:
    """One run through the CLI of the code on ``pythonpath`` (this checkout when None); a finished
    run folder under ``out`` is reused."""
    done = [Path(p) for p in glob.glob(str(out / "*")) if (Path(p) / "final").is_dir()]
    if done:
        return done[0]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               RLSUITE_CACHE=str(out.parent.parent / "cache"))
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    code = "import sys, rlsuite.suite.cli as c; sys.exit(c.main())"
    extra = [x for kv in sets for x in ("--set", kv)]
    r = subprocess.run([sys.executable, "-c", code, "run", *BASE, *extra, "--algo", algo, "--out", str(out)], env=env,
                       cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"run failed ({algo}, {pythonpath or 'this checkout'}):\n{r.stderr[-3000:]}")
    (d,) = [Path(p) for p in glob.glob(str(out / "*")) if Path(p).is_dir()]
    return d


def rows(d: Path, name: str) -> list[dict]:
    out = [json.loads(line) for line in (d / name).read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/") and k not in WALL} for r in out]


def differing(a: list[dict], b: list[dict]) -> list[str]:
    """Keys whose values differ (exact equality) at any row; ``<rows>`` when the row counts differ."""
    if len(a) != len(b):
        return ["<rows>"]
    keys = sorted({k for r in a + b for k in r})
    return [k for k in keys if any(x.get(k, "<absent>") != y.get(k, "<absent>") for x, y in zip(a, b))]


def same_tree(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two unpacked checkpoints differ (tensors bit for bit; the wall-clock counter excluded)."""
    if path.endswith("/wall_s"):
        return []
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
            and a.shape == b.shape and torch.equal(a, b)
        return [] if ok else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in same_tree(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [path]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same_tree(x, y, f"{path}/{i}")]
    return [] if a == b else [path]


def checkpoint_diff(a: Path, b: Path) -> str:
    from rlsuite.suite.checkpoint import unpack

    pa, pb = a / "checkpoint" / "state.pt", b / "checkpoint" / "state.pt"
    if not pa.exists() and not pb.exists():
        return "—"
    if not (pa.exists() and pb.exists()):
        return "MISSING"
    ra, rb = (torch.load(p, weights_only=False, map_location="cpu") for p in (pa, pb))
    d = same_tree(unpack(ra), unpack(rb))
    layout = "" if ra.get("format") == rb.get("format") else " (format differs)"
    return ("identical" if not d else "DIFFER: " + ", ".join(d[:6])) + layout


def final_diff(a: Path, b: Path) -> str:
    def files(d: Path) -> list[Path]:  # `.complete` holds the time the folder was written
        return sorted(p.relative_to(d) for p in (d / "final").rglob("*") if p.is_file() and p.name != ".complete")

    fa, fb = files(a), files(b)
    if fa != fb:
        return "DIFFER: files"
    bad = [str(p) for p in fa if (a / p).read_bytes() != (b / p).read_bytes()]
    return "identical bytes" if not bad else "DIFFER: " + ", ".join(bad)


def cpu() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_head(d: Path) -> str:
    return subprocess.run(["git", "-C", str(d), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before-src", type=Path, action="append", required=True,
                   help="a checkout from before the split (repeatable: one comparison each)")
    p.add_argument("--after-src", type=Path, help="the checkout after it (default: this one, uncommitted changes "
                                                   "included)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "trainer_identity")
    p.add_argument("--only", choices=("before", "after"), help="make only these runs (no comparison)")
    a = p.parse_args()
    out = a.out.resolve()
    after_src = a.after_src.resolve() if a.after_src else None
    pa = before_path(after_src, out / "after_src") if after_src else None
    here = git_head(after_src or ROOT) + ("" if after_src else " with the working tree's uncommitted changes")
    sides = [(pa, out / "after_src" if pa else ROOT)]
    befores = []
    for src in a.before_src:
        commit = git_head(src.resolve())
        pp = before_path(src.resolve(), out / f"before_src_{commit}")
        befores.append((commit, pp))
        sides.append((pp, out / f"before_src_{commit}"))
    for path, want in sides:  # each side imports the code it names
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.update({"PYTHONPATH": path} if path else {})
        got = subprocess.run([sys.executable, "-c", "import rlsuite.suite.trainer as t; print(t.__file__)"], env=env,
                             cwd=tempfile.gettempdir(), capture_output=True, text=True).stdout.strip()
        if not got.startswith(str(want)):
            sys.exit(f"rlsuite.suite.trainer imports from {got}, not from {want}")
    runs = [("main", algo, algo, []) for algo in ALGOS] + [("variants", label, algo, [*sets, *KEEP])
                                                          for label, algo, sets in VARIANTS]
    head = ("| run | --set | metrics rows | fields | run id (before / after) | metrics.jsonl | evals.jsonl "
            "| checkpoint/state.pt | final/ |\n|---|---|---|---|---|---|---|---|---|\n")
    sections = []
    for commit, pp in befores:
        lines: dict[str, list[str]] = {"main": [], "variants": []}
        for table, label, algo, sets in runs:
            key = label.replace(", ", "_").replace(" ", "-")
            b = run(algo, out / f"before_{commit}" / key, pp, sets) if a.only != "after" else None
            n = run(algo, out / "after" / key, pa, sets) if a.only != "before" else None
            if a.only:
                continue
            mb, mn = rows(b, "metrics.jsonl"), rows(n, "metrics.jsonl")
            d_m = differing(mb, mn)
            d_e = differing(rows(b, "evals.jsonl"), rows(n, "evals.jsonl"))
            n_fields = len({k for r in mb for k in r})
            same_id = "same" if b.name == n.name else f"DIFFER: {b.name} / {n.name}"
            lines[table].append(f"| {label} | `{' '.join(sets) or '—'}` | {len(mb)} | {n_fields} | {same_id} | "
                                f"{'identical' if not d_m else 'DIFFER: ' + ', '.join(d_m)} | "
                                f"{'identical' if not d_e else 'DIFFER: ' + ', '.join(d_e)} | "
                                f"{checkpoint_diff(b, n)} | {final_diff(b, n)} |")
            print(commit, lines[table][-1], flush=True)
        sections.append(f"""## Before = {commit}

The four reference runs:

""" + head + "\n".join(lines["main"]) + """

The features whose code moved out of the trainer (separate critic, adaptive KL controller, KL in the
reward, behaviour lag with the mismatch knob and the trainer-level importance correction), one run
each, with `""" + " ".join(KEEP) + """` (mid-run checkpoints, the last one kept and compared):

""" + head + "\n".join(lines["variants"]) + "\n")
    if a.only:
        return 0
    args = " ".join(f"--before-src <worktree of {c}>" for c, _ in befores)
    args += f" --after-src <worktree of {here}>" if after_src else ""
    text = f"""# The trainer split (#37 §1): reference runs before and after

`python benchmarks/trainer_identity/trainer_identity.py {args}`; after = {here}. Machine: {cpu()}
({platform.machine()}), {os.cpu_count()} cores, `OMP_NUM_THREADS=1` (one torch thread a run). `arith`,
seed 0, `budget.updates=8`, tiny model from the committed base, each side through its own CLI
(`rlsuite run --task arith --algo ALGO --seed 0 --set budget.updates=8`, the code of each checkout
mapped into the `rlsuite` namespace on `PYTHONPATH`; checked: each side imports its own
`suite/trainer.py`). Compared: every field of every `metrics.jsonl` and `evals.jsonl` row except
`perf/*`, `budget/wall_s` and wall-clock stamps, by exact equality; the files of `final/` byte for
byte (its `.complete` time stamp excluded); where a run keeps its checkpoint, the unpacked
`checkpoint/state.pt` entry by entry (tensors bit for bit, the same `format`; the wall-clock counter
excluded). The comparators report a difference where there is one (checked on pairs of different
runs: metrics, `final/` and checkpoints all differ).

""" + "\n".join(sections)
    dest = Path(__file__).with_name("trainer_identity.md")
    dest.write_text(text)
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
