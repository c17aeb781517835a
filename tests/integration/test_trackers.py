"""Experiment trackers (issue 21 §1): ``--log tensorboard|wandb|mlflow`` copies every
metrics.jsonl row and the eval values of every evals.jsonl row to each tracker under the same
names at the same steps (read back from each backend's own files: TensorBoard's event files,
the offline W&B run's ``.wandb`` records, the MLflow file store); a tracker failure warns once
and the run goes on unchanged; ``--log`` is not in the run id; an unknown name exits 2; a
resumed run continues the same W&B/MLflow run and TensorBoard drops the replayed steps.

W&B runs offline (``WANDB_MODE=offline``; its base URL points at a closed local port, so nothing
reaches a network). Run: pytest tests/integration/test_trackers.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rlsuite.algorithms.base import ALGORITHMS
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.cli import build_parser, main
from rlsuite.suite.runfolder import read_jsonl
from tests import fakes  # noqa: F401  (the _parity_test task)

FAST = ["--task", "_parity_test", "--algo", "grpo", "--set", "model.warm_start=none", "--budget", "updates=3"]
TIMING = ("perf/", "budget/wall_s")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline and hermetic, MLflow's file store allowed (restored after the test)."""
    for k, v in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
                 "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
                 "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"), "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
                 "WANDB_DISABLE_GIT": "true", "MLFLOW_ALLOW_FILE_STORE": "true"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _run(capsys, *args) -> tuple[int, Path, str]:
    code = main(["run", *args])
    cap = capsys.readouterr()
    last = cap.out.strip().splitlines()[-1]
    assert last.startswith("run_dir: "), cap.out
    return code, Path(last[len("run_dir: "):]), cap.err


def _number(v):
    return int(v) if isinstance(v, bool) else v if isinstance(v, (int, float)) else None


def expected(rd: Path) -> dict[str, dict[int, float]]:
    """tag → {step: value}: the metrics rows' numeric values and the evals rows' ``eval/`` values
    as ``eval/<task>/<metric>/<split>`` (written out here, not through suite.trackers)."""
    out: dict[str, dict[int, float]] = {}
    for r in read_jsonl(rd / "metrics.jsonl"):
        for k, v in r.items():
            if k not in ("step", "time") and _number(v) is not None:
                out.setdefault(k, {})[r["step"]] = _number(v)
    for r in read_jsonl(rd / "evals.jsonl"):
        for k, v in r.items():
            if k.startswith("eval/") and _number(v) is not None:
                out.setdefault(f"{k}/{r['split']}", {})[r["step"]] = _number(v)
    return out


# -- reading each backend's files back ----------------------------------------------------------

def tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def wandb_records(path: Path) -> list:
    """The records of a ``.wandb`` file (W&B's LevelDB-log format: a 7-byte file header, then
    32 KiB blocks of chunks, each with a 7-byte header: crc32 (4), length (2), type (1):
    1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:7]
    pos, raw, parts = 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the rest of a block too small for a header is padding
            pos += block - pos % block
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind == 1:
            raw.append(chunk)
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            raw.append(parts + chunk)
    out = []
    for b in raw:
        rec = pb.Record()
        rec.ParseFromString(b)
        out.append(rec)
    return out


def wandb_run(run_folder: Path) -> tuple[object, dict[int, dict[str, float]], object]:
    """(run record, step → {key: value} of the history records, exit record) of one offline run."""
    (path,) = run_folder.glob("run-*.wandb")
    run, exit_rec, hist = None, None, {}
    for rec in wandb_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = rec.run
        elif kind == "exit":
            exit_rec = rec.exit
        elif kind == "history":
            items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in rec.history.item}
            hist.setdefault(rec.history.step.num, {}).update({k: v for k, v in items.items()
                                                              if not k.startswith("_")})
    return run, hist, exit_rec


def mlflow_state(rd: Path) -> tuple[object, str]:
    from mlflow.tracking import MlflowClient

    st = json.loads((rd / "trackers.json").read_text())["mlflow"]
    return MlflowClient(st["tracking_uri"]), st["run_id"]


def _check_values(got: dict[str, list[tuple[int, float]]], want: dict[str, dict[int, float]], rel: float,
                  skip_timing: bool = False) -> None:
    assert set(got) == set(want), (set(got) ^ set(want))
    for tag, steps in want.items():
        pairs = got[tag]
        assert [s for s, _ in pairs] == sorted(steps), tag  # every step once, in order
        if skip_timing and tag.startswith(TIMING):
            continue
        for s, v in pairs:
            assert v == pytest.approx(steps[s], rel=rel, abs=1e-30, nan_ok=True), (tag, s, v, steps[s])


# -- tests -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_tracker_gets_the_jsonl_rows(tmp_path, capsys, offline):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from rlsuite.suite.trackers import mlflow_name

    code, rd, err = _run(capsys, *FAST, "--log", "tensorboard", "--log", "wandb,mlflow", "--out", str(tmp_path))
    assert code == 0, err
    assert "warning: tracker" not in err, err
    want = expected(rd)
    assert {"reward/mean", "loss/total", "budget/samples", "budget/flops", "budget/gen_tokens",
            "eval/_parity_test/greedy_acc/val", "eval/_parity_test/greedy_acc/test"} <= set(want)
    assert sorted(want["eval/_parity_test/greedy_acc/test"]) == [0, 3]

    # TensorBoard: float32 scalars
    _check_values(tb_scalars(rd / "tensorboard"), want, rel=1e-6)

    # W&B: one offline run named and identified by the run id, the history at the rows' steps
    (folder,) = (rd / "wandb").glob("offline-run-*")
    run, hist, exit_rec = wandb_run(folder)
    assert run.run_id == rd.name and run.display_name == rd.name and run.project == "rlsuite"
    assert run.job_type == "grpo" and run.run_group == "" and set(run.tags) == {"_parity_test", "seed=0"}
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["algo"]["name"] == "grpo" and config["run_id"] == rd.name and config["seed"] == 0
    assert exit_rec is not None and exit_rec.exit_code == 0
    got = {}
    for step in sorted(hist):
        for k, v in hist[step].items():
            got.setdefault(k, []).append((step, v))
    _check_values(got, want, rel=1e-12)

    # MLflow: the file store in the run folder, one finished run with the spec as params
    client, run_id = mlflow_state(rd)
    mrun = client.get_run(run_id)
    assert mrun.info.status == "FINISHED" and mrun.info.run_name == rd.name
    assert client.get_experiment(mrun.info.experiment_id).name == "rlsuite"
    assert mrun.data.params["algo.name"] == "grpo" and mrun.data.params["rollout.group_size"] == "4"
    assert mrun.data.tags["rlsuite.run_id"] == rd.name and mrun.data.tags["rlsuite.state"] == "completed"
    got = {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, mlflow_name(k))) for k in want}
    _check_values(got, want, rel=1e-12)


def test_a_failing_tracker_warns_once_and_the_run_goes_on(tmp_path, capsys, monkeypatch, offline):
    pytest.importorskip("tensorboard")
    import sys

    from torch.utils.tensorboard import SummaryWriter

    code, ref, err = _run(capsys, *FAST, "--out", str(tmp_path / "ref"))
    assert code == 0, err
    calls = {"n": 0}

    def broken(self, *a, **k):
        calls["n"] += 1
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(SummaryWriter, "add_scalar", broken)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    code, rd, err = _run(capsys, *FAST, "--log", "tensorboard", "--log", "wandb", "--out", str(tmp_path / "log"))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: tracker")]
    assert len(warnings) == 2, err
    tb = next(w for w in warnings if "tracker tensorboard" in w)
    wb = next(w for w in warnings if "tracker wandb" in w)
    assert "OSError" in tb and "injected" in tb and "which goes on" in tb
    assert "import of wandb" in wb and 'pip install -e ".[wandb]"' in wb  # the extra to install
    assert calls["n"] == 1  # switched off after its first failure
    assert rd.name == ref.name and json.loads((rd / "status.json").read_text())["state"] == "completed"
    for name in ("metrics.jsonl", "evals.jsonl"):
        strip = lambda rows: [{k: v for k, v in r.items() if k != "time" and not k.startswith(TIMING)} for r in rows]
        assert strip(read_jsonl(rd / name)) == strip(read_jsonl(ref / name)), name


def test_log_settings_are_not_in_the_run_id(tmp_path):
    from rlsuite.suite.cli import _spec_from_args

    def spec(*extra):
        a = build_parser().parse_args(["run", *FAST, *extra, "--out", str(tmp_path)])
        return _spec_from_args(a, a.algo, a.budget)

    base = spec()
    logged = spec("--log", "tensorboard", "--log", "wandb,mlflow", "--set", f"log.dir={tmp_path}",
                  "--set", "log.project=other", "--set", "log.mlflow_uri=http://127.0.0.1:9",
                  "--set", "log.progress=off", "--set", "log.progress_every_s=5")
    assert logged.log.trackers == ("tensorboard", "wandb", "mlflow") and base.log.trackers == ()
    assert logged.run_id == base.run_id
    assert spec("--set", "log.trackers=[wandb]").log.trackers == ("wandb",)  # the sweep/--set form


def test_an_unknown_tracker_is_bad_input(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", *FAST, "--log", "nonsense", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "'nonsense'" in err, err
    assert all(n in err for n in ("tensorboard", "wandb", "mlflow")), err
    assert not out.exists()


@pytest.mark.slow
def test_a_resumed_run_continues_its_tracker_runs(tmp_path, monkeypatch, offline):
    """Crash at step 4 after a checkpoint at step 2 (steps 1-3 logged), resume: TensorBoard keeps
    each step once (the replayed step 3 purges the first attempt's), MLflow continues its run
    (each step once), W&B continues the run id in a second offline run from step 3 on."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trackers import mlflow_name
    from rlsuite.suite.trainer import Trainer

    spec = resolve("_parity_test", "grpo", "tiny", 0, sets=[("model.warm_start", "none"),
                                                            ("train.checkpoint_every", 2),
                                                            ("log.trackers", ["tensorboard", "wandb", "mlflow"])],
                   budgets=[("updates", 5)])
    real, crashed = Trainer.step, {"done": False}

    def flaky(self):
        if self.step_no == 3 and not crashed["done"]:  # the step that becomes step 4
            crashed["done"] = True
            raise RuntimeError("injected crash")
        return real(self)

    monkeypatch.setattr(Trainer, "step", flaky)
    code, rd = execute(spec, tmp_path)
    assert code == 1 and crashed["done"]
    first_mlflow = mlflow_state(rd)[1]
    client, _ = mlflow_state(rd)
    assert client.get_run(first_mlflow).info.status == "FAILED"
    assert sorted(m.step for m in client.get_metric_history(first_mlflow, "reward/mean")) == [1, 2, 3]
    code, rd = execute(spec, tmp_path)
    assert code == 0
    want = expected(rd)
    assert sorted(want["reward/mean"]) == [1, 2, 3, 4, 5]

    _check_values(tb_scalars(rd / "tensorboard"), want, rel=1e-6, skip_timing=True)

    client, run_id = mlflow_state(rd)
    assert run_id == first_mlflow and client.get_run(run_id).info.status == "FINISHED"
    got = {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, mlflow_name(k))) for k in want}
    _check_values(got, want, rel=1e-12, skip_timing=True)
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1

    runs = [wandb_run(f) for f in sorted((rd / "wandb").glob("offline-run-*"))]
    assert len(runs) == 2 and {r[0].run_id for r in runs} == {rd.name}
    assert [r[2].exit_code for r in runs] == [1, 0]
    assert min(runs[0][1]) == 0 and max(runs[0][1]) == 3 and min(runs[1][1]) == 3 and max(runs[1][1]) == 5
    assert runs[1][1][5]["reward/mean"] == want["reward/mean"][5]


class _NaNAfterOne(GRPO):
    name = "_test_nan_trackers"

    def loss(self, fwd, batch, ctx):
        loss, m = super().loss(fwd, batch, ctx)
        return loss * float("nan") if ctx.step >= 2 else loss, m


if _NaNAfterOne.name not in ALGORITHMS:
    ALGORITHMS.register(_NaNAfterOne.name, _NaNAfterOne)


def test_a_diverged_run_logs_its_last_row_and_ends_its_tracker_runs(tmp_path, capsys, offline):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    args = [a if a != "grpo" else _NaNAfterOne.name for a in FAST]
    code, rd, err = _run(capsys, *args, "--log", "tensorboard,mlflow", "--out", str(tmp_path))
    assert code == 3, err
    rows = read_jsonl(rd / "metrics.jsonl")
    assert rows[-1]["stability/nonfinite"] == 1 and rows[-1]["step"] == 2
    assert tb_scalars(rd / "tensorboard")["stability/nonfinite"] == [(1, 0.0), (2, 1.0)]
    client, run_id = mlflow_state(rd)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["rlsuite.state"] == "diverged"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "stability/nonfinite")] == [(1, 0.0), (2, 1.0)]
    assert "diverged at step 2" in err


def test_a_run_prints_progress_and_eval_lines_on_stderr(tmp_path, capsys):
    """Captured stderr is not a terminal: plain lines (the first step's at once), one per eval,
    one at the end; stdout keeps its summary and ``run_dir:`` lines only."""
    assert main(["run", *FAST, "--out", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert any(ln.startswith("train ") and "step 1" in ln and "reward" in ln and "ETA" in ln for ln in lines), cap.err
    assert "\rtrain" not in cap.err  # no bar (transformers' own save bar may redraw)
    assert "eval val step 0: greedy_acc" in cap.err and "eval test step 3: greedy_acc" in cap.err, cap.err
    assert any(ln.startswith("completed at step 3 (100% of the budget)") for ln in lines), cap.err
    out = cap.out.strip().splitlines()
    assert len(out) == 2 and out[0].startswith("state=completed") and out[1].startswith("run_dir: "), cap.out


def test_sweep_run_log_sets_train_log_for_every_run_without_changing_ids(tmp_path, monkeypatch):
    import rlsuite.sweeps.launch as launch
    from rlsuite.sweeps.spec import expand, load

    seen = {}

    def fake(sweep, out, *a, **k):
        seen["sweep"] = sweep
        return out / sweep.name, {}

    monkeypatch.setattr(launch, "run_sweep_spec", fake)
    assert main(["sweep", "run", "quickstart", "--log", "wandb", "--log", "tensorboard,wandb",
                 "--out", str(tmp_path)]) == 0
    runs, plain = expand(seen["sweep"]), expand(load("quickstart"))
    assert runs and all(r.log.trackers == ("wandb", "tensorboard") for r in runs)
    assert [r.run_id for r in runs] == [r.run_id for r in plain]


def test_tensorboard_on_a_full_disk_is_one_warning_without_a_thread_traceback(tmp_path):
    """ENOSPC inside TensorBoard's background writer thread: the run completes with one warning
    line naming the tracker, and no traceback of the writer thread (it printed 25 lines). A
    subprocess, so that the interpreter's own thread-exception hook prints (pytest replaces it)."""
    import subprocess
    import sys

    boot = ("import sys\n"
            "from tensorboard.summary.writer import record_writer\n"
            "def full(self, data):\n"
            "    raise OSError(28, 'No space left on device (injected)')\n"
            "record_writer.RecordWriter.write = full\n"
            "from rlsuite.suite.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    args = ["run", "--task", "arith", "--algo", "grpo", "--set", "model.warm_start=none", "--set",
            "eval.max_prompts=4",
            "--set", "eval.test_prompts=4", "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2",
            "--budget", "updates=2", "--log", "tensorboard", "--out", str(tmp_path)]
    res = subprocess.run([sys.executable, "-c", boot, *args], capture_output=True, text=True, timeout=300)
    err = res.stderr
    assert res.returncode == 0, err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: tracker tensorboard")]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], err
    rd = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    assert json.loads((rd / "status.json").read_text())["state"] == "completed"


def _silent_server():
    """A TCP server that accepts every connection and never answers (a hung tracker server)."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []

    def serve():
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.getsockname()[1]}"


def test_a_tracker_server_that_never_answers_is_bounded_and_a_stop_signal_is_acted_on(tmp_path):
    """MLflow against a server that accepts and never answers: with ``log.tracker_timeout_s=2`` the run
    completes with one warning naming the deadline; with the default deadline a SIGTERM while the
    tracker hangs ends the run as ``cancelled`` (exit 143, its checkpoint written) within the stop
    grace, instead of waiting on the server."""
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("mlflow")
    srv, uri = _silent_server()
    base = [sys.executable, "-m", "rlsuite.suite.cli", "run", "--task", "arith", "--algo", "grpo", "--set",
            "model.warm_start=none", "--set", "eval.max_prompts=4",
            "--set", "eval.test_prompts=4", "--set", "rollout.prompts_per_step=2",
            "--set", "rollout.group_size=2", "--budget", "updates=2", "--log", "mlflow",
            "--set", f"log.mlflow_uri={uri}"]
    env = {**__import__("os").environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    try:
        t0 = time.monotonic()
        res = subprocess.run(base + ["--set", "log.tracker_timeout_s=2", "--out", str(tmp_path / "a")],
                             capture_output=True, text=True, timeout=240, env=env)
        assert res.returncode == 0, res.stderr
        warnings = [x for x in res.stderr.splitlines() if x.startswith("warning: tracker mlflow")]
        assert len(warnings) == 1 and "no answer within log.tracker_timeout_s=2 s" in warnings[0], res.stderr
        assert time.monotonic() - t0 < 120
        proc = subprocess.Popen(base + ["--out", str(tmp_path / "b")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        status = None
        for _ in range(300):  # the run folder exists and the tracker is hanging at its start
            found = list((tmp_path / "b").glob("*/status.json"))
            if found and json.loads(found[0].read_text()).get("state") == "running":
                status = found[0]
                break
            time.sleep(0.1)
        assert status is not None
        time.sleep(1.0)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err
        assert time.monotonic() - t1 < 60
        assert json.loads(status.read_text())["state"] == "cancelled"
        assert "a stop signal arrived" in err
    finally:
        srv.close()
