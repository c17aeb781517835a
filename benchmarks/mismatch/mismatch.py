"""Render the mismatch-correction sweep (``sweeps/mismatch.yaml``) as ``benchmarks/mismatch/mismatch.md``.

    rlsuite sweep run mismatch --out runs --workers 2
    python benchmarks/mismatch/mismatch.py runs/mismatch [--out benchmarks/mismatch/mismatch.md]

One row per ``loss.is_correction`` arm (the sweep's variants), over its seeds: runs that
completed / failed, final greedy accuracy on val and test (the base's in the header), the last
ten steps' training reward, the largest gradient norm and the final policy entropy (stability),
and the correction's own metrics averaged over the run (``mismatch/is_weight_mean``, the share of
tokens truncated or masked) next to the engine's mismatch (``mismatch/kl``, token-ratio range).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite

from rlsuite.suite.runfolder import cpu_model, read_jsonl  # noqa: E402

ORDER = ["none", "token_tis", "seq_tis", "geo_tis", "token_mis", "seq_mis", "geo_mis",
         "token_reject", "seq_reject", "geo_reject"]


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _fmt(x: float, d: int = 3) -> str:
    return "—" if x != x else f"{x:.{d}f}"


def _per_seed(acc: dict) -> str:
    return " / ".join(f"{_fmt(v)} (s{k})" for k, v in sorted(acc.items(), key=lambda kv: str(kv[0]))) or "—"


def collect(sweep_dir: Path) -> tuple[dict[str, list[dict]], dict]:
    arms: dict[str, list[dict]] = {}
    base: dict = {}
    for run in sorted(p for p in sweep_dir.iterdir() if (p / "spec.json").exists()):
        spec = json.loads((run / "spec.json").read_text())
        status = json.loads((run / "status.json").read_text()) if (run / "status.json").exists() else {}
        evals = read_jsonl(run / "evals.jsonl") if (run / "evals.jsonl").exists() else []
        rows = read_jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").exists() else []
        acc = {(e["split"], bool(e.get("final"))): e.get("eval/chain/greedy_acc") for e in evals}
        for e in evals:
            if e["step"] == 0:  # the engine's copy of the base (through the mismatch knob): per seed
                base.setdefault(e["split"], {})[spec.get("seed")] = e.get("eval/chain/greedy_acc")
                base["n_prompts"] = e.get("n_prompts")
        last = rows[-10:]
        arms.setdefault(spec.get("variant") or "none", []).append({
            "state": status.get("state", "missing"),
            "val": acc.get(("val", True)), "test": acc.get(("test", True)),
            "reward": _mean([r["reward/mean"] for r in last]),
            "grad_max": max((r.get("stats/grad_norm", 0.0) for r in rows), default=float("nan")),
            "entropy": rows[-1].get("stats/entropy", float("nan")) if rows else float("nan"),
            "weight": _mean([r["mismatch/is_weight_mean"] for r in rows if "mismatch/is_weight_mean" in r]),
            "trunc": _mean([r["mismatch/is_truncated_frac"] for r in rows if "mismatch/is_truncated_frac" in r]),
            "masked": _mean([r["mismatch/is_masked_frac"] for r in rows if "mismatch/is_masked_frac" in r]),
            "kl": _mean([r["mismatch/kl"] for r in rows if "mismatch/kl" in r]),
            "rmin": min((r["mismatch/ratio_min"] for r in rows if "mismatch/ratio_min" in r), default=float("nan")),
            "rmax": max((r["mismatch/ratio_max"] for r in rows if "mismatch/ratio_max" in r), default=float("nan")),
            "steps": len(rows),
            "env": json.loads((run / "env.json").read_text()) if (run / "env.json").exists() else {},
        })
    return arms, base


def render(sweep_dir: Path) -> str:
    arms, base = collect(sweep_dir)
    cpus = sorted({r["env"].get("cpu_model") or "unknown" for rs in arms.values() for r in rs}) or [cpu_model()]
    lines = [f"CPU: {', '.join(cpus)} (runs), rendered on {cpu_model()}", "",
             "Step-0 greedy accuracy (the committed `chain` base as the engine serves it: evals run through "
             f"the engine, so through the mismatch knob; per seed): val {_per_seed(base.get('val', {}))}, "
             f"test {_per_seed(base.get('test', {}))} ({base.get('n_prompts')} prompts each).", "",
             "| correction | runs ok | val acc (per seed) | test acc (mean) | train reward (last 10) | "
             "max grad norm | final entropy | mean IS weight | truncated | masked | mismatch KL | token ratio range |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in sorted(arms, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER)):
        rs = arms[arm]
        ok = [r for r in rs if r["state"] == "completed"]
        vals = ", ".join(_fmt(r["val"]) for r in ok if r["val"] is not None)
        test = _mean([r["test"] for r in ok if r["test"] is not None])
        grad = max((r["grad_max"] for r in ok), default=float("nan"))
        lines.append(
            f"| `{arm}` | {len(ok)}/{len(rs)} | {vals or '—'} | {_fmt(test)} | "
            f"{_fmt(_mean([r['reward'] for r in ok]))} | {_fmt(grad, 2)} | "
            f"{_fmt(_mean([r['entropy'] for r in ok]), 4)} | {_fmt(_mean([r['weight'] for r in ok]))} | "
            f"{_fmt(_mean([r['trunc'] for r in ok]))} | {_fmt(_mean([r['masked'] for r in ok]))} | "
            f"{_fmt(_mean([r['kl'] for r in ok]), 4)} | "
            f"{_fmt(min((r['rmin'] for r in ok), default=float('nan')), 3)}–"
            f"{_fmt(max((r['rmax'] for r in ok), default=float('nan')), 2)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_dir", type=Path, help="the sweep's folder (e.g. runs/mismatch)")
    ap.add_argument("--out", type=Path, help="write the table here (default: print)")
    a = ap.parse_args(argv)
    if not a.sweep_dir.is_dir():
        print(f"benchmarks/mismatch/mismatch.py: {a.sweep_dir} is not a folder; give the sweep's run folder "
              f"(e.g. runs/mismatch after `rlsuite sweep run mismatch --out runs`)", file=sys.stderr)
        return 2
    text = render(a.sweep_dir)
    if a.out:
        a.out.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
