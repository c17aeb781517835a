"""Data parallelism within one run: ``dist.world_size`` processes with torch.distributed
(gloo on CPU, NCCL on CUDA).

Exactness strategy (a W-process run equals the one-process run with the same global batch):

* every rank holds the same model, optimizer, algorithm state and the **same full global
  batch**, so advantages, filters, controllers, per-prompt tables and logged metrics are the
  same on every rank and no algorithm needs to know about ranks;
* rollout generation is sharded: each rank generates a contiguous shard of the rows of each
  generation call (whole prompt groups when W divides P) and the records are all-gathered
  (``all_gather_object``) and concatenated in rank order. Sampling noise must not depend on
  the split, so ``rollout.rng=row`` is required (:class:`rlsuite.suite.engines.RowNoise`);
* scoring passes (π_old, π_ref, values) run on the full gathered batch on every rank
  (correctness first: bitwise the same inputs as one process; they are not sharded);
* the update is sharded: each rank runs forward/backward on its contiguous shard of every
  minibatch with the weights of the *global* normaliser (``aggregation_weights`` of the whole
  minibatch), then the gradients are summed with one all-reduce before clipping and the
  optimizer step, which therefore equals the one-process step up to floating-point summation
  order. Update metrics are all-gathered and merged as one process would merge them.
* rank 0 alone writes the run folder and runs the evals; the other ranks write nothing.
  Every rank reads the checkpoint on resume (the run folder must be on a shared file system
  across nodes). Wall-clock charges and stop signals are agreed across ranks (max), so every
  rank stops at the same step.

Launch: :func:`launch_local` starts W processes on this machine (``rlsuite run --set
dist.world_size=W``; a file store in a temporary folder for the rendezvous; the processes come
from :func:`rank_context`: forked from a server that has the heavy modules imported, each with
the launcher's environment and working folder, as a spawned process would have them); inside a
submitit job with W tasks :func:`init_from_submitit` uses ``submitit.JobEnvironment()`` for
the ranks and the first node as ``MASTER_ADDR``. NCCL (CUDA) is implemented but untested here.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from rlsuite.suite.errors import BadInput

_LOCAL_RANK = 0


def timeout() -> datetime.timedelta:
    """Collective timeout: rank 0 evaluates while the others wait (``RLSUITE_DIST_TIMEOUT_MIN``)."""
    return datetime.timedelta(minutes=float(os.environ.get("RLSUITE_DIST_TIMEOUT_MIN", "60")))


@dataclass(frozen=True)
class World:
    """This process's place in the run's process group (rank 0 of 1 without one)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the only rank that writes the run folder and evaluates."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.size > 1

    def shard(self, n: int) -> tuple[int, int]:
        """This rank's contiguous share ``[lo, hi)`` of ``n`` rows (sizes differ by at most 1)."""
        return n * self.rank // self.size, n * (self.rank + 1) // self.size

    # -- collectives (no-ops in one process) --------------------------------------------
    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
            else torch.device("cpu")

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (tensors inside should be on the CPU)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_reduce_max(self, values: Sequence[float]) -> list[float]:
        if not self.active:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers into every rank's ``module`` (in place)."""
        if not self.active:
            return
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=0)

    def all_reduce_grads(self, params: Sequence[torch.Tensor], flag: float = 0.0) -> float:
        """Sum ``.grad`` of ``params`` over ranks in place (one flat buffer per dtype) and
        return the sum of ``flag`` (e.g. "this rank saw a non-finite loss").

        A parameter whose gradient is ``None`` on every rank keeps ``None`` (as in one
        process, where AdamW then skips it); one that has a gradient on some rank gets the sum.
        """
        params = [p for p in params if p.requires_grad]
        if not self.active or not params:
            return float(flag)
        dev = params[0].device
        meta = torch.tensor([float(p.grad is not None) for p in params] + [float(flag)], dtype=torch.float64,
                            device=dev)
        dist.all_reduce(meta)
        has = meta[:-1].tolist()
        buckets: dict[torch.dtype, list[int]] = {}
        for i, p in enumerate(params):
            if has[i]:
                buckets.setdefault(p.dtype, []).append(i)
        for idx in buckets.values():
            flat = torch.cat([(params[i].grad if params[i].grad is not None else torch.zeros_like(params[i]))
                              .reshape(-1) for i in idx])
            dist.all_reduce(flat)
            off = 0
            for i in idx:
                p = params[i]
                g = flat[off:off + p.numel()].view_as(p)
                off += p.numel()
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
        return float(meta[-1])


def world() -> World:
    """The current process group as a :class:`World` (size 1 when none is initialised)."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), _LOCAL_RANK)
    return World()


def backend_for(device: str) -> str:
    """``nccl`` when the run trains on CUDA (``train.device`` cuda, or auto with a GPU), else ``gloo``."""
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def init(backend: str, init_method: str, rank: int, size: int, local_rank: int) -> World:
    """Join the run's process group (and pick this rank's GPU under NCCL)."""
    global _LOCAL_RANK
    _LOCAL_RANK = local_rank
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, timeout=timeout())
    return world()


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------
# Launchers


def init_from_submitit(world_size: int, device: str) -> World:
    """Inside a submitit job: one rank per task, ``MASTER_ADDR`` = the job's first node.

    Raises ``BadInput`` when the job's task count differs from ``dist.world_size``.
    """
    import submitit

    env = submitit.JobEnvironment()
    if env.num_tasks != world_size:
        raise BadInput(f"dist.world_size={world_size} but this job has {env.num_tasks} task(s); set the sweep's "
                       f"resources.nodes × resources.tasks_per_node to {world_size} (one task per process; the "
                       f"debug cluster runs one task: use --cluster local or slurm)")
    addr = os.environ.get("MASTER_ADDR") or env.hostnames[0]
    port = int(os.environ.get("RLSUITE_DIST_PORT") or 20000 + zlib.crc32(str(env.job_id).encode()) % 30000)
    return init(backend_for(device), f"tcp://{addr}:{port}", env.global_rank, env.num_tasks, env.local_rank)


PRELOAD = ("torch", "torch.distributed", "transformers.models.llama.modeling_llama", "rlsuite.suite.runner")
"""What the rank server imports once (about 5 s of CPU that every spawned rank paid again)."""


def rank_context():
    """The ``multiprocessing`` context local ranks start from: ``forkserver`` with :data:`PRELOAD`
    imported in the server (``spawn`` where the platform has no forkserver). A forked rank inherits
    the server's environment and folder, not the launcher's at launch time: start its target
    through :func:`in_launch_env`."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when the server starts (once per process)
    return ctx


def launch_env() -> tuple[dict, str]:
    """The launcher's environment and working folder, for :func:`in_launch_env`."""
    return dict(os.environ), os.getcwd()


def in_launch_env(env_cwd: tuple[dict, str], target: Callable, *args) -> Any:
    """Run ``target(*args)`` in a started rank with the environment and working folder the
    launcher had (``env_cwd`` from :func:`launch_env`), as a spawned process would."""
    env, cwd = env_cwd
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    return target(*args)


def _local_worker(rank: int, size: int, backend: str, init_method: str, spec, out: str, queue, run) -> None:
    """One spawned rank of :func:`launch_local`: join the group, ``run(spec, out)``, report (code, error)."""
    from rlsuite.suite.config import resolve_threads

    torch.set_num_threads(resolve_threads(spec.train.num_threads))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
    result: tuple = (rank, "error", 1, "exited without a result")
    try:
        init(backend, init_method, rank, size, rank)
        code, _ = run(spec, Path(out))
        result = (rank, "ok", code, None)
    except BadInput as e:
        result = (rank, "bad", 2, str(e))
    except KeyboardInterrupt:
        result = (rank, "ok", 130, None)
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the other ranks
        result = (rank, "error", 1, traceback.format_exc())
    finally:
        queue.put(result)
        try:
            shutdown()
        except Exception:  # noqa: BLE001
            pass


def launch_local(spec, out: Path, run: Callable[[Any, Path], tuple[int, Path]], grace_s: float = 60.0) -> int:
    """Run ``spec`` as ``dist.world_size`` processes on this machine (:func:`rank_context`), each calling
    ``run(spec, out)`` (the runner's ``execute``, passed down: a module-level function, so the
    spawned processes can import it); return rank 0's exit code. SIGINT, SIGTERM and SIGUSR2 are
    forwarded to the ranks, which agree on the step at which they stop. Once a rank ends with a
    non-zero code (or dies), the others get ``grace_s`` seconds to end too, then are stopped (a
    rank blocked in a collective whose peer is gone never returns); the run is then recorded
    ``failed`` unless rank 0 reported."""
    W = spec.dist.world_size
    backend = backend_for(spec.train.device)
    if backend == "nccl" and torch.cuda.device_count() < W:
        raise BadInput(f"dist.world_size={W} needs {W} GPUs on this machine (one per process); "
                       f"found {torch.cuda.device_count()}")
    tmp = tempfile.mkdtemp(prefix="rlsuite-dist-")
    ctx = rank_context()
    queue = ctx.SimpleQueue()
    env = launch_env()
    procs = [ctx.Process(target=in_launch_env, args=(env, _local_worker, r, W, backend, f"file://{tmp}/store", spec,
                                                     str(out), queue, run),
                         name=f"rlsuite-rank{r}") for r in range(W)]
    results: dict[int, tuple] = {}

    def forward(signum, frame):
        for p in procs:
            if p.is_alive():
                try:
                    os.kill(p.pid, signum)
                except ProcessLookupError:
                    pass

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)
    old = {}
    try:
        for s in sigs:
            old[s] = signal.signal(s, forward)
    except ValueError:  # not the main thread
        pass
    failed_at: Optional[float] = None
    try:
        for p in procs:
            p.start()
        while len(results) < W and (any(p.is_alive() for p in procs) or not queue.empty()):
            while not queue.empty():
                r = queue.get()
                results[r[0]] = r
            ending = [r for r in results.values() if r[1] != "ok" or r[2] != 0] + \
                     [p for p in procs if p.exitcode not in (None, 0)]
            if ending and failed_at is None:
                failed_at = time.time()
            if failed_at is not None and time.time() - failed_at > grace_s:
                break
            time.sleep(0.1)
        while not queue.empty():
            r = queue.get()
            results[r[0]] = r
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
            p.join()
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
    for r in sorted(results.values()):
        if r[1] == "bad":
            raise BadInput(r[3])
    errors = [r for r in sorted(results.values()) if r[1] == "error"]
    missing = [r for r in range(W) if r not in results]
    if errors or missing:
        for r in errors:
            print(f"rank {r[0]} failed:\n{r[3]}", file=sys.stderr)
        for r in missing:
            print(f"rank {r} exited with code {procs[r].exitcode} without a result", file=sys.stderr)
        # the root cause first: a rank that died without a result (its peers then fail in a
        # collective); a run rank 0 completed stays completed (_mark_failed leaves it)
        _mark_failed(Path(out) / spec.run_id, f"rank {missing[0]} exited with code {procs[missing[0]].exitcode}"
                     if missing else errors[0][3].strip().splitlines()[-1])
        if errors or 0 in missing:
            return 1
    return int(results[0][2])


def _mark_failed(run_dir: Path, reason: str) -> None:
    """A rank died while rank 0 still held the run: record ``failed`` (rank 0 was stopped, or failed
    in a collective with the dead peer — its own reason is kept after the root cause)."""
    from rlsuite.suite.runfolder import atomic_write_json, now_iso, read_json

    st = read_json(run_dir / "status.json")
    if st is not None and st.get("state") in ("running", "failed"):
        why = f"data-parallel rank failed: {reason}"
        if st.get("state") == "failed" and st.get("reason") and reason not in st["reason"]:
            why += f" (rank 0: {st['reason']})"
        atomic_write_json(run_dir / "status.json", st | {"state": "failed", "reason": why, "updated_at": now_iso()})


__all__ = ["World", "world", "init", "shutdown", "backend_for", "launch_local", "init_from_submitit"]
