"""The run-id reset's check: four reference runs before and after, metric by metric.

Runs GRPO, PPO, RLOO and Dr. GRPO on `arith` (seed 0, `budget.updates=8`) three ways:

- **before**: the code of a checkout from before the reset (``--before-src``, e.g. a worktree of
  35b6348), through its own CLI with its own defaults;
- **after, old values**: this checkout with every default the reset changed set back to its old
  value (``train.share_prefix=false optim.fused=false rollout.engine=kv``);
- **after, new defaults**: this checkout as a user runs it.

"before" and "after, old values" must write the same ``metrics.jsonl`` bit for bit (same machine),
``perf/*``, ``budget/wall_s`` and wall-clock fields excluded; "after, new defaults" differs only
through the defaults that changed. Writes ``benchmarks/reference_runs/identity_reset.md``.

    git worktree add /tmp/before 35b6348
    python benchmarks/reference_runs/reference_runs.py --before-src /tmp/before [--out DIR]
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

from rlsuite.suite.warmstart import cpu_model

ROOT = Path(__file__).resolve().parents[2]
ALGOS = ("grpo", "ppo", "rloo", "dr_grpo")
HEADER = ("| algorithm | rows | before | after (old values) | after (new defaults) | before vs after (old values) "
          "| new defaults: same rewards and lengths | new defaults: keys differing (largest rel. diff†) | which "
          "| new defaults resolved to |\n|---|---|---|---|---|---|---|---|---|---|\n")
OLD_VALUES = ("train.share_prefix=false", "optim.fused=false", "rollout.engine=kv")
WALL = {"budget/wall_s", "time", "t", "wall_s", "timestamp"}
REUSE = False
SAMPLED = ("reward/mean", "reward/std", "reward/min", "reward/max", "budget/gen_tokens", "group/mixed_frac")
"""With ``len/*``: what the sampled tokens decide (``reward/shaped_mean`` holds a KL term: not here)."""


before_path = namespace_path  # a PYTHONPATH under which `import rlsuite.*` reads another checkout


def run(argv: list[str], out: Path, pythonpath: str | None) -> Path:
    if REUSE and out.is_dir():  # --reuse: a run folder of an earlier invocation
        (d,) = [p for p in out.iterdir() if p.is_dir()]
        return d
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    code = "import sys, rlsuite.suite.cli as c; sys.exit(c.main())"
    r = subprocess.run([sys.executable, "-c", code, "run", *argv, "--out", str(out)], env=env,
                       cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"run failed ({' '.join(argv)}):\n{r.stderr[-3000:]}")
    (d,) = [Path(p) for p in glob.glob(str(out / "*")) if Path(p).is_dir()]
    return d


def metrics(d: Path) -> list[dict]:
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/") and k not in WALL} for r in rows]


def compare(a: list[dict], b: list[dict]) -> tuple[list[str], float]:
    """(keys whose values differ at any step, the largest relative difference among the numbers
    that are not FLOP charges, not the engine-vs-trainer noise ``mismatch/*`` and not near zero:
    |value| ≥ 1e-6, where a relative difference means something)."""
    keys = sorted(set().union(*a, *b))
    diff, rel = [], 0.0
    for k in keys:
        if len(a) != len(b) or any(x.get(k) != y.get(k) for x, y in zip(a, b)):
            diff.append(k)
            if k.startswith(("mismatch/", "budget/flops")):
                continue
            for x, y in zip(a, b):
                u, v = x.get(k), y.get(k)
                numeric = isinstance(u, (int, float)) and isinstance(v, (int, float))
                if numeric and u != v and min(abs(u), abs(v)) >= 1e-6:
                    rel = max(rel, abs(u - v) / max(abs(u), abs(v)))
    return diff, rel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-src", type=Path, required=True, help="a checkout of the pre-reset code")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--write", type=Path, default=Path(__file__).resolve().parent / "identity_reset.md")
    ap.add_argument("--reuse", action="store_true", help="compare the run folders already under --out")
    a = ap.parse_args()
    global REUSE
    REUSE = a.reuse
    out = a.out or Path(tempfile.mkdtemp(prefix="refruns-"))
    commit = subprocess.run(["git", "-C", str(a.before_src), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    pp = before_path(a.before_src.resolve(), out / "before_src")
    base = ["--task", "arith", "--seed", "0", "--budget", "updates=8"]
    lines = []
    for algo in ALGOS:
        b = run([*base, "--algo", algo, "--set", "train.progress=off"], out / "before" / algo, pp)
        o = run([*base, "--algo", algo, "--set", "log.progress=off",
                 *[x for kv in OLD_VALUES for x in ("--set", kv)]], out / "after_old" / algo, None)
        n = run([*base, "--algo", algo, "--set", "log.progress=off"], out / "after_new" / algo, None)
        mb, mo, mn = metrics(b), metrics(o), metrics(n)
        d_old, r_old = compare(mb, mo)
        d_new, r_new = compare(mb, mn)
        resolved = json.loads((n / "spec.json").read_text()).get("resolved", {})
        same_rollouts = not [k for k in d_new if k.startswith("len/") or k in SAMPLED]
        lines.append(f"| {algo} | {len(mb)} | {b.name} | {o.name} | {n.name} | "
                     f"{'identical' if not d_old else ', '.join(d_old)} | {'yes' if same_rollouts else 'NO'} | "
                     f"{len(d_new)} ({r_new:.1e}) | "
                     f"{', '.join(d_new) or '—'} | {json.dumps(resolved, sort_keys=True)} |")
        print(lines[-1], flush=True)
    text = f"""# The run-id reset: four reference runs before and after

`python benchmarks/reference_runs/reference_runs.py --before-src <checkout of {commit}>` on this checkout
({here}; uncommitted changes count as its code). Machine: {cpu_model()} ({platform.machine()}),
{os.cpu_count()} cores, one torch thread a run. `arith`, seed 0, `budget.updates=8`, tiny model, from
the committed base. Compared: every field of every `metrics.jsonl` row except `perf/*`,
`budget/wall_s` and wall-clock stamps, by exact equality.

- **before** = {commit}'s CLI with its defaults; **after (old values)** = this code with
  `{' '.join(OLD_VALUES)}` (the three defaults the reset changed, set to their old values);
  **after (new defaults)** = this code as a user runs it (`auto` resolved by capability: the
  last column, as `spec.json` records it).
- The run ids differ in all three (the reset: a new identity document, schema 2).

""" + HEADER + "\n".join(lines) + """

† over the keys that are not `budget/flops*` or `mismatch/*` and at values ≥ 1e-6 in magnitude
(a relative difference of a quantity near zero, such as `adv/mean` ~1e-9, means nothing).

Where the new defaults differ: `budget/flops*` where the shared-prefix update computes each shared
prompt once (fewer FLOPs charged for the same mathematics; PPO keeps the padded update, so its
charges are unchanged); `mismatch/*`, the engine-vs-trainer log-prob noise (a few ulps either way),
because the oneDNN engine's kernels sum in another order; the losses, KL terms, entropy and grad
norm by float summation order (the fused AdamW, the prefix-shared forward), relative differences
of the size in the table. Where the column says yes, the sampled tokens decided the same: task rewards, lengths and
group mix agree at every step (`reward/shaped_mean`, which holds a KL penalty, may differ in the last bits).
"""
    a.write.write_text(text)
    print(f"wrote {a.write}")


if __name__ == "__main__":
    main()
