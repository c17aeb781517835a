"""Does GRPO improve the tool-use loop? 3 seeds of GRPO on `search_toy` at its embedded preset,
plus BM25 retrieval timings on the shared HotpotQA sample.

Prints and writes `benchmarks/tasks_search/tasks_search.md`: greedy val accuracy of the shared
warm start → after RL per seed and on average (with the spread over seeds), test accuracy,
wall time; then index build/load, query latency in process and through the localhost
retrieval server. Runs go through the real CLI (`python -m rlsuite.suite.cli run`), `--workers` at a
time with one torch thread each.

    python benchmarks/tasks_search/tasks_search.py [--seeds 0 1 2] [--workers 2] [--out DIR] [--no-retrieval]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlsuite.suite.runfolder import read_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rlsuite.suite.cli"]


def one(algo: str, seed: int, out: Path) -> dict:
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(CLI + ["run", "--task", "search_toy", "--algo", algo, "--seed", str(seed),
                                       "--out", str(out)], stdout=fo, stderr=fe, text=True, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU time (the cores are shared)
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        stdout, stderr = fo.read(), fe.read()
    wall = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{algo} seed {seed} failed:\n{stderr[-2000:]}")
    run_dir = Path(stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    evals = read_jsonl(run_dir / "evals.jsonl")
    val = [e for e in evals if e["split"] == "val"]
    test = [e for e in evals if e["split"] == "test"]
    status_doc = json.load(open(run_dir / "status.json"))
    warm = json.load(open(run_dir / "env.json"))["warm_start"]
    key = "eval/search_toy/greedy_acc"
    return {"algo": algo, "seed": seed, "before": val[0][key], "after": val[-1][key], "curve": [e[key] for e in val],
            "test_after": test[-1][key], "train_wall_s": status_doc["budget"]["wall_s"], "process_wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime, "steps": status_doc["step"], "warm": warm}


def retrieval_timings() -> list[str]:
    """BM25 over the 4,948-passage sample: build, cached load, queries, server round trips."""
    sys.path.append(str(ROOT))  # after PYTHONPATH: a worktree namespace (PYTHONPATH) keeps its rlsuite
    from rlsuite.tasks.retrieval import BM25Index, RemoteRetriever
    from rlsuite.tasks.search import Search, SearchConfig

    data = Path(os.environ.get("RLSUITE_DATA", ROOT.parent / "shared" / "data")) / "search"
    cache = Path(tempfile.mkdtemp(prefix="rlsuite-bm25-"))
    os.environ["RLSUITE_CACHE"] = str(cache)
    t0 = time.perf_counter()
    idx = BM25Index.open(data / "corpus.jsonl")
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = BM25Index.open(data / "corpus.jsonl")
    t_load = time.perf_counter() - t0
    task = Search(SearchConfig(name="search", data_path=str(data)))
    rows = [r for v in task.splits().values() for r in v]
    qs = [r["question"] for r in rows]
    t0 = time.perf_counter()
    for q in qs:
        idx.search([q], 3)
    t_single = (time.perf_counter() - t0) / len(qs)
    t0 = time.perf_counter()
    hits = idx.search(qs, 3)
    t_batch = time.perf_counter() - t0
    recall = sum(any(h["document"]["contents"].split("\n")[0].strip('"') in r["supporting_facts"]["title"] for h in hs)
                 for r, hs in zip(rows, hits)) / len(rows)
    both = sum(all(t in {h["document"]["contents"].split("\n")[0].strip('"') for h in hs}
                   for t in set(r["supporting_facts"]["title"])) for r, hs in zip(rows, hits)) / len(rows)
    proc = subprocess.Popen([sys.executable, "-m", "rlsuite.tasks.retrieval", "serve",
                             "--corpus", str(data / "corpus.jsonl"),
                             "--port", "0", "--idle-exit", "30"], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        t0 = time.perf_counter()
        select.select([proc.stdout], [], [], 60)
        url = proc.stdout.readline().split()[-1]
        t_start = time.perf_counter() - t0
        client = RemoteRetriever(url)
        client.search(["warm up"], 3)
        t0 = time.perf_counter()
        for q in qs:
            client.search([q], 3)
        t_remote = (time.perf_counter() - t0) / len(qs)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return ["## Retrieval (BM25, bm25s, the 4,948-passage HotpotQA sample)", "",
            "| measure | value |", "|---|---|",
            f"| index build (first open, cached afterwards) | {t_build:.2f} s |",
            f"| cached index load | {t_load * 1000:.0f} ms |",
            f"| one query in process (mean of {len(qs)}) | {t_single * 1000:.2f} ms |",
            f"| {len(qs)} queries in one batch | {t_batch * 1000:.0f} ms |",
            f"| server start (process + cached load) | {t_start:.2f} s |",
            f"| one query through the localhost server (mean of {len(qs)}) | {t_remote * 1000:.2f} ms |",
            f"| recall@3: a gold paragraph in the top 3 (question as query) | {recall:.3f} |",
            f"| both gold paragraphs in the top 3 | {both:.3f} |", ""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algos", nargs="+", default=["grpo"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-retrieval", action="store_true")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "tasks_search.md")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rlsuite-search-"))
    load0 = os.getloadavg()[0]
    t0 = time.time()
    first = one(args.algos[0], args.seeds[0], out)  # builds the shared warm start once
    jobs = [(a, s) for a in args.algos for s in args.seeds][1:]
    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = [first] + list(pool.map(lambda j: one(j[0], j[1], out), jobs))
    total = time.time() - t0
    w = first["warm"]
    lines = ["# GRPO on the embedded tool-use task (`search_toy`, tiny model, embedded preset)", "",
             f"Machine: {machine()}, 1 torch thread per run, {args.workers} runs at "
             f"a time; load average {load0:.1f} at the start (the cores are shared). "
             f"Command: `{command(__file__)}`.", "",
             f"Shared warm start ({'found in the cache' if w['cached'] else 'built by the first run'}, then cached): "
             f"{w['warm_steps']} SFT steps in {w.get('warm_wall_s', float('nan')):.0f} s wall; on held-out train "
             f"entities greedy accuracy {w['warm_check_acc']:.2f}, grounded answers {w['warm_check_grounded']:.2f}.",
             "", "Val = 110 questions about held-out entities, test = 112; greedy decoding; evals every 8 steps.", "",
             "| algorithm | seed | greedy val acc before | after | Δ | val curve | test after | train wall s | "
             "process CPU s | steps |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        curve = " → ".join(f"{x:.2f}" for x in r["curve"])
        lines.append(f"| {r['algo']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | "
                     f"{r['after'] - r['before']:+.3f} | {curve} | {r['test_after']:.3f} | {r['train_wall_s']:.1f} | "
                     f"{r['cpu_s']:.0f} | {r['steps']} |")
    lines += ["", "| algorithm | mean before | mean after | mean Δ (val) | min Δ | max Δ | sd Δ over seeds | "
              "mean test after | mean train wall s | mean process CPU s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for a in args.algos:
        rs = [r for r in rows if r["algo"] == a]
        d = [r["after"] - r["before"] for r in rs]
        sd = statistics.stdev(d) if len(d) > 1 else 0.0
        lines.append(f"| {a} | {statistics.mean(r['before'] for r in rs):.3f} | "
                     f"{statistics.mean(r['after'] for r in rs):.3f} | {statistics.mean(d):+.3f} | {min(d):+.3f} | "
                     f"{max(d):+.3f} | {sd:.3f} | {statistics.mean(r['test_after'] for r in rs):.3f} | "
                     f"{statistics.mean(r['train_wall_s'] for r in rs):.1f} | "
                     f"{statistics.mean(r['cpu_s'] for r in rs):.0f} |")
    lines += ["", f"Total wall time (warm start included): {total:.0f} s.", ""]
    if not args.no_retrieval:
        lines += retrieval_timings()
    write_results(args.results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
