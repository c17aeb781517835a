"""Execute one run spec into ``<out>/<run_id>/`` with the re-run rules of the run-folder contract.

Exit codes: 0 completed (also "already completed": nothing is written), 3 diverged (also a
re-run of a diverged run: nothing is written), 1 failed, 2 bad input (nothing written),
130 preempted (SIGINT, or submitit's SIGUSR2), 143 cancelled (SIGTERM).

Re-running: ``completed`` → 0; ``diverged`` → 3; ``failed``, ``preempted``, ``cancelled`` and
a stale ``running`` → resume from the checkpoint (``attempt`` + 1); a live ``running`` or a
different spec under the same run id → 2.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

import torch

from suite.config import RunSpec, drop_later_defaults
from suite.errors import BadInput
from suite.runfolder import RunFolder, atomic_write_json, env_info, is_stale, read_json

EXIT = {"completed": 0, "diverged": 3, "failed": 1, "preempted": 130, "cancelled": 143}


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
    """A spec document without the fields that do not change results (labels, checkpointing)."""
    d = {k: v for k, v in d.items() if k not in ("sweep", "factors", "tuning")}
    d["train"] = {k: v for k, v in d.get("train", {}).items() if k != "checkpoint_every"}
    d["rollout"] = {k: v for k, v in d.get("rollout", {}).items() if k != "vllm_gpu_memory"}
    d["train"].pop("world_size", None)  # a run may resume with another world size (same run)
    return drop_later_defaults(d)  # settings at their defaults, absent from older spec.json files


def _check_existing_ranked(run_dir: Path, spec: RunSpec, world) -> tuple[Optional[int], int]:
    """:func:`check_existing` decided by data-parallel rank 0 alone (rank 0 starts writing the
    status right after, which must not change the other ranks' decision) and broadcast."""
    if not world.active:
        return check_existing(run_dir, spec)
    res: Optional[tuple] = None
    if world.main:
        try:
            res = ("ok", check_existing(run_dir, spec))
        except BadInput as e:
            res = ("bad", str(e))
    res = world.broadcast_object(res)
    if res[0] == "bad":
        raise BadInput(res[1])
    return tuple(res[1])


def execute(spec: RunSpec, out: Path, on_ready: Optional[Callable[[Path], None]] = None) -> tuple[int, Path]:
    """Run ``spec`` into ``out/<run_id>``; return (exit code, run dir). Raises BadInput (exit 2)
    before anything is written."""
    import algorithms  # noqa: F401
    import tasks  # noqa: F401
    from algorithms.base import ALGORITHMS
    from suite.models import load_model
    from suite.distributed import launch_local, world as current_world
    from suite.trainer import Trainer
    from suite.warmstart import warm_started
    from tasks.base import TASKS

    run_dir = Path(out) / spec.run_id
    world = current_world()
    if world.active and world.size != spec.train.world_size:
        raise BadInput(f"train.world_size={spec.train.world_size} but this process group has {world.size} processes")
    if spec.train.world_size > 1 and not world.active:  # spawn the data-parallel ranks on this machine
        code, _ = check_existing(run_dir, spec)  # exit codes and bad input before anything starts
        return (code, run_dir) if code is not None else (launch_local(spec, Path(out)), run_dir)
    code, attempt = _check_existing_ranked(run_dir, spec, world)
    if code is not None:
        return code, run_dir
    if spec.rollout.engine == "vllm":  # fail before loading anything when vLLM or a GPU is missing
        from suite.vllm_engine import require_vllm

        require_vllm()
    torch.set_num_threads(spec.train.num_threads)
    task = TASKS.get(spec.task.name)(spec.task)
    algo = ALGORITHMS.get(spec.algo.name)(spec.algo)
    model, tok, embedded = load_model(spec.model)
    warm = {}
    if embedded and spec.model.warm_start == "task":
        warm = warm_started(task, model, tok, spec.model.name, spec.train.num_threads)
    try:
        trainer = Trainer(spec, run_dir, task, algo, model, tok)  # validates capabilities and splits
        if world.main:  # data-parallel ranks > 0 write nothing
            run_dir.mkdir(parents=True, exist_ok=True)
            if attempt == 1:
                atomic_write_json(run_dir / "spec.json", spec.to_dict() | {"run_id": spec.run_id})
                atomic_write_json(run_dir / "env.json", env_info(str(trainer.device), spec.model.dtype,
                                                                 spec.train.num_threads)
                                  | {"warm_start": warm, "world_size": world.size})
            if on_ready:
                on_ready(run_dir)
        try:
            state, reason = trainer.train(resume=attempt > 1, attempt=attempt)
        except Exception as e:  # noqa: BLE001 - any crash is recorded as `failed`
            trainer.folder.set_status(state="failed", reason=f"{type(e).__name__}: {e}")
            log(traceback.format_exc())
            return 1, run_dir
        trainer.folder.set_status(state=state, reason=reason, step=trainer.step_no, budget=trainer.budget.counters)
        return EXIT[state], run_dir
    finally:
        task.close()


def summary(run_dir: Path) -> str:
    """One line: state, steps and the last val/test greedy accuracy."""
    from suite.runfolder import read_jsonl

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


__all__ = ["execute", "check_existing", "summary", "EXIT", "RunFolder"]
