"""End-to-end `rlsuite run` / `eval` / `list` on the embedded default (tiny model, arith).

Run: pytest tests/integration/test_run_cli.py
Small budgets and no warm start keep each run to seconds; the learning test is `slow`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl

FAST = ["--task", "arith", "--budget", "samples=256", "--set", "model.warm_start=none",
        "--set", "eval.max_prompts=16",
        "--set", "eval.test_prompts=16", "--set", "rollout.prompts_per_step=8", "--set", "rollout.group_size=4"]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _run_dir(stdout: str) -> Path:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("run_dir: ")
    return Path(last[len("run_dir: "):])


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


def strip_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("time", "budget/wall_s") and not k.startswith("perf/")}
            for r in rows]


def test_run_writes_the_run_folder_contract(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", *FAST, "--algo", "grpo", "--seed", "3", "--out", str(tmp_path))
    assert code == 0, err
    rd = _run_dir(out)
    assert rd.parent == tmp_path.resolve()
    assert rd.name.startswith("arith__grpo__s3__") and len(rd.name.split("__")[-1]) == 8
    for name in ("spec.json", "env.json", "metrics.jsonl", "evals.jsonl", "samples.jsonl", "status.json"):
        assert (rd / name).is_file(), name
    assert not (rd / "checkpoint").exists() and (rd / "final" / "config.json").is_file()  # completed: final/ only
    status = json.loads((rd / "status.json").read_text())
    assert status["state"] == "completed" and status["attempt"] == 1 and status["step"] == 8
    assert status["budget"]["samples"] == 256
    spec = json.loads((rd / "spec.json").read_text())
    assert spec["run_id"] == rd.name and spec["algo"]["name"] == "grpo" and spec["seed"] == 3
    metrics = read_jsonl(rd / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 9))
    keys = {"budget/prompts", "budget/samples", "budget/gen_tokens", "budget/train_tokens", "budget/updates",
            "budget/flops", "budget/wall_s", "loss/policy", "loss/total", "stats/entropy", "reward/mean",
            "len/response_mean", "stats/grad_norm", "perf/step_time", "stability/nonfinite", "stats/kl_ref"}
    assert keys <= set(metrics[0])
    assert [m["budget/samples"] for m in metrics] == [32 * i for i in range(1, 9)]
    evals = read_jsonl(rd / "evals.jsonl")
    assert evals[0]["step"] == 0 and evals[0]["split"] == "val"
    finals = [e for e in evals if e["final"]]
    assert sorted(e["split"] for e in finals) == ["test", "val"]
    assert all("eval/arith/greedy_acc" in e and e["eval_seed"] == 1234 for e in evals)
    assert len(evals) == 2 + 3 + 2  # base on val and test, evals at 1/4, 1/2, 3/4 of the budget, final val + test
    assert [(e["step"], e["split"]) for e in evals[:2]] == [(0, "val"), (0, "test")]
    sample = read_jsonl(rd / "samples.jsonl")[0]
    assert {"prompt", "completion", "reward", "parsed", "gold", "step", "split"} <= set(sample)
    env = json.loads((rd / "env.json").read_text())
    assert env["num_threads"] == 1 and "torch" in env["packages"]

    # re-running a completed spec: exit 0, says so, writes nothing
    before = snapshot(rd)
    code, out, err = run_cli(capsys, "run", *FAST, "--algo", "grpo", "--seed", "3", "--out", str(tmp_path))
    assert code == 0 and "already completed" in err and snapshot(rd) == before

    # the final policy evaluates with `rlsuite eval`
    code, out, err = run_cli(capsys, "eval", "--task", "arith", "--model", str(rd / "final"),
                             "--set", "eval.max_prompts=8", "--set", "eval.test_prompts=8", "--json")
    assert code == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    assert 0.0 <= res["eval/arith/greedy_acc"] <= 1.0 and res["n_prompts"] == 8


def test_same_spec_twice_gives_identical_metrics(tmp_path, capsys):
    dirs = []
    for sub in ("a", "b"):
        code, out, err = run_cli(capsys, "run", *FAST, "--algo", "ppo", "--out", str(tmp_path / sub))
        assert code == 0, err
        dirs.append(_run_dir(out))
    assert dirs[0].name == dirs[1].name
    for name in ("metrics.jsonl", "evals.jsonl"):
        a, b = (strip_timing(read_jsonl(d / name)) for d in dirs)
        assert a == b and len(a) > 0
    assert read_jsonl(dirs[0] / "samples.jsonl") == read_jsonl(dirs[1] / "samples.jsonl")


@pytest.mark.parametrize("args, needle", [
    (["--algo", "grpo2"], "unknown algorithm 'grpo2'; did you mean 'grpo'?"),
    (["--algo", "grpo", "--set", "rollout.temprature=0.5"], "did you mean 'temperature'"),
    (["--algo", "grpo", "--set", "rollout.group_size=abc"], "rollout.group_size: expected int"),
    (["--algo", "grpo", "--set", "rollout.top_p=1.5"], "rollout.top_p must be in (0, 1]"),
    (["--algo", "grpo", "--budget", "sample=10"], "did you mean 'samples'"),
    (["--algo", "grpo", "--set", "nosection"], "--set expects key=value"),
    (["--algo", "grpo", "--set", "bogus.x=1"], "section one of"),
    (["--algo", "grpo", "--model", "no_such_model"], "unknown model 'no_such_model'"),
    (["--algo", "grpo", "--set", "algo.clip_eps_lo=0.1"], "did you mean 'clip_eps_low'"),
    (["--algo", "ppo", "--set", "algo.dual_clip=0.5"], "dual_clip must be > 1"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "run", "--task", "arith", *args, "--out", str(out_dir))
    assert code == 2
    assert needle in err
    assert err.count("error:") == 1
    assert not out_dir.exists()


def test_every_problem_is_reported_at_once(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", "--task", "arithm", "--algo", "grpoo", "--set", "optim.lrr=1",
                           "--budget", "tokens=3", "--out", str(tmp_path / "o"))
    assert code == 2
    for needle in ("unknown task 'arithm'", "unknown algorithm 'grpoo'", "optim.lrr", "--budget tokens"):
        assert needle in err


def test_bad_config_file(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rollout: [1, 2]\n")
    code, _, err = run_cli(capsys, "run", "--task", "arith", "--algo", "grpo", "--config", str(cfg),
                           "--out", str(tmp_path / "o"))
    assert code == 2 and "section 'rollout' must be a mapping" in err
    cfg.write_text("rollout: {group_size: 4\n")
    code, _, err = run_cli(capsys, "run", "--task", "arith", "--algo", "grpo", "--config", str(cfg),
                           "--out", str(tmp_path / "o"))
    assert code == 2 and "not valid YAML" in err
    code, _, err = run_cli(capsys, "run", "--task", "arith", "--algo", "grpo", "--config", str(tmp_path / "nope.yaml"),
                           "--out", str(tmp_path / "o"))
    assert code == 2 and "no such file" in err
    assert not (tmp_path / "o").exists()


def test_config_file_and_set_precedence(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rollout: {group_size: 2, prompts_per_step: 4}\nmodel: {warm_start: none}\n"
                   "eval: {max_prompts: 4, test_prompts: 4}\nbudget: {updates: 2}\n")
    code, out, err = run_cli(capsys, "run", "--task", "arith", "--algo", "grpo", "--config", str(cfg),
                             "--set", "rollout.group_size=3", "--out", str(tmp_path))
    assert code == 0, err
    spec = json.loads((_run_dir(out) / "spec.json").read_text())
    assert spec["rollout"]["group_size"] == 3 and spec["rollout"]["prompts_per_step"] == 4
    assert spec["budget"]["updates"] == 2 and spec["budget"]["samples"] is None  # replaces the preset budget


def test_list_json(capsys):
    code, out, _ = run_cli(capsys, "list", "algorithms", "--json")
    rows = json.loads(out)
    by = {r["name"]: r for r in rows}
    assert {"grpo", "ppo"} <= set(by)
    for r in rows:
        assert {"name", "summary", "citation", "fidelity", "assumptions", "switches", "needs"} <= set(r)
        assert r["fidelity"] in ("code", "paper", "abstract", "description")
    assert "values" in by["ppo"]["needs"] and "scale_by_std" in by["grpo"]["switches"]
    code, out, _ = run_cli(capsys, "list", "tasks", "--json")
    tasks = {r["name"]: r for r in json.loads(out)}
    assert {"arith", "gsm8k"} <= set(tasks) and tasks["arith"]["fidelity"] is None and tasks["arith"]["version"]
    code, out, _ = run_cli(capsys, "list", "models", "--json")
    assert "tiny" in {r["name"] for r in json.loads(out)}


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "rlsuite.suite.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def _wait_for_step(status: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if json.loads(status.read_text()).get("step", 0) >= step:
                return
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("run did not reach the step in time")


@pytest.mark.slow
def test_sigkill_then_resume_ends_with_the_same_metrics(tmp_path):
    args = ["run", *FAST[:2], "--budget", "samples=640", *FAST[4:], "--algo", "grpo",
            "--set", "train.checkpoint_every=2"]
    ref = _cli(*args, "--out", str(tmp_path / "ref"))
    ref_out, ref_err = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_err
    ref_dir = _run_dir(ref_out)

    victim = _cli(*args, "--out", str(tmp_path / "kill"))
    run_dir = tmp_path / "kill" / ref_dir.name
    _wait_for_step(run_dir / "status.json", 11, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "running"  # stale now: pid is gone

    again = _cli(*args, "--out", str(tmp_path / "kill"))
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["attempt"] == 2
    for name in ("metrics.jsonl", "evals.jsonl"):
        assert strip_timing(read_jsonl(run_dir / name)) == strip_timing(read_jsonl(ref_dir / name)), name


@pytest.mark.slow
def test_sigint_preempts_then_resumes(tmp_path):
    args = ["run", *FAST[:2], "--budget", "samples=640", *FAST[4:], "--algo", "ppo", "--out", str(tmp_path)]
    proc = _cli(*args)
    time.sleep(0.1)
    first = None
    t0 = time.time()
    while first is None and time.time() - t0 < 120:
        first = next(tmp_path.glob("*/status.json"), None)
        time.sleep(0.05)
    _wait_for_step(first, 3, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    status = json.loads(first.read_text())
    assert status["state"] == "preempted"
    again = _cli(*args)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert json.loads(first.read_text())["state"] == "completed"
    steps = [r["step"] for r in read_jsonl(first.parent / "metrics.jsonl")]
    assert steps == list(range(1, 21))
