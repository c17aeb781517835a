"""Launch expanded sweeps with submitit: SLURM job arrays, or local / debug executors.

Re-runs are idempotent by run id: ``completed`` and ``diverged`` runs are never resubmitted;
``preempted``, ``cancelled``, stale ``running`` and missing runs are; ``failed`` only with
``retry_failed``; a live ``running`` run, or one whose lock (``<root>/<run_id>.lock``) another
process holds, is left alone (and waited for locally), checked again right before each local
submission; a job that finds the lock held exits 2 and is reported as skipped. Nothing is
overwritten: the run folder rules of :mod:`rlsuite.suite.runner` apply inside every job.

Facts about submitit 1.5 that shape this module: its local executor starts every submitted
job at once, so rlsuite throttles local submissions itself (``workers``, one torch thread
each) and sets ``timeout_min`` from the spec (its default is 2 minutes); its debug executor
calls ``pdb.post_mortem`` on errors, so :class:`SweepJob` catches errors itself and returns
an exit code. Preemption: SLURM sends ``SIGUSR2`` ``signal_delay_s`` before the limit; the
trainer checkpoints at the step boundary (state ``preempted``), then the job hands over to
submitit, which requeues it (``checkpoint()`` returns the same job); the requeued job resumes
from the checkpoint. ``scancel`` (SIGTERM) leaves the run ``cancelled``.

A study (``--study``, :mod:`rlsuite.sweeps.study`): each job writes its run's compact copy into the
study folder the moment the run finishes (``completed`` or ``diverged``), so an interrupted study
keeps every finished run; a re-run skips the run ids whose copy is there.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Optional, Sequence

from rlsuite.suite.config import RunSpec
from rlsuite.suite.runfolder import atomic_write_json, is_stale, lock_holder, lock_path, read_json, read_jsonl
from rlsuite.sweeps.spec import Resources, SweepSpec

TERMINAL = ("completed", "diverged")


class SweepJob:
    """The callable each job runs: one run spec into ``root/<run_id>``.

    Checkpointable for submitit: on preemption/timeout it is requeued unchanged and resumes
    from the run's own checkpoint.
    """

    def __init__(self, spec_dict: dict, root: str, study: Optional[dict] = None) -> None:
        self.spec_dict, self.root, self.study = spec_dict, root, study

    def __call__(self) -> dict:
        import torch

        from rlsuite.suite import distributed
        from rlsuite.suite.errors import BadInput
        from rlsuite.suite.runner import FolderLocked, execute
        from rlsuite.suite.spec import spec_from_dict

        from rlsuite.suite.config import resolve_threads

        torch.set_num_threads(resolve_threads(self.spec_dict["train"]["num_threads"]))
        try:
            spec = spec_from_dict(self.spec_dict)
            submitted = self.spec_dict.get("run_id")
            if submitted and spec.run_id != submitted:
                return {"code": 2, "error": f"the code changed between submission and execution: the spec submitted "
                                            f"as {submitted} now resolves to {spec.run_id}; re-run the sweep"}
            if spec.dist.world_size > 1:  # one data-parallel rank per task of this job
                distributed.init_from_submitit(spec.dist.world_size, spec.train.device)
            code, run_dir = execute(spec, Path(self.root))
            copy_error = self._copy_to_study(run_dir) if self.study and distributed.world().main else None
        except FolderLocked as e:  # another process (a second sweep, a manual run) trains it
            return {"code": 2, "locked": str(e), "run_id": submitted}
        except BadInput as e:
            return {"code": 2, "error": str(e)}
        except Exception:  # noqa: BLE001 - never let submitit's debug executor open pdb
            return {"code": 1, "error": traceback.format_exc()}
        finally:
            distributed.shutdown()
        if code == 130:
            self._hand_over_to_submitit()
        return {"code": code, "run_dir": str(run_dir), **({"copy_error": copy_error} if copy_error else {})}

    def _copy_to_study(self, run_dir: Path) -> Optional[str]:
        """The finished run's compact copy into the study folder, now (its failure never fails the
        run: the launcher copies what is missing when the sweep ends, and the next ``sweep run``)."""
        from rlsuite.sweeps.study import copy_finished_run

        try:
            copy_finished_run(self.study, run_dir)
        except Exception as e:  # noqa: BLE001
            return f"compact copy of {Path(run_dir).name} into {self.study['dest']} failed: {type(e).__name__}: {e}"
        return None

    def _hand_over_to_submitit(self) -> None:
        """After a clean preemption, let submitit's own handler checkpoint and requeue."""
        handler = signal.getsignal(signal.SIGUSR2)
        if callable(handler) and getattr(handler, "__self__", None) is not None \
                and type(handler.__self__).__name__ == "SignalHandler":
            handler(signal.SIGUSR2, None)  # requeues (on SLURM) and exits

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(SweepJob(self.spec_dict, self.root, self.study))


def locked_by(root: Path, run_id: str) -> Optional[str]:
    """``pid P on HOST`` when another process holds the run's lock, else None."""
    holder = lock_holder(lock_path(root, run_id))
    return None if holder is None else f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"


def run_state(root: Path, run_id: str) -> tuple[str, Optional[str]]:
    """(state, reason) of a run: ``pending`` when it has no status yet; ``stale`` for a
    ``running`` status whose process or heartbeat is gone; ``running`` (reason ``locked by ...``)
    for a run whose lock a live process holds and that has not finished."""
    st = read_json(root / run_id / "status.json")
    state = "pending" if st is None else st.get("state", "pending")
    if state not in TERMINAL:
        holder = locked_by(root, run_id)
        if holder is not None:
            return "running", f"locked by {holder}"
    if st is None:
        return "pending", None
    if state == "running" and is_stale(st):
        return "stale", f"no heartbeat since {st.get('updated_at')}"
    return state, st.get("reason")


def seed_major(runs: list[RunSpec], order: Optional[Sequence[RunSpec]] = None) -> list[RunSpec]:
    """``runs`` seed by seed (the spec's order within a seed): a sweep stopped part-way (a study over
    several sessions, a cancelled array) leaves every arm with the same seeds done, so its finished runs
    already pair. Seeds go in the order they first appear in ``order`` (the whole sweep; default
    ``runs``), so a resumed sweep finishes its earliest unfinished seed before it starts a later one."""
    rank: dict = {}
    for r in list(order or ()) + list(runs):
        rank.setdefault(r.seed, len(rank))
    return sorted(runs, key=lambda r: rank[r.seed])


def to_submit(runs: list[RunSpec], root: Path, retry_failed: bool,
              order: Optional[Sequence[RunSpec]] = None) -> tuple[list[RunSpec], dict[str, list[str]]]:
    """Runs that need a job now (seed by seed, seeds in the order of ``order``, the whole sweep, default
    ``runs``: :func:`seed_major`), and the skipped ones by reason."""
    todo, skipped = [], {}
    for r in runs:
        state, reason = run_state(root, r.run_id)
        if state == "running" and reason and reason.startswith("locked by"):
            print(f"skipping {r.run_id}: {reason} (another sweep or run trains it)", file=sys.stderr)
            skipped.setdefault("locked (held by another process)", []).append(r.run_id)
        elif state in TERMINAL or state == "running" or (state == "failed" and not retry_failed):
            skipped.setdefault(state if state != "failed" else "failed (use --retry-failed)", []).append(r.run_id)
        else:
            todo.append(r)
    return seed_major(todo, order if order is not None else runs), skipped


def write_manifest(sweep: SweepSpec, runs: list[RunSpec], root: Path) -> None:
    """``<root>/sweep.json``: the spec and the expected run ids (for status and reports)."""
    from rlsuite.sweeps.spec import as_dict

    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(root / "sweep.json", {"sweep": as_dict(sweep), "runs": [
        {"run_id": r.run_id, "task": r.task.name, "algo": r.algo.name, "seed": r.seed, "variant": r.variant,
         "factors": r.factors} for r in runs]})


def _record_jobs(root: Path, jobs: list[tuple[str, object]]) -> None:
    with open(root / "jobs.jsonl", "a") as fh:
        for run_id, job in jobs:
            paths = getattr(job, "paths", None)
            fh.write(json.dumps({"run_id": run_id, "job_id": str(getattr(job, "job_id", "")),
                                 "stdout": str(paths.stdout) if paths else None,
                                 "stderr": str(paths.stderr) if paths else None, "time": time.time()}) + "\n")


def make_executor(cluster: str, root: Path, res: Resources):
    import submitit  # noqa: F401  (fails early, before any job, without the slurm extra)

    folder = root / "logs" / "%j"
    if cluster == "debug":
        return submitit.AutoExecutor(folder=folder, cluster="debug")
    ex = submitit.AutoExecutor(folder=folder, cluster=None if cluster == "auto" else cluster,
                               slurm_max_num_timeout=res.max_requeues)
    params = dict(timeout_min=res.timeout_min, cpus_per_task=res.cpus_per_task, mem_gb=res.mem_gb,
                  gpus_per_node=res.gpus_per_node, slurm_array_parallelism=res.array_parallelism,
                  slurm_signal_delay_s=res.signal_delay_s, name="rlsuite", tasks_per_node=res.tasks_per_node)
    if res.nodes > 1:  # submitit's local executor refuses the key even when it is 1
        params["nodes"] = res.nodes
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(res, key):
            params[f"slurm_{key}"] = getattr(res, key)
    ex.update_parameters(**params)
    return ex


def launch(runs: list[RunSpec], root: Path, cluster: str, res: Resources, workers: int = 2, wait: bool = True,
           progress: Optional[Callable[[int, int], None]] = None, study: Optional[dict] = None) -> list[dict]:
    """Submit ``runs`` and (locally, or with ``wait``) wait for them. Returns job results.
    ``study``: :meth:`rlsuite.sweeps.study.StudyRun.job_info` (each job copies its finished run)."""
    import submitit  # noqa: F401  (fails early, before any job, without the slurm extra)

    if not runs:
        return []
    jobs_fns = [SweepJob({**r.to_dict(), "run_id": r.run_id}, str(root), study) for r in runs]
    ex = make_executor(cluster, root, res)
    if ex.cluster == "slurm":
        with ex.batch():
            jobs = [ex.submit(fn) for fn in jobs_fns]
        _record_jobs(root, [(r.run_id, j) for r, j in zip(runs, jobs)])
        print(f"submitted {len(jobs)} runs as SLURM array job {jobs[0].job_id.split('_')[0]} "
              f"(at most {res.array_parallelism} at once); logs under {root / 'logs'}", file=sys.stderr)
        return [first_result(j) for j in jobs] if wait else []
    if ex.cluster == "debug":
        results = []
        for i, (r, fn) in enumerate(zip(runs, jobs_fns)):
            results.append(first_result(ex.submit(fn)))
            if progress:
                progress(i + 1, len(runs))
        return results
    return _local_throttled(ex, runs, jobs_fns, root, max(1, workers), progress)


def first_result(job) -> dict:
    """The job's result; rank 0's for a data-parallel job of several tasks (submitit's
    ``result()`` refuses jobs with subtasks)."""
    return job.results()[0]


def _local_throttled(ex, runs, fns, root: Path, workers: int, progress) -> list[dict]:
    """At most ``workers`` local jobs at a time (submitit's local executor has no cap)."""
    pending = list(zip(runs, fns))
    running: list[tuple[RunSpec, object]] = []
    results: list[dict] = []
    done = 0
    try:
        while pending or running:
            while pending and len(running) < workers:
                r, fn = pending.pop(0)
                holder = locked_by(root, r.run_id)
                if holder is not None:  # taken since the sweep started (a second sweep of the same spec)
                    results.append({"code": 2, "locked": f"locked by {holder}", "run_id": r.run_id})
                    done += 1
                    if progress:
                        progress(done, len(runs))
                    continue
                job = ex.submit(fn)
                _record_jobs(root, [(r.run_id, job)])
                running.append((r, job))
            time.sleep(0.2)
            for item in list(running):
                if item[1].done():
                    running.remove(item)
                    try:
                        results.append(first_result(item[1]))
                    except Exception as e:  # noqa: BLE001 - the run folder holds the state
                        results.append({"code": 1, "error": str(e)})
                    done += 1
                    if progress:
                        progress(done, len(runs))
    except KeyboardInterrupt:
        for _, job in running:  # the trainers checkpoint at the step boundary (state preempted)
            try:
                job._process.send_signal(signal.SIGINT)
            except (AttributeError, ProcessLookupError):
                pass
        for _, job in running:
            try:
                job._process.wait(timeout=120)
            except Exception:  # noqa: BLE001
                pass
        raise
    return results


def wait_for_live(runs: list[RunSpec], root: Path, poll_s: float = 2.0) -> None:
    """Wait until runs that another process is running reach a final state."""
    live = [r.run_id for r in runs if run_state(root, r.run_id)[0] == "running"]
    while live:
        time.sleep(poll_s)
        live = [i for i in live if run_state(root, i)[0] == "running"]


def status(root: Path) -> dict:
    """Runs of a sweep folder by state, with reasons and job log paths."""
    manifest = read_json(root / "sweep.json")
    if manifest is None:
        ids = sorted(p.parent.name for p in root.glob("*/spec.json"))
    else:
        ids = [r["run_id"] for r in manifest["runs"]]
    logs: dict[str, dict] = {}
    for row in read_jsonl(root / "jobs.jsonl"):
        logs[row["run_id"]] = row
    by_state: dict[str, list[dict]] = {}
    walls: dict[str, float] = {}  # run id -> training wall so far (status.json budget)
    threads: set = set()
    for run_id in ids:
        state, reason = run_state(root, run_id)
        st = read_json(root / run_id / "status.json") or {}
        entry = {"run_id": run_id, "reason": reason, "step": st.get("step"), "attempt": st.get("attempt"),
                 "job_id": logs.get(run_id, {}).get("job_id"), "stderr": logs.get(run_id, {}).get("stderr")}
        by_state.setdefault(state, []).append(entry)
        wall = (st.get("budget") or {}).get("wall_s")
        if wall is not None:
            walls[run_id] = float(wall)
            spec = read_json(root / run_id / "spec.json") or {}
            threads.add((spec.get("train") or {}).get("num_threads"))
    done = [walls[r["run_id"]] for r in by_state.get("completed", []) if r["run_id"] in walls]
    mean = sum(done) / len(done) if done else None
    open_ = [r["run_id"] for state, rows in by_state.items() if state not in TERMINAL for r in rows]
    rest = None if mean is None else sum(max(0.0, mean - walls.get(r, 0.0)) for r in open_)
    compute = {"wall_s": sum(walls.values()), "runs_with_wall": len(walls), "completed_mean_wall_s": mean,
               "not_completed": len(open_), "not_completed_wall_s_at_mean": rest,
               "num_threads": sorted((t for t in threads if t is not None), key=str)}
    return {"root": str(root), "total": len(ids), "counts": {k: len(v) for k, v in sorted(by_state.items())},
            "runs": by_state, "compute": compute}


def describe_compute(c: dict) -> str:
    """One line of :func:`status`'s ``compute``: the training wall the runs spent (``budget.wall_s`` of
    their status.json; evaluations and start-up are not in it, nor the time a resume repeated after a
    run's last checkpoint), the completed runs' mean and what the runs still to finish (not completed
    or diverged) would take at that mean, less what each has run (an estimate, said so). CPU-hours
    are this wall times the runs' torch threads (``train.num_threads``) where they ran alone on
    their cores."""
    if not c["runs_with_wall"]:
        return "training wall: none recorded yet"
    line = f"training wall: {c['wall_s'] / 3600:.2f} h over {c['runs_with_wall']} run(s)"
    if c["completed_mean_wall_s"] is not None:
        line += f"; completed runs {c['completed_mean_wall_s']:,.0f} s a run on average"
        if c["not_completed"]:
            line += (f"; {c['not_completed']} to finish ≈ {c['not_completed_wall_s_at_mean'] / 3600:.2f} h more "
                     f"at that mean (an estimate)")
    return line + (f"; train.num_threads {', '.join(str(t) for t in c['num_threads'])}" if c["num_threads"] else "")


__all__ = ["SweepJob", "launch", "status", "describe_compute", "to_submit", "write_manifest", "run_state",
           "wait_for_live", "locked_by"]


# ---------------------------------------------------------------------------------------
# One sweep end to end (``rlsuite sweep run``, ``rlsuite quickstart``, ``sweeps.tune``).


def _progress_bar(total: int):
    from tqdm import tqdm

    bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def update(done: int, _total: int) -> None:
        bar.n = done
        bar.refresh()

    return bar, update


def run_sweep(spec_ref: Optional[str], out: Path, cluster: str, workers: int, dry_run: bool = False,
              retry_failed: bool = False, wait: bool = True, progress: bool = True,
              cost: Optional[dict] = None, log: Sequence[str] = (), study: Optional[Path] = None,
              allow_code_change: bool = False) -> tuple[Path, dict]:
    """``log``: experiment trackers for every run (``--log``): the spec's ``set: {log.trackers: [...]}``,
    which it replaces (not in the run ids). ``study``: a registered study folder
    (:func:`rlsuite.sweeps.study.prepare_run`; ``spec_ref`` None = its registered spec)."""
    import dataclasses

    from rlsuite.suite.errors import BadInput
    from rlsuite.sweeps.spec import load

    plan = None
    if study is not None:
        from rlsuite.sweeps.study import prepare_run

        plan = prepare_run(study, spec_ref, allow_code_change)
        spec_ref = str(plan.spec_path)
    elif allow_code_change:
        raise BadInput("--allow-code-change needs --study STUDY_DIR (it allows a study's runs at code other than "
                       "its registered commit)")
    elif not spec_ref:
        raise BadInput("give SPEC (a bundled spec name or a YAML path), or --study STUDY_DIR to run a registered study")
    sweep = load(spec_ref)
    if log:
        sweep = dataclasses.replace(sweep, set={**sweep.set, "log.trackers": list(log)})
    return run_sweep_spec(sweep, out, cluster, workers, dry_run, retry_failed, wait, progress, cost, study=plan)


def run_sweep_spec(sweep, out: Path, cluster: str, workers: int, dry_run: bool = False,
                   retry_failed: bool = False, wait: bool = True, progress: bool = True,
                   cost: Optional[dict] = None, study=None) -> tuple[Path, dict]:
    """Expand (validating everything first), skip what is done, launch the rest, wait.

    ``dry_run``: print the runs with their planned cost (:func:`rlsuite.sweeps.cost.dry_run_lines`;
    ``cost``: its ``throughput`` / ``prompt_tokens``) and submit nothing. ``study``: a
    :class:`rlsuite.sweeps.study.StudyRun`: the run ids with a compact copy in the study folder are
    skipped, each job copies its run there as it finishes, the launcher copies what is missing."""
    from rlsuite.sweeps.spec import expand

    runs = expand(sweep)
    root = out / sweep.name
    every = runs
    if study is not None:
        study.check_runs(runs)
        runs, have = study.split(runs)
        print(f"study {study.dir}: {len(have)} of {len(every)} runs already in {study.dest} (skipped), "
              f"{len(runs)} remain", file=sys.stderr)
    if dry_run:
        from rlsuite.sweeps.cost import dry_run_lines

        if cluster in ("slurm", "auto"):
            n = sweep.resources.array_parallelism
            src = f"resources.array_parallelism={n}"
        else:
            n, src = (1, "--cluster debug") if cluster == "debug" else (workers, f"--workers {workers}")
        print("\n".join(dry_run_lines(runs, n, src, **(cost or {}))))
        return root, {}
    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.spec import out_dir_problem

    problem = out_dir_problem(root)
    if problem:
        raise BadInput(problem)
    write_manifest(sweep, every, root)
    if study is not None:
        study.check_found(root, runs)
        n = study.copy_finished(root, runs, launched=set())
        if n:
            print(f"copied {n} run(s) already finished in {root} into {study.dest}", file=sys.stderr)
        runs, _ = study.split(runs)
    todo, skipped = to_submit(runs, root, retry_failed, order=every)
    for why, ids in skipped.items():
        print(f"skipping {len(ids)} {why} run(s)", file=sys.stderr)
    print(f"{sweep.name}: {len(runs)} runs, {len(todo)} to run", file=sys.stderr)
    bar, update = _progress_bar(len(todo)) if progress and todo and cluster != "slurm" else (None, None)
    try:
        results = launch(todo, root, cluster, sweep.resources, workers=workers, wait=wait, progress=update,
                         study=study.job_info() if study is not None else None)
    finally:
        if bar is not None:
            bar.close()
    for res in results:
        if isinstance(res, dict) and res.get("locked"):
            print(f"skipped {res.get('run_id') or 'a run'}: {res['locked'].strip().splitlines()[-1]}", file=sys.stderr)
        elif isinstance(res, dict) and res.get("error"):
            print(f"job error (exit {res.get('code')}): {res['error'].strip().splitlines()[-1]}", file=sys.stderr)
        if isinstance(res, dict) and res.get("copy_error"):
            print(res["copy_error"], file=sys.stderr)
    if cluster != "slurm" or wait:
        wait_for_live(runs, root)
        if study is not None:
            n = study.copy_finished(root, runs, launched={r.run_id for r in todo})
            have = len(study.split(every)[1])
            print(f"study {study.dir}: {have} of {len(every)} runs in {study.dest}"
                  + (f" ({n} copied at the end: their jobs had not)" if n else ""), file=sys.stderr)
    st = status(root)
    return root, (_with_study(st, study) if study is not None else st)


def _with_study(st: dict, study) -> dict:
    """Runs without a folder in this root (``pending``) whose compact copy is in the study folder
    (done on another machine or in another ``--out``) count as ``in_study``, not as never started."""
    from rlsuite.sweeps.study import copied

    have = copied(study.dest)
    runs = {k: list(v) for k, v in st["runs"].items()}
    moved = [r for r in runs.get("pending", []) if r["run_id"] in have]
    if moved:
        runs["pending"] = [r for r in runs["pending"] if r["run_id"] not in have]
        runs["in_study"] = moved
        runs = {k: v for k, v in runs.items() if v}
    return {**st, "runs": runs, "counts": {k: len(v) for k, v in sorted(runs.items())}}
