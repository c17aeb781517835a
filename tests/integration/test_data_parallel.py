"""Data parallelism within a run (``dist.world_size``, suite/distributed.py): two gloo
processes on the CPU give the same run as one process with the same global batch.

The runs use the cached arith warm start (``RLSUITE_CACHE``, see tests/conftest.py), so the
rewards are mixed and the gradients are not trivially zero. ``train.micro_batch_size`` is half
a minibatch, so one process sees the same micro-batch partition as each of the two ranks:
then even the micro-batch-averaged statistics (``stats/entropy``) must agree.

Run: pytest tests/integration/test_data_parallel.py   (the preemption and sweep tests are slow)
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

DP = ["--task", "arith", "--algo", "grpo", "--seed", "1", "--set", "eval.max_prompts=8", "--set", "eval.test_prompts=8",
      "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4", "--set", "rollout.rng=row",
      "--set", "train.minibatches=2", "--set", "train.micro_batch_size=4"]
TWO = ["--set", "dist.world_size=2"]
TIMING = ("time", "budget/wall_s")


def _run(capsys, *args: str) -> tuple[int, Path, str]:
    code = main(["run", *args])
    cap = capsys.readouterr()
    last = cap.out.strip().splitlines()[-1] if cap.out.strip() else ""
    return code, Path(last[len("run_dir: "):]) if last.startswith("run_dir: ") else None, cap.err


def _close(a, b, key: str) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if key.startswith("mismatch/"):  # μ log-probs: the KV sampler on a shard vs the whole batch
        return a == pytest.approx(b, rel=1e-5, abs=1e-5)
    return a == pytest.approx(b, rel=1e-6, abs=1e-9)


def assert_same_run(one: Path, two: Path) -> None:
    """Metrics, evals, samples and final parameters of two run folders agree (timing aside)."""
    m1, m2 = read_jsonl(one / "metrics.jsonl"), read_jsonl(two / "metrics.jsonl")
    assert [r["step"] for r in m1] == [r["step"] for r in m2]
    for r1, r2 in zip(m1, m2):
        assert set(r1) == set(r2)
        exact = [k for k in r1 if k.startswith(("budget/", "reward/", "len/", "group/", "filter/")) and k not in TIMING]
        assert {k: r1[k] for k in exact} == {k: r2[k] for k in exact}, r1["step"]
        bad = {k: (r1[k], r2[k]) for k in r1 if k not in TIMING and not k.startswith("perf/")
               and not _close(r1[k], r2[k], k)}
        assert not bad, (r1["step"], bad)
    e1, e2 = read_jsonl(one / "evals.jsonl"), read_jsonl(two / "evals.jsonl")
    assert [{k: v for k, v in e.items() if k not in TIMING} for e in e1] == \
        [{k: v for k, v in e.items() if k not in TIMING} for e in e2]
    assert read_jsonl(one / "samples.jsonl") == read_jsonl(two / "samples.jsonl")
    p1, p2 = load_file(one / "final" / "model.safetensors"), load_file(two / "final" / "model.safetensors")
    assert p1.keys() == p2.keys()
    for k in p1:
        torch.testing.assert_close(p2[k], p1[k], rtol=1e-6, atol=1e-7)


def test_two_gloo_processes_equal_one_process_with_the_same_global_batch(tmp_path, capsys):
    code, one, err = _run(capsys, *DP, "--budget", "samples=96", "--out", str(tmp_path / "one"))
    assert code == 0, err
    code, two, err = _run(capsys, *DP, *TWO, "--budget", "samples=96", "--out", str(tmp_path / "two"))
    assert code == 0, err
    assert one.name == two.name  # world_size is not part of the run id
    def files(d: Path) -> list[str]:
        return sorted(str(p.relative_to(d)) for p in d.rglob("*"))

    assert files(one) == files(two)  # rank 1 wrote nothing extra (no temporary leftovers either)
    metrics = read_jsonl(two / "metrics.jsonl")
    assert len(metrics) == 6 and any(0 < r["reward/mean"] < 1 for r in metrics)  # a non-trivial update
    assert all(r["stats/grad_norm"] > 0 for r in metrics)
    assert_same_run(one, two)
    assert json.loads((two / "env.json").read_text())["world_size"] == 2
    assert json.loads((one / "env.json").read_text())["world_size"] == 1
    st = json.loads((two / "status.json").read_text())
    assert st["state"] == "completed" and st["attempt"] == 1 and st["step"] == 6
    # the same spec with another world size is the same run: already completed, nothing written
    code, again, err = _run(capsys, *DP, *TWO, "--budget", "samples=96", "--out", str(tmp_path / "one"))
    assert code == 0 and again == one and "already completed" in err


def test_world_size_without_row_noise_is_bad_input(tmp_path, capsys):
    code = main(["run", "--task", "arith", "--algo", "grpo", *TWO, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "rollout.rng=row" in err and "valid" in err
    assert not any(tmp_path.iterdir())


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "rlsuite.suite.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_preempted_two_process_run_resumes_to_the_one_process_result(tmp_path, capsys):
    budget = ["--budget", "samples=320", "--set", "train.checkpoint_every=2"]
    code, ref, err = _run(capsys, *DP, *budget, "--out", str(tmp_path / "ref"))
    assert code == 0, err
    proc = _cli(*DP, *TWO, *budget, "--out", str(tmp_path / "dp"))
    status = tmp_path / "dp" / ref.name / "status.json"
    t0 = time.time()
    while time.time() - t0 < 180:
        try:
            if json.loads(status.read_text()).get("step", 0) >= 3:
                break
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # to the launcher: forwarded to both ranks, which agree on the step
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    st = json.loads(status.read_text())
    assert st["state"] == "preempted" and st["step"] < 20
    again = _cli(*DP, *TWO, *budget, "--out", str(tmp_path / "dp"))
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    st = json.loads(status.read_text())
    assert st["state"] == "completed" and st["attempt"] == 2 and st["step"] == 20
    assert_same_run(ref, status.parent)


SWEEP = """
name: dp
tasks: [arith]
algorithms: [grpo]
seeds: [1]
budget: {{samples: 48}}
set: {{eval.max_prompts: 8, eval.test_prompts: 8, rollout.prompts_per_step: 4, rollout.group_size: 4, rollout.rng: row,
      dist.world_size: 2}}
resources: {{timeout_min: 10, mem_gb: 2, tasks_per_node: {tasks}}}
"""


def test_sweep_refuses_a_world_size_other_than_the_tasks_per_job(tmp_path, capsys):
    spec = tmp_path / "dp.yaml"
    spec.write_text(SWEEP.format(tasks=1))
    code = main(["sweep", "run", str(spec), "--out", str(tmp_path / "out"), "--cluster", "local"])
    err = capsys.readouterr().err
    assert code == 2 and "dist.world_size=2" in err and "tasks_per_node=1" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_local_submitit_sweep_runs_one_rank_per_task(tmp_path, capsys):
    """submitit's local executor with tasks_per_node=2: ranks from ``JobEnvironment``."""
    spec = tmp_path / "dp.yaml"
    spec.write_text(SWEEP.format(tasks=2))
    code = main(["sweep", "run", str(spec), "--out", str(tmp_path / "out"), "--cluster", "local", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    (run,) = [p.parent for p in (tmp_path / "out" / "dp").glob("*/status.json")]
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "completed" and st["step"] == 3, st
    assert json.loads((run / "env.json").read_text())["world_size"] == 2
    code, ref, err = _run(capsys, *DP[:-4], "--budget", "samples=48", "--out", str(tmp_path / "ref"))
    assert code == 0 and ref.name == run.name, err
    m1, m2 = read_jsonl(ref / "metrics.jsonl"), read_jsonl(run / "metrics.jsonl")
    assert [r["reward/mean"] for r in m1] == [r["reward/mean"] for r in m2]
    assert [r["budget/gen_tokens"] for r in m1] == [r["budget/gen_tokens"] for r in m2]


@pytest.mark.slow
def test_a_rank_that_dies_fails_the_run_and_a_rerun_completes_it(tmp_path):
    """SIGKILL rank 1 mid-run: rank 0 is left blocked in a collective; the local launcher stops it
    after the grace period and records the run ``failed`` (exit 1), naming the dead rank; running
    the same spec again resumes and completes it."""

    from rlsuite.suite.distributed import launch_local
    from rlsuite.suite.runner import execute
    from tests.fakes import kill_rank_when
    from rlsuite.suite.spec import resolve

    sets = [("eval.max_prompts", 8),
        ("eval.test_prompts", 8), ("rollout.prompts_per_step", 4), ("rollout.group_size", 4),
            ("rollout.rng", "row"), ("dist.world_size", 2), ("train.checkpoint_every", 1)]
    spec = resolve("arith", "grpo", "tiny", 1, sets=sets, budgets=[("updates", 40)])
    run = tmp_path / spec.run_id
    watcher, killed = kill_rank_when(run, at_step=2, timeout_s=300)
    assert launch_local(spec, tmp_path, execute, grace_s=2.0) == 1
    watcher.join(5)
    assert killed, "rank 1 was never seen running"
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "failed" and "rank 1 exited with code -9" in st["reason"], st
    code, run_dir = execute(spec, tmp_path)  # the same spec again: resumes from the checkpoint
    assert code == 0 and run_dir == run
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(1, 41))


def _report_env(queue, key: str) -> None:
    import sys as _sys

    from rlsuite.suite.distributed import PRELOAD

    queue.put((os.environ.get(key), os.getcwd(), all(m in _sys.modules for m in PRELOAD)))


def test_ranks_start_with_the_launchers_environment_and_folder_of_the_moment(tmp_path, monkeypatch):
    """Ranks are forked from a server that imported the heavy modules once (they are there when the
    rank starts); each still gets the
    environment and working folder the launcher has when it starts the rank (what a spawned
    process gets), not the server's from its own start."""
    from rlsuite.suite.distributed import in_launch_env, launch_env, rank_context

    ctx = rank_context()
    seen = []
    for i, folder in enumerate((tmp_path / "a", tmp_path / "b")):
        folder.mkdir()
        monkeypatch.setenv("RLSUITE_TEST_LAUNCH", f"value-{i}")
        monkeypatch.chdir(folder)
        q = ctx.SimpleQueue()
        p = ctx.Process(target=in_launch_env, args=(launch_env(), _report_env, q, "RLSUITE_TEST_LAUNCH"))
        p.start()
        p.join(120)
        assert p.exitcode == 0
        seen.append(q.get())
    # the heavy modules came with the rank (a spawned one would not have transformers' Llama or the runner:
    # importing this test module does not import them)
    preloaded = "forkserver" in __import__("multiprocessing").get_all_start_methods()
    assert seen == [("value-0", str(tmp_path / "a"), preloaded), ("value-1", str(tmp_path / "b"), preloaded)]
