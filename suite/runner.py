"""Execute one run spec into ``<out>/<run_id>/`` with the re-run rules of the run-folder contract.

Exit codes: 0 completed (also "already completed": nothing is written), 3 diverged (also a
re-run of a diverged run: nothing is written), 1 failed, 2 bad input (nothing written),
130 preempted (SIGINT, or submitit's SIGUSR2), 143 cancelled (SIGTERM).

A completed run's ``checkpoint/`` is deleted once ``completed`` is recorded (``final/`` keeps the
policy), unless ``train.keep_checkpoint``.

Re-running: ``completed`` → 0; ``diverged`` → 3; ``failed``, ``preempted``, ``cancelled`` and
a stale ``running`` → resume from the checkpoint (``attempt`` + 1); a live ``running``, a held
lock or a different spec under the same run id → 2.

One writer per run folder: :func:`execute` takes ``<out>/<run_id>.lock``
(:class:`rlsuite.suite.runfolder.RunLock`) before it reads anything in the folder and holds it until it
returns (the kernel drops it if the process dies); a second copy exits 2 naming the holder's
host and pid. A data-parallel launcher holds it for its spawned ranks (they inherit
``RLSUITE_RUN_LOCK``); in a SLURM data-parallel job rank 0 takes it. A full disk ends the run
with one message naming the folder and "no space left", exit 1 and state ``failed`` (written as
soon as it can be: the update is kept in memory and retried, at the latest at exit).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

import torch

from rlsuite.suite.config import RunSpec, identity_doc, resolve_threads
from rlsuite.suite.migrate import migrate
from rlsuite.suite.errors import BadInput
from rlsuite.suite.runfolder import (RunFolder, RunLock, RunLocked, atomic_write_json, env_info, is_disk_full, is_stale,
                                     lock_path, read_json)

EXIT = {"completed": 0, "diverged": 3, "failed": 1, "preempted": 130, "cancelled": 143}
#: Set by a data-parallel launcher holding the lock (the path) for the ranks it spawns.
LOCK_ENV = "RLSUITE_RUN_LOCK"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def check_existing(run_dir: Path, spec: RunSpec) -> tuple[Optional[int], int]:
    """Decide what a re-run does. Returns (exit code to return now or None, attempt number)."""
    status = read_json(run_dir / "status.json")
    old_spec = read_json(run_dir / "spec.json")
    new_spec = json.loads(json.dumps(spec.to_dict() | {"run_id": spec.run_id}))
    if old_spec is not None and _semantic(old_spec) != _semantic(new_spec):
        raise BadInput(f"{run_dir} holds a different spec under the same run id; move it away or use another --out")
    if status is None:
        return None, 1
    state = status.get("state")
    if state == "completed":
        log(f"already completed: {run_dir} (nothing written)")
        return 0, 0
    if state == "diverged":
        log(f"already diverged: {run_dir} ({status.get('reason')}); nothing written")
        return 3, 0
    if state == "running" and not is_stale(status):
        raise BadInput(f"{run_dir} is running now (pid {status.get('pid')} on {status.get('host')}, "
                       f"heartbeat {status.get('updated_at')}); not starting a second copy")
    return None, int(status.get("attempt") or 0) + 1


def _semantic(d: dict) -> dict:
    """A spec document's run identity (:func:`rlsuite.suite.config.identity_doc`, the rule of the run
    id), an older document read through :func:`rlsuite.suite.migrate.migrate`."""
    return identity_doc(migrate(d))


class FolderLocked(BadInput):
    """Another process holds the run folder's lock (exit 2; a sweep skips the run)."""

    def __init__(self, message: str, holder: dict) -> None:
        super().__init__(message)
        self.holder = holder


class _Claim:
    """The run folder claimed for this process: the lock (when this process takes it), then the
    re-run decision, then (going ahead) an interrupted checkpoint swap finished and leftover
    temporaries removed. Raises BadInput for a held lock or a live / different run."""

    def __init__(self, run_dir: Path, spec: RunSpec, take_lock: bool) -> None:
        self.run_dir, self.spec, self.take_lock = run_dir, spec, take_lock
        self.lock: Optional[RunLock] = None

    def __call__(self) -> tuple[Optional[int], int]:
        if self.take_lock:
            # stop signals wait until the lock is ours and recorded here (so that `release` in the
            # caller's finally removes it); a SIGTERM inside `acquire` would leave the file behind
            sigs = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR2}
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
            try:
                self.lock = RunLock(lock_path(self.run_dir.parent, self.spec.run_id), self.spec.run_id).acquire()
            except RunLocked as e:
                raise FolderLocked(f"{self.run_dir} is locked by another run (pid {e.holder.get('pid', '?')} on "
                               f"{e.holder.get('host', '?')}, heartbeat {e.holder.get('heartbeat', '?')}; lock "
                               f"{e.path}); not starting a second copy", e.holder) from None
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        code, attempt = check_existing(self.run_dir, self.spec)
        return code, attempt

    def prepare(self) -> None:
        """Going ahead (as the writer): finish an interrupted checkpoint swap, drop leftovers."""
        if not self.run_dir.is_dir():
            return
        folder = RunFolder(self.run_dir)
        used = folder.recover_dir("checkpoint")
        if used:
            log(f"recovered {self.run_dir / 'checkpoint'} from .checkpoint.{used} (a swap was interrupted)")
        folder.recover_dir("final")
        folder.clean_leftovers()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def _check_existing_ranked(claim: _Claim, world) -> tuple[Optional[int], int]:
    """:class:`_Claim` decided by data-parallel rank 0 alone (rank 0 starts writing the
    status right after, which must not change the other ranks' decision) and broadcast; the other
    ranks read the folder (the checkpoint) after rank 0 has prepared it."""
    if not world.active:
        res = claim()
        if res[0] is None:
            claim.prepare()
        return res
    res: Optional[tuple] = None
    failure: Optional[Exception] = None
    if world.main:
        try:
            out = claim()
            if out[0] is None:
                claim.prepare()
            res = ("ok", out)
        except BadInput as e:
            res = ("bad", str(e))
        except Exception as e:  # noqa: BLE001 - broadcast first: the other ranks must not hang
            res, failure = ("error", f"{type(e).__name__}: {e}"), e
    res = world.broadcast_object(res)
    if res[0] == "bad":
        raise BadInput(res[1])
    if res[0] == "error":
        raise failure if failure is not None else RuntimeError(f"rank 0 could not claim the run folder: {res[1]}")
    return tuple(res[1])


def _disk_full(run_dir: Path, folder: Optional[RunFolder], e: BaseException) -> int:
    """A full disk: one message naming the folder; state ``failed`` recorded when the run has a
    status (kept in memory and retried at exit when even that write fails); exit 1."""
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    what = "nothing recorded"
    if folder is not None and not folder._status:
        folder._status.update(read_json(run_dir / "status.json") or {})
    if folder is not None and folder._status:  # else the run never started: a re-run starts afresh
        try:
            folder.set_status(state="failed", reason=f"no space left on device: {detail}")
            what = "state failed recorded"
        except OSError:
            atexit.register(_retry_status_at_exit, folder)
            what = "state failed kept in memory (written at exit if space allows)"
    log(f"rlsuite run: error: no space left on device in {run_dir} ({detail}); {what}; free space and re-run "
        f"to resume from the last checkpoint")
    return 1


def _retry_status_at_exit(folder: RunFolder) -> None:
    """Write a status update a full disk kept in memory, unless another run holds the folder now."""
    if not folder.unsaved:
        return
    st = read_json(folder.file("status.json")) or {}
    if st.get("pid") not in (None, os.getpid()):
        return
    try:
        with RunLock(lock_path(folder.path.parent, folder.path.name), folder.path.name).acquire(wait_s=0):
            folder.flush_status()
    except (RunLocked, OSError):
        pass


def execute(spec: RunSpec, out: Path, on_ready: Optional[Callable[[Path], None]] = None) -> tuple[int, Path]:
    """Run ``spec`` into ``out/<run_id>``; return (exit code, run dir). Raises BadInput (exit 2)
    before anything is written (a held lock included)."""
    run_dir = Path(out) / spec.run_id
    from rlsuite.suite.distributed import world as current_world

    world = current_world()
    if world.active and world.size != spec.dist.world_size:
        raise BadInput(f"dist.world_size={spec.dist.world_size} but this process group has {world.size} processes")
    lock_file = lock_path(Path(out), spec.run_id)
    inherited = os.environ.get(LOCK_ENV) == str(lock_file.absolute())  # our launcher holds it
    claim = _Claim(run_dir, spec, take_lock=world.main and not inherited)
    old_handlers = _exit_on_signals() if claim.take_lock else {}
    try:
        return _execute(spec, Path(out), run_dir, world, claim, on_ready)
    finally:
        claim.release()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


def _exit_on_signals() -> dict:
    """SIGTERM / SIGUSR2 outside the training loop (which stops at a step boundary on its own)
    exit through the ``finally`` blocks (the lock is released and its file removed) instead of
    killing the process; only where the signal has its default action (not under submitit)."""
    def handler(code: int):
        def h(signum, frame):
            raise SystemExit(code)
        return h

    old = {}
    try:
        for sig, code in ((signal.SIGTERM, 143), (signal.SIGUSR2, 130)):
            if signal.getsignal(sig) is signal.SIG_DFL:
                old[sig] = signal.signal(sig, handler(code))
    except ValueError:  # not the main thread
        pass
    return old


def _execute(spec: RunSpec, out: Path, run_dir: Path, world, claim: _Claim,
             on_ready: Optional[Callable[[Path], None]]) -> tuple[int, Path]:
    from rlsuite import algorithms  # noqa: F401
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite import progress
    from rlsuite.suite.distributed import launch_local
    from rlsuite.suite.models import load_model
    from rlsuite.suite.trainer import Trainer
    from rlsuite.suite.warmstart import warm_started
    from rlsuite.tasks.base import TASKS

    if spec.dist.world_size > 1 and not world.active:  # spawn the data-parallel ranks on this machine
        code, _ = claim()  # the lock, exit codes and bad input before anything starts
        if code is not None:
            return code, run_dir
        os.environ[LOCK_ENV] = str(claim.lock.path.absolute())  # the spawned ranks inherit it
        try:
            return launch_local(spec, out, execute), run_dir
        finally:
            os.environ.pop(LOCK_ENV, None)
    try:
        code, attempt = _check_existing_ranked(claim, world)
    except OSError as e:
        if world.main and is_disk_full(e, run_dir):
            return _disk_full(run_dir, None, e), run_dir
        raise
    if code is not None:
        return code, run_dir
    if spec.rollout.engine == "vllm":  # fail before loading anything when vLLM or a GPU is missing
        from rlsuite.suite.engines.vllm import require_vllm

        require_vllm()
    threads = resolve_threads(spec.train.num_threads)  # `auto`: this machine's cores
    torch.set_num_threads(threads)
    task = TASKS.get(spec.task.name)(spec.task)
    algo = ALGORITHMS.get(spec.algo.name)(spec.algo)
    warm = {}
    with progress.using(spec.log.progress if world.main else "off", spec.log.progress_every_s):  # their loops
        model, tok, embedded = load_model(spec.model)  # (a pinned model's sha256 check)
        if embedded and spec.model.warm_start == "task":
            warm = warm_started(task, model, tok, spec.model.name, threads)  # (an SFT built here)
    trainer = None
    try:
        trainer = Trainer(spec, run_dir, task, algo, model, tok)  # validates capabilities and splits
        if world.main:  # data-parallel ranks > 0 write nothing
            run_dir.mkdir(parents=True, exist_ok=True)
            if attempt == 1:
                resolved = {"resolved": trainer.resolved}  # the `auto` settings as this run resolved them
                atomic_write_json(run_dir / "spec.json", spec.to_dict() | {"run_id": spec.run_id} | resolved)
                atomic_write_json(run_dir / "env.json", env_info(str(trainer.device), spec.model.dtype, threads)
                                  | {"warm_start": warm, "world_size": world.size,
                                     "identity": dataclasses.asdict(spec.identity)} | resolved)
            if on_ready:
                on_ready(run_dir)
        try:
            state, reason = trainer.train(resume=attempt > 1, attempt=attempt)
        except Exception as e:  # noqa: BLE001 - any crash is recorded as `failed`
            if world.main and is_disk_full(e, run_dir):
                return _disk_full(run_dir, trainer.folder, e), run_dir
            try:
                trainer.folder.set_status(state="failed", reason=f"{type(e).__name__}: {e}")
            except OSError as e2:
                if is_disk_full(e2, run_dir):
                    return _disk_full(run_dir, trainer.folder, e2), run_dir
                raise
            log(traceback.format_exc())
            return 1, run_dir
        trainer.folder.set_status(state=state, reason=reason, step=trainer.step_no, budget=trainer.budget.counters)
        if state == "completed" and not spec.train.keep_checkpoint:
            trainer.folder.remove_dir("checkpoint")  # a completed run never resumes; final/ holds the policy
        return EXIT[state], run_dir
    except OSError as e:  # spec.json / env.json / the final status on a full disk
        if world.main and is_disk_full(e, run_dir):
            return _disk_full(run_dir, trainer.folder if trainer is not None else None, e), run_dir
        raise
    finally:
        if trainer is not None and trainer.folder.unsaved:
            trainer.folder.flush_status()  # a status update a full disk kept in memory: once more
        task.close()


def summary(run_dir: Path) -> str:
    """One line: state, steps and the last val/test greedy accuracy."""
    from rlsuite.suite.runfolder import read_jsonl

    st = read_json(run_dir / "status.json") or {}
    evals = read_jsonl(run_dir / "evals.jsonl")
    parts = [f"state={st.get('state')}", f"steps={st.get('step')}"]
    for e in evals:
        if e.get("step") == 0 and e.get("split") == "val":
            parts += [f"{k.split('/', 2)[-1]}@start={v:.3f}" for k, v in e.items() if k.startswith("eval/")]
    for e in evals:
        if e.get("final"):
            parts += [f"{e['split']}:{k.split('/', 2)[-1]}={v:.3f}" for k, v in e.items() if k.startswith("eval/")]
    return " ".join(parts)


__all__ = ["execute", "check_existing", "summary", "EXIT", "RunFolder", "FolderLocked", "LOCK_ENV"]
