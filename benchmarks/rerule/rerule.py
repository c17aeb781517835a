"""ReRULE vs GRPO on the embedded unlearning task (``sweeps/rerule.yaml``), with intervals.

    rlsuite sweep run rerule --out runs --workers 2
    python benchmarks/rerule/rerule.py runs/rerule [--out benchmarks/rerule/rerule.md]

Per arm and metric: the mean over seeds of the final test eval (``final`` row of split
``test``) with the report's default interval of a mean over seeds (``rlsuite.reports.stats.bootstrap_ci``,
method ``auto``, 95%), and the paired difference rerule − grpo over the shared seeds
(``rlsuite.reports.stats.paired_difference``, the same interval rule as ``benchmarks/effects/effects.py``).
Metrics: forget refusal (higher is the unlearning goal), retain and boundary accuracy and
over-refusal (the utility cost), the mix-weighted score ``greedy_acc``, and their sampled
versions (4 samples a prompt at temperature 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite

from rlsuite.suite.runfolder import cpu_model, read_jsonl  # noqa: E402

METRICS = ["greedy_forget_refusal", "greedy_retain_acc", "greedy_boundary_acc", "greedy_over_refusal",
           "greedy_acc", "sampled_forget_refusal", "sampled_retain_acc", "sampled_boundary_acc",
           "sampled_over_refusal"]
ARMS = ["grpo", "rerule"]


def collect(sweep_dir: Path) -> tuple[dict[str, dict[int, dict]], dict[int, dict], set[str]]:
    """Per arm, per seed: the final test eval's metrics; the step-0 test eval per seed; CPU models."""
    finals: dict[str, dict[int, dict]] = {a: {} for a in ARMS}
    base: dict[int, dict] = {}
    cpus: set[str] = set()
    for spec_path in sorted(sweep_dir.glob("*/spec.json")):
        d = spec_path.parent
        status = json.loads((d / "status.json").read_text())
        if status.get("state") != "completed":
            continue
        spec = json.loads(spec_path.read_text())
        algo, seed = spec["algo"]["name"], int(spec["seed"])
        env = json.loads((d / "env.json").read_text()) if (d / "env.json").exists() else {}
        cpus.add(env.get("cpu_model") or "unknown")
        task = spec["task"]["name"]
        for row in read_jsonl(d / "evals.jsonl"):
            if row["split"] != "test":
                continue
            vals = {m: row.get(f"eval/{task}/{m}") for m in METRICS}
            if row.get("final"):
                finals.setdefault(algo, {})[seed] = vals
            elif row["step"] == 0:
                base[seed] = vals
    return finals, base, cpus


def mean_ci(xs: list[float]) -> tuple[float, float, float, str]:
    from rlsuite.reports.stats import bootstrap_ci, resolve_method, CELL_COVERAGE

    method = resolve_method("auto", len(xs), CELL_COVERAGE)
    iv = bootstrap_ci(np.array(xs, dtype=float), method=method, reps=2000, seed=0)
    return iv.point, iv.low, iv.high, method


def paired(x: dict[int, float], y: dict[int, float]):
    from rlsuite.reports.stats import CELL_COVERAGE, paired_difference, resolve_method

    seeds = sorted(set(x) & set(y))
    method = resolve_method("auto", len(seeds), CELL_COVERAGE)
    iv, n = paired_difference(np.array([[x[s]] for s in seeds]), np.array([[y[s]] for s in seeds]),
                              method=method, reps=2000, seed=0)
    return iv.point, iv.low, iv.high, n, method


def render(sweep_dir: Path) -> str:
    finals, base, cpus = collect(sweep_dir)
    n = {a: len(finals.get(a, {})) for a in ARMS}
    lines = [f"CPU: {', '.join(sorted(cpus))} (runs), rendered on {cpu_model()}", "",
             f"Completed runs: grpo {n['grpo']}, rerule {n['rerule']} (final test eval, "
             f"{'/'.join(str(s) for s in sorted(finals.get('rerule', {})))} seeds).", "",
             "| metric | base (step 0) | grpo mean [95% CI] | rerule mean [95% CI] | rerule − grpo (paired) [95% CI] |",
             "|---|---|---|---|---|"]
    for m in METRICS:
        b = np.mean([v[m] for v in base.values()]) if base else float("nan")
        cells = []
        for a in ARMS:
            xs = [v[m] for v in finals[a].values()]
            p, lo, hi, _ = mean_ci(xs)
            cells.append(f"{p:.3f} [{lo:.3f}, {hi:.3f}]")
        d, lo, hi, k, meth = paired({s: v[m] for s, v in finals["rerule"].items()},
                                    {s: v[m] for s, v in finals["grpo"].items()})
        sep = " **(separated)**" if lo > 0 or hi < 0 else ""
        lines.append(f"| `{m}` | {b:.3f} | {cells[0]} | {cells[1]} | {d:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                     f"({k} seeds, {meth}){sep} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path, help="<root>/rerule (the --out of the sweep, plus rerule)")
    ap.add_argument("--out", type=Path, default=None, help="write the table here (default: print)")
    args = ap.parse_args(argv)
    if not args.sweep_dir.is_dir():
        print(f"benchmarks/rerule/rerule.py: error: no folder {args.sweep_dir}", file=sys.stderr)
        return 2
    text = render(args.sweep_dir)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
