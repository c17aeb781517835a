"""Experiment trackers (``log.trackers``, ``rlsuite run --log NAME``): TensorBoard, Weights & Biases
and MLflow receive what the run folder records, on data-parallel rank 0 only.

``metrics.jsonl`` and ``evals.jsonl`` stay the source of truth; a tracker is a copy. Every
tracker receives the same names at the same steps (:func:`metrics_of`, :func:`evals_of`):

* each ``metrics.jsonl`` row at its ``step``: every numeric value (int, float, bool as 0/1;
  strings skipped) under its schema key (``reward/mean``, ``loss/total``, ``perf/step_time``…),
  the budget counters of :meth:`rlsuite.suite.budget.Budget.row` included (``budget/samples``,
  ``budget/gen_tokens``, ``budget/train_tokens``, ``budget/flops``, ``budget/wall_s``…), so any
  of them can be a plot's x-axis; ``step`` is the tracker's step and ``time`` its wall time;
* each ``evals.jsonl`` row at its ``step``: its ``eval/<task>/<metric>`` values as
  ``eval/<task>/<metric>/<split>`` (the val and test evals of one step are two rows).

Backends (:data:`TRACKERS`), each imported only when used (its extra: ``pip install -e
".[tensorboard]"``, ``".[wandb]"``, ``".[mlflow]"``):

* ``tensorboard``: ``torch.utils.tensorboard.SummaryWriter`` event files in
  ``<run_dir>/tensorboard/`` (``<log_dir>/<run_id>/`` with ``log.dir``); a resumed run
  writes with ``purge_step`` = the checkpoint's step + 1, so the steps it replays replace the
  ones the interrupted attempt wrote (a fresh start purges from step 0). TensorBoard stores
  scalars as float32.
* ``wandb``: ``wandb.init`` with project ``log.project``, group the sweep name, job type
  the algorithm, name and id the run id (:func:`wandb_id`; a resumed run continues the same W&B
  run, ``resume="allow"``; two folders of one run id are one W&B run of a project, as they are
  one run), config the resolved spec, tags task, ``seed=S`` and the variant; files under
  ``<run_dir>/wandb/`` (``<log_dir>/wandb/``). ``WANDB_MODE`` is W&B's own: with
  ``WANDB_MODE=offline`` nothing is sent and ``wandb sync <dir>/wandb/offline-run-*`` uploads it
  later. The console is not captured (``console="off"``). W&B keeps the first value logged at a
  step: the steps a resumed run replays were logged by the interrupted attempt (the same values,
  apart from timings).
* ``mlflow``: ``MlflowClient`` on ``log.mlflow_uri`` (default: the file store
  ``<run_dir>/mlruns``, ``<log_dir>/mlruns`` with a log dir; see ``LogConfig.mlflow_uri``),
  experiment the sweep name or ``log.project``, run name the run id, params the resolved
  spec flattened (``section.key``), tags ``rlsuite.*``. MLflow names allow only
  ``[A-Za-z0-9_./ :-]``: ``@`` becomes ``_at_`` (``pass@8`` → ``pass_at_8``), any other
  character ``_``. The MLflow run id is kept in ``<run_dir>/trackers.json``: a resumed run
  continues that run and skips the (key, step) values it already holds.

:class:`Trackers` is the fan-out the trainer calls: any exception of a backend (a missing
package, a write error, a server) prints one warning on stderr naming the tracker, the error
and, for a missing package, the extra to install; that backend is switched off and the run goes
on: a tracker never fails a run. Each call runs in a daemon thread and is waited for at most
``log.tracker_timeout_s`` (a server that accepts and never answers), and at most
:attr:`Trackers.STOP_GRACE_S` once a stop signal has arrived; past that the tracker is switched
off the same way and the run goes on (or stops) without it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

STATE_FILE = "trackers.json"
"""In the run folder: what a resumed run needs to continue its tracker runs (the MLflow run id)."""


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    return None


def metrics_of(row: dict) -> dict[str, float]:
    """The tracker metrics of a ``metrics.jsonl`` row: every numeric value but ``step``/``time``."""
    out = {}
    for k, v in row.items():
        n = _number(v)
        if n is not None and k not in ("step", "time"):
            out[k] = n
    return out


def evals_of(row: dict) -> dict[str, float]:
    """The tracker metrics of an ``evals.jsonl`` row: ``eval/<task>/<metric>/<split>``."""
    split = row.get("split", "eval")
    out = {}
    for k, v in row.items():
        n = _number(v)
        if n is not None and k.startswith("eval/"):
            out[f"{k}/{split}"] = n
    return out


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    """``{"optim": {"lr": 1e-6}}`` → ``{"optim.lr": "1e-06"}`` (lists as JSON, None as ``None``)."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple, dict)) else str(v)
    return out


def _read_state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _write_state(run_dir: Path, key: str, value: dict) -> None:
    from rlsuite.suite.runfolder import atomic_write_json

    st = _read_state(run_dir)
    st[key] = value
    atomic_write_json(run_dir / STATE_FILE, st)


class Tracker:
    """One backend. ``start`` (once, before any ``log``), ``log`` (numeric metrics at a step, in
    order of steps), ``finish`` (the run's state: completed, failed, diverged, preempted,
    cancelled). Any exception is handled by :class:`Trackers`."""

    name: ClassVar[str] = ""
    extra: ClassVar[str] = ""  # the pip extra of its package

    def __init__(self, log_cfg) -> None:
        self.cfg = log_cfg  # the spec's log section

    def start(self, run_id: str, spec: dict, resumed: bool, step: int, run_dir: Path) -> None:
        raise NotImplementedError

    def log(self, metrics: dict[str, float], step: int, walltime: float) -> None:
        raise NotImplementedError

    def finish(self, state: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what is held after a failure (best effort; errors are ignored)."""


def _quiet_writer_threads() -> None:
    """TensorBoard writes from a background thread that, on an error (a full disk), prints its own
    traceback through ``threading.excepthook`` and then re-raises the error in the foreground at the
    writer's next call, where :class:`Trackers` turns it into its one-line warning. Installed once:
    a hook that leaves exceptions of those writer threads to that warning and passes every other
    thread's to the previous hook."""
    import threading

    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    if getattr(threading.excepthook, "_rlsuite_tensorboard", False):
        return
    previous = threading.excepthook

    def hook(args):
        if not isinstance(args.thread, _AsyncWriterThread):
            previous(args)

    hook._rlsuite_tensorboard = True
    threading.excepthook = hook


class TensorBoardTracker(Tracker):
    name, extra = "tensorboard", "tensorboard"

    def start(self, run_id, spec, resumed, step, run_dir):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        _quiet_writer_threads()

        self.dir = Path(self.cfg.dir) / run_id if self.cfg.dir else Path(run_dir) / "tensorboard"
        self.writer = SummaryWriter(str(self.dir), purge_step=step + 1 if resumed else 0)
        if not resumed:
            self.writer.add_text("spec", "```\n" + json.dumps(spec, indent=1, default=str) + "\n```", 0)

    def log(self, metrics, step, walltime):
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, global_step=step, walltime=walltime)

    def finish(self, state):
        self.writer.add_text("state", state, 0)
        self.writer.close()

    def close(self):
        self.writer.close()


def wandb_id(run_id: str) -> str:
    """The W&B run id of a run id (W&B refuses ``/ \\ # ? % :`` in ids; at most 128 characters)."""
    return re.sub(r"[/\\#?%:\s]", "-", run_id)[:128]


class WandbTracker(Tracker):
    name, extra = "wandb", "wandb"

    def start(self, run_id, spec, resumed, step, run_dir):
        import wandb

        d = Path(self.cfg.dir) if self.cfg.dir else Path(run_dir)
        d.mkdir(parents=True, exist_ok=True)
        tags = [str(spec.get("task", {}).get("name")), f"seed={spec.get('seed')}"]
        if spec.get("variant"):
            tags.append(str(spec["variant"])[:64])
        self.run = wandb.init(project=self.cfg.project, group=spec.get("sweep") or None,
                              job_type=str(spec.get("algo", {}).get("name")), name=run_id, id=wandb_id(run_id),
                              resume="allow", config=spec, allow_val_change=True, tags=tags, dir=str(d),
                              settings=wandb.Settings(console="off"))
        _write_state(Path(run_dir), "wandb", {"id": self.run.id, "project": self.cfg.project, "dir": str(d),
                                              "offline": bool(getattr(self.run, "offline", False))})

    def log(self, metrics, step, walltime):
        self.run.log(metrics, step=step)

    def finish(self, state):
        self.run.summary["state"] = state
        if state == "preempted":
            self.run.mark_preempting()
        self.run.finish(exit_code=0 if state == "completed" else 1)

    def close(self):
        self.run.finish(exit_code=1)


_MLFLOW_BAD = re.compile(r"[^/\w.\- :]")


def mlflow_name(key: str) -> str:
    """A metric name MLflow accepts: ``@`` → ``_at_``, other characters outside ``[/\\w.\\- :]`` → ``_``."""
    return _MLFLOW_BAD.sub("_", key.replace("@", "_at_"))


MLFLOW_STATUS = {"completed": "FINISHED", "failed": "FAILED", "diverged": "FAILED", "preempted": "KILLED",
                 "cancelled": "KILLED"}


class MLflowTracker(Tracker):
    name, extra = "mlflow", "mlflow"

    def tracking_uri(self, run_dir: Path) -> str:
        if self.cfg.mlflow_uri:
            return self.cfg.mlflow_uri
        return (Path(self.cfg.dir) if self.cfg.dir else Path(run_dir)).absolute().joinpath("mlruns").as_uri()

    def start(self, run_id, spec, resumed, step, run_dir):
        from mlflow.tracking import MlflowClient

        uri = self.tracking_uri(Path(run_dir))
        if uri.startswith("file:") or "://" not in uri:  # the file store: in maintenance mode in MLflow 3
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(uri)
        name = spec.get("sweep") or self.cfg.project
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                eid = self.client.create_experiment(name)
            except Exception:  # noqa: BLE001 - another run of a shared store created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                eid = exp.experiment_id
        else:
            eid = exp.experiment_id
        stored = _read_state(Path(run_dir)).get("mlflow", {})
        self.logged: Optional[dict[str, int]] = None  # resumed: the last step MLflow holds, per key
        self.run_id = None
        if resumed and stored.get("tracking_uri") == uri and stored.get("run_id"):
            try:
                self.client.get_run(stored["run_id"])
                self.run_id, self.logged = stored["run_id"], {}
                self.client.update_run(self.run_id, status="RUNNING")
            except Exception:  # noqa: BLE001 - the stored run is gone: start a new one
                self.run_id = None
        if self.run_id is None:
            tags = {"rlsuite.run_id": run_id, "rlsuite.task": str(spec.get("task", {}).get("name")),
                    "rlsuite.algo": str(spec.get("algo", {}).get("name")), "rlsuite.seed": str(spec.get("seed")),
                    "rlsuite.sweep": str(spec.get("sweep")), "rlsuite.variant": str(spec.get("variant")),
                    "rlsuite.run_dir": str(Path(run_dir).absolute())}
            self.run_id = self.client.create_run(eid, run_name=run_id, tags=tags).info.run_id
            from mlflow.entities import Param

            params = [Param(k, v[:6000]) for k, v in flatten(spec).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        _write_state(Path(run_dir), "mlflow", {"tracking_uri": uri, "run_id": self.run_id, "experiment_id": eid})

    def _last_step(self, key: str) -> int:
        if key not in self.logged:
            hist = self.client.get_metric_history(self.run_id, key)
            self.logged[key] = max((m.step for m in hist), default=-1)
        return self.logged[key]

    def log(self, metrics, step, walltime):
        from mlflow.entities import Metric

        ts = int(walltime * 1000)
        batch = []
        for k, v in metrics.items():
            key = mlflow_name(k)
            if self.logged is not None and self._last_step(key) >= step:
                continue  # resumed: MLflow holds this step from the interrupted attempt
            batch.append(Metric(key, float(v), ts, int(step)))
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def finish(self, state):
        self.client.set_tag(self.run_id, "rlsuite.state", state)
        self.client.set_terminated(self.run_id, MLFLOW_STATUS.get(state, "FAILED"))

    def close(self):
        self.client.set_terminated(self.run_id, "FAILED")


TRACKERS: dict[str, type[Tracker]] = {c.name: c for c in (TensorBoardTracker, WandbTracker, MLflowTracker)}
"""Tracker name (``log.trackers``) → class."""


class Trackers:
    """The fan-out the trainer calls (rank 0; empty elsewhere and without ``log.trackers``).

    Each call goes to every live backend; an exception of one is reported once on ``stream``
    (default stderr) and that backend is dropped: a tracker never fails a run."""

    def __init__(self, trackers: list[Tracker], run_dir: Path, run_id: str, stream=None, timeout_s: float = 60.0,
                 stopping: Optional[Callable[[], bool]] = None) -> None:
        self.trackers, self.run_dir, self.run_id, self._stream = list(trackers), Path(run_dir), run_id, stream
        self.timeout_s, self.stopping = float(timeout_s), stopping or (lambda: False)
        self.started = False
        self.failed: dict[str, str] = {}  # name → the warning printed

    @classmethod
    def for_run(cls, spec, run_dir: Path, active: bool = True,
                stopping: Optional[Callable[[], bool]] = None) -> "Trackers":
        names = list(dict.fromkeys(spec.log.trackers)) if active else []
        return cls([TRACKERS[n](spec.log) for n in names], Path(run_dir), Path(run_dir).name,
                   timeout_s=spec.log.tracker_timeout_s, stopping=stopping)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def _fail(self, t: Tracker, what: str, e: BaseException, close: bool = True) -> None:
        self.trackers.remove(t)
        hint = ""
        if isinstance(e, ImportError):
            hint = f"; install it with: pip install -e \".[{t.extra}]\" (the {t.extra} extra)"
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        msg = (f"warning: tracker {t.name} failed at {what} ({type(e).__name__}: {text}{hint}); it is off for the "
               f"rest of this run, which goes on ({self.run_dir / 'metrics.jsonl'} is the record)")
        self.failed[t.name] = msg
        try:
            print(msg, file=self._stream or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        if not close:  # its call still hangs in its thread: closing would hang the same way
            return
        try:
            t.close()  # what a partial start or a failed call left open
        except Exception:  # noqa: BLE001 - best effort
            pass

    STOP_GRACE_S = 10.0
    """After a stop signal a tracker call gets at most this long (a last row, W&B's preemption mark)."""

    def _call(self, t: Tracker, what: str, args: tuple) -> None:
        """``t.what(*args)`` in a daemon thread, waited for at most ``timeout_s`` and not past a stop
        signal; an exception, the deadline or the signal switches ``t`` off (one warning)."""
        done, box = threading.Event(), {}

        def run() -> None:
            try:
                getattr(t, what)(*args)
            except BaseException as e:  # noqa: BLE001 - reported by the waiting thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=run, name=f"rlsuite-tracker-{t.name}", daemon=True).start()
        deadline = time.monotonic() + self.timeout_s
        while not done.wait(min(0.25, max(0.0, deadline - time.monotonic()))):
            if self.stopping() and deadline - time.monotonic() > self.STOP_GRACE_S:
                deadline = time.monotonic() + self.STOP_GRACE_S  # stopping: a short grace, then go on
                continue
            if time.monotonic() >= deadline:
                if self.stopping():
                    self._fail(t, what, TimeoutError(f"a stop signal arrived and it did not answer within "
                                                     f"{self.STOP_GRACE_S:g} s"), close=False)
                    return
                self._fail(t, what, TimeoutError(f"no answer within log.tracker_timeout_s={self.timeout_s:g} s"),
                           close=False)
                return
        if "error" in box:
            e = box["error"]
            if not isinstance(e, Exception):  # KeyboardInterrupt/SystemExit raised inside the library
                e = RuntimeError(f"{type(e).__name__}: {e}")
            self._fail(t, what, e)

    def _each(self, what: str, *args) -> None:
        for t in list(self.trackers):
            self._call(t, what, args)  # a tracker never fails a run

    def start(self, spec: dict, resumed: bool, step: int) -> None:
        """The attempt starts at ``step`` (``resumed``: from its checkpoint)."""
        if self.started or not self.trackers:
            return
        self.started = True
        self._each("start", self.run_id, spec, resumed, step, self.run_dir)

    def log_metrics(self, row: dict) -> None:
        """A ``metrics.jsonl`` row."""
        if self.started and self.trackers:
            t = row.get("time")
            self._each("log", metrics_of(row), int(row["step"]), float(t) if isinstance(t, (int, float))
                       and math.isfinite(t) else time.time())

    def log_eval(self, row: dict) -> None:
        """An ``evals.jsonl`` row."""
        if self.started and self.trackers:
            self._each("log", evals_of(row), int(row["step"]), time.time())

    def finish(self, state: str) -> None:
        """The run's state (completed, failed, diverged, preempted, cancelled); once."""
        if self.started and self.trackers:
            self._each("finish", state)
        self.trackers = []


__all__ = ["TRACKERS", "Tracker", "Trackers", "TensorBoardTracker", "WandbTracker", "MLflowTracker", "metrics_of",
           "evals_of", "flatten", "mlflow_name", "wandb_id", "STATE_FILE"]
