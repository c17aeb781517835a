"""Helpers of tests/integration/test_fsdp.py and benchmarks/fsdp.py: build a trainer the way the
runner does, step it and record what the step-1/step-2 equivalence checks compare; run that
in W gloo ranks (started as the launcher starts them) (``dist.shard=fsdp``) or in this process.

Spawned workers import this module by name, so it holds no test functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch


def build_trainer(spec, out: Path):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.trainer import Trainer
    from rlsuite.suite.warmstart import warm_started
    from rlsuite.tasks.base import TASKS

    task = TASKS.get(spec.task.name)(spec.task)
    algo = ALGORITHMS.get(spec.algo.name)(spec.algo)
    model, tok, embedded = load_model(spec.model)
    if embedded and spec.model.warm_start == "task":
        warm_started(task, model, tok, spec.model.name, 1)
    run_dir = Path(out) / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    return Trainer(spec, run_dir, task, algo, model, tok)


def full_params(tr) -> dict[str, torch.Tensor]:
    """The policy's full parameters on the CPU (a collective when sharded; rank 0 gets them)."""
    return tr.parallel.full_state(tr.state.model, keep=True)


def peak_rss_kb() -> int:
    """This process's peak resident set (``VmHWM``; unlike ``ru_maxrss`` it is not inherited
    across the exec of a spawned process)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def probe(spec, out: Path, steps: int = 2) -> dict[str, Any]:
    """Step a fresh trainer ``steps`` times: metric rows, the rollout tokens of each step, the
    step-1 parameter update, per-rank parameter/optimizer bytes and step times."""
    from rlsuite.suite.sharding import state_bytes

    tr = build_trainer(spec, out)
    tokens: list[torch.Tensor] = []
    orig = tr.rollouts.rollout

    def rollout(idx, ctx, attempt):
        rec, m = orig(idx, ctx, attempt)
        tokens.append(rec.tokens.cpu().clone())
        return rec, m

    tr.rollouts.rollout = rollout
    norms64: list[float] = []  # unsharded: the actor's gradient norm accumulated in float64 (before clipping)
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(params, max_norm, *a, **kw):
        grads = [p.grad for p in params if p.grad is not None]
        norms64.append(float(sum(torch.linalg.vector_norm(g, dtype=torch.float64) ** 2 for g in grads) ** 0.5))
        return clip(params, max_norm, *a, **kw)

    before = full_params(tr)
    rows, times, delta, mem = [], [], None, None
    for i in range(steps):
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_ = recording_clip
        try:
            rows.append(tr.step())
        finally:
            torch.nn.utils.clip_grad_norm_ = clip
        times.append(time.perf_counter() - t0)
        if i == 0:
            after = full_params(tr)
            delta = {k: after[k] - before[k] for k in before}
            mem = state_bytes(tr.state)
    return {"rows": rows, "tokens": tokens, "delta": delta, "mem": mem, "times": times, "norms64": norms64,
            "maxrss_kb": peak_rss_kb(),
            "rank": tr.world.rank, "world_size": tr.world.size}


def _worker(rank: int, size: int, store: str, specs: list, out: str, result: str, queue, steps: int,
            deltas: bool) -> None:
    from rlsuite.suite.distributed import init, shutdown

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        init("gloo", f"file://{store}", rank, size, rank)
        res = [probe(spec, Path(out) / f"{i}", steps) for i, spec in enumerate(specs)]
        if rank and not deltas:  # large models: rank 0's gathered update only (every rank has the same)
            res = [{**r, "delta": None} for r in res]
        torch.save(res, f"{result}.{rank}")
        queue.put((rank, None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        queue.put((rank, traceback.format_exc()))
    finally:
        shutdown()


def spawn_probe(specs: list, world_size: int, out: Path, steps: int = 2, timeout_s: float = 900,
                deltas: bool = True) -> list[list[dict]]:
    """:func:`probe` of each spec in ``world_size`` spawned gloo ranks (one group for all specs);
    per spec, every rank's result."""
    from rlsuite.suite.distributed import in_launch_env, launch_env, rank_context

    ctx = rank_context()  # the launcher's own way of starting ranks
    queue = ctx.SimpleQueue()
    tmp = tempfile.mkdtemp(prefix="rlsuite-fsdp-")
    result = str(Path(tmp) / "result")
    env = launch_env()
    procs = [ctx.Process(target=in_launch_env, args=(env, _worker, r, world_size, f"{tmp}/store", specs, str(out),
                                                     result, queue, steps, deltas))
             for r in range(world_size)]
    for p in procs:
        p.start()
    errors, done, t0 = [], 0, time.time()
    while done < world_size and time.time() - t0 < timeout_s:
        if not queue.empty():
            rank, err = queue.get()
            done += 1
            if err:
                errors.append(f"rank {rank}:\n{err}")
                break
        elif not any(p.is_alive() for p in procs) and queue.empty():
            break
        else:
            time.sleep(0.1)
    for p in procs:
        p.join(5 if not errors else 1)
        if p.is_alive():
            p.kill()
            p.join()
    try:
        if errors or done < world_size:
            raise AssertionError("\n".join(errors) or f"ranks ended without a result: {[p.exitcode for p in procs]}")
        per_rank = [torch.load(f"{result}.{r}", weights_only=False) for r in range(world_size)]
    finally:  # each rank's result holds whole-model updates (622 MB for the real model): never left behind
        shutil.rmtree(tmp, ignore_errors=True)
    return [[per_rank[r][i] for r in range(world_size)] for i in range(len(specs))]


def _run_worker(rank: int, size: int, store: str, spec, out: str, stop_at, queue) -> None:
    """One rank of :func:`spawn_run`: ``rlsuite.suite.runner.execute`` in the group, optionally asked to
    stop (``preempted``, as SIGUSR2 would) after step ``stop_at``."""
    from rlsuite.suite.distributed import init, shutdown

    torch.set_num_threads(1)
    try:
        if size > 1:
            init("gloo", f"file://{store}", rank, size, rank)
        if stop_at is not None:
            from rlsuite.suite import lifecycle
            from rlsuite.suite.errors import Interrupted
            from rlsuite.suite.trainer import Trainer

            step = Trainer.step

            def counted(self):
                row = step(self)
                self.signals.signal = Interrupted("preempted", 130) if self.step_no == stop_at else None
                return row

            Trainer.step = counted
            lifecycle.Signals.install = lambda self: None
        from rlsuite.suite.runner import execute

        code, _ = execute(spec, Path(out))
        queue.put((rank, code, None))
    except BaseException:  # noqa: BLE001
        queue.put((rank, 1, traceback.format_exc()))
    finally:
        shutdown()


def spawn_run(spec, out: Path, world_size: int, stop_at=None, timeout_s: float = 900) -> int:
    """``execute(spec, out)`` in ``world_size`` spawned ranks (one process for a world size of 1);
    rank 0's exit code."""
    from rlsuite.suite.distributed import in_launch_env, launch_env, rank_context

    ctx = rank_context()
    queue = ctx.SimpleQueue()
    tmp = tempfile.mkdtemp(prefix="rlsuite-fsdp-")
    env = launch_env()
    procs = [ctx.Process(target=in_launch_env, args=(env, _run_worker, r, world_size, f"{tmp}/store", spec, str(out),
                                                     stop_at, queue))
             for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, tuple] = {}
    t0 = time.time()
    while len(results) < world_size and time.time() - t0 < timeout_s:
        while not queue.empty():
            r = queue.get()
            results[r[0]] = r
        if any(r[2] for r in results.values()) or (not any(p.is_alive() for p in procs) and queue.empty()):
            break
        time.sleep(0.1)
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    shutil.rmtree(tmp, ignore_errors=True)
    errors = [r[2] for r in results.values() if r[2]]
    if errors or 0 not in results:
        raise AssertionError("\n".join(errors) or f"rank 0 ended without a result: {[p.exitcode for p in procs]}")
    return int(results[0][1])
