"""A grader that cannot grade fails; it never scores 0.

* math-verify's spawn pool: a guard-less script (the workers re-run it and die on start-up)
  exits non-zero with one clear error, not all-"wrong" grades; a guarded script grades
  correctly; a worker that dies on (or hangs on) one item makes that item a grade error only;
  a pool that keeps dying, or cannot run the grader at all, raises ``GraderError``;
* math / gsm8k map a verdict error to ``Grade.error`` (distinct from a wrong answer);
* code tasks: a ``sandbox_error`` (the sandbox, not the program, failed) is a grade error, a
  sandbox whose workers cannot start raises; a failing or timed-out program stays wrong;
* the trainer counts ``reward/grade_errors`` per step, leaves errored rows out of the loss,
  and a run whose every grade errored ends ``failed`` (exit 1) naming the grader error.

Run: ``python -m pytest -q tests/tasks/test_grader_errors.py`` (≈ 1–2 min: pools and scripts spawn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlsuite.tasks.base import TASKS, Grade, GraderError
from rlsuite.tasks.math_grading import MathVerifyPool
from tests.fakes import ParityTask

REPO = Path(__file__).resolve().parents[2]


# -- the guard-less script ------------------------------------------------------------------

SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from rlsuite.tasks.math import Math, MathConfig

def grade():
    task = Math(MathConfig(name="math"))
    rows = [{{"problem": "p", "solution": "so \\\\boxed{{2}}"}}] * 3
    grades = task.grade_batch(rows, ["\\\\boxed{{2}}", "\\\\boxed{{3}}", "$\\\\boxed{{2}}$"])
    print("RESULTS", [(g.correct, g.error) for g in grades], flush=True)
    task.close()
"""


def _run_script(tmp_path: Path, name: str, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(SCRIPT.format(repo=str(REPO)) + textwrap.dedent(body))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)


def test_guardless_script_fails_with_one_clear_error_not_all_wrong(tmp_path):
    r = _run_script(tmp_path, "noguard.py", "\ngrade()\n")  # module level: every spawn worker re-runs it
    assert r.returncode != 0
    assert "RESULTS" not in r.stdout, r.stdout  # never all-"wrong" grades
    err = r.stderr
    assert "GraderError: the math-verify grading pool's worker processes died on start-up" in err, err[-3000:]
    assert "spawn start method" in err and "if __name__ == '__main__':" in err
    assert str(tmp_path / "noguard.py") in err  # names the script


def test_guarded_script_grades_correctly(tmp_path):
    r = _run_script(tmp_path, "guarded.py", "\nif __name__ == '__main__':\n    grade()\n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESULTS [(True, None), (False, None), (True, None)]" in r.stdout


# -- the pool's failure paths (module-level workers, imported by the spawn children) --------

def _dying(pairs, timeout):
    """Kills its worker on a prediction starting with DIE; otherwise string equality."""
    if any(p.startswith("DIE") for _, p in pairs):
        os._exit(1)
    return [(g == p, None) for g, p in pairs]


def _hanging(pairs, timeout):
    if any(p == "HANG" for _, p in pairs):
        time.sleep(3600)
    return [(g == p, None) for g, p in pairs]


def _no_grader(pairs, timeout):
    raise ImportError("No module named 'math_verify'")


def test_a_worker_dying_on_one_item_makes_only_that_item_a_grade_error():
    pool = MathVerifyPool(chunk=4)
    pool.work = _dying
    try:
        out = pool.verify_each(["1", "1", "1", "1", "1"], ["1", "2", "DIE", "1", "DIE"])
    finally:
        pool.close()
    assert [ok for ok, _ in out] == [True, False, False, True, False]
    assert [e is None for _, e in out] == [True, True, False, True, False]
    assert "killed its worker process" in out[2][1] and "'DIE'" in out[2][1]


def test_a_pool_that_keeps_dying_raises():
    pool = MathVerifyPool(chunk=1)
    pool.work = _dying
    pool.max_consecutive_failures = 2
    try:
        with pytest.raises(GraderError, match="failed on 2 items in a row.*keep dying or hanging"):
            pool.verify_each(["1", "1", "1"], ["DIE1", "DIE2", "DIE3"])
    finally:
        pool.close()


def test_an_item_that_hangs_its_worker_is_a_grade_error():
    pool = MathVerifyPool(timeout_s=1)
    pool.work = _hanging
    try:
        t0 = time.monotonic()
        out = pool.verify_each(["1"], ["HANG"])
        assert time.monotonic() - t0 < 60
        assert out[0][0] is False and "did not return within 12 s" in out[0][1]
        assert pool.verify_each(["1"], ["1"]) == [(True, None)]  # a fresh pool grades again
    finally:
        pool.close(kill=True)


def test_a_worker_that_cannot_run_the_grader_raises():
    pool = MathVerifyPool()
    pool.work = _no_grader
    try:
        with pytest.raises(GraderError, match="cannot grade: ImportError: No module named 'math_verify'"):
            pool.verify_each(["1"], ["1"])
        with pytest.raises(GraderError, match="ImportError"):
            pool.verify(["1"], ["1"])  # the bool API raises too, never returns [False]
    finally:
        pool.close()


def test_math_and_gsm8k_map_a_verdict_error_to_a_grade_error(monkeypatch):
    from rlsuite.tasks.gsm8k import GSM8K, GSM8KConfig
    from rlsuite.tasks.math import Math, MathConfig

    verdicts = [(True, None), (False, None), (False, "math-verify raised KeyError: x")]
    for task, rows, comps in (
            (Math(MathConfig(name="math")), [{"problem": "p", "solution": "\\boxed{2}"}] * 4,
             ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "no box"]),
            (GSM8K(GSM8KConfig(name="gsm8k")), [{"question": "q", "answer": "#### 2"}] * 4,
             ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "no number"])):
        monkeypatch.setattr(task._pool, "verify_each", lambda golds, preds: verdicts[:len(preds)])
        g = task.grade_batch(rows, comps)
        assert [x.correct for x in g] == [True, False, False, False]
        assert [x.error for x in g] == [None, None, "math-verify raised KeyError: x", None]
        assert g[2].reward == 0.0 and g[2].parsed is None  # no reward, no maj@k vote
        assert g[1].parsed is not None  # a wrong answer still votes
        task.close()


# -- code tasks -----------------------------------------------------------------------------

@pytest.fixture
def humaneval(tmp_path):
    from tests.conftest import require_sandbox

    require_sandbox()
    from rlsuite.tasks.code import CodeConfig, HumanEval

    task = HumanEval(CodeConfig(name="humaneval", data_path=str(tmp_path), sandbox_workers=1, timeout_s=2.0))
    yield task
    task.close()


ROW = {"task_id": "t/0", "prompt": "def f(x):\n", "canonical_solution": "    return x\n", "entry_point": "f",
       "test": "def check(c):\n    assert c(1) == 1\n"}


def test_sandbox_error_is_a_grade_error_and_a_failing_program_stays_wrong(humaneval, monkeypatch):
    from rlsuite.tasks.sandbox import RunResult

    real = humaneval.sandbox.run_many

    def flaky(codes, timeout_s=None):  # the sandbox fails on programs marked BROKEN
        ok = real([c for c in codes if "BROKEN" not in c], timeout_s)
        return [RunResult("sandbox_error", None, "worker exited with -9: ", 0.0) if "BROKEN" in c else ok.pop(0)
                for c in codes]

    monkeypatch.setattr(humaneval.sandbox, "run_many", flaky)
    comps = ["    return x\n", "    return 0\n", "    while True: pass\n", "    return x  # BROKEN\n"]
    g = humaneval.grade_batch([ROW] * 4, comps)
    assert [x.correct for x in g] == [True, False, False, False]
    assert [x.error is None for x in g] == [True, True, True, False]  # wrong and timed out: real verdicts
    assert g[2].error_class == "timeout"
    assert "sandbox could not run 1 of 1 test program" in g[3].error and "worker exited with -9" in g[3].error
    assert g[3].reward == 0.0 and g[3].error_class == "sandbox_error"
    assert not any("BROKEN" in p for p in humaneval._cache)  # a sandbox failure is never cached


def test_a_sandbox_whose_workers_cannot_start_raises_or_errors_never_scores_wrong(humaneval, monkeypatch):
    from rlsuite.tasks import sandbox as sbm

    def dead_plans(self):
        return [sbm._Plan([sys.executable, "-c", "import sys; sys.exit(3)"], None, {}, None)]

    monkeypatch.setattr(sbm.Sandbox, "_plans", dead_plans)
    g = humaneval.grade_batch([ROW], ["    return x\n"])  # 2 start failures: the program's result
    assert g[0].error is not None and "worker exited with 3" in g[0].error
    with pytest.raises(sbm.SandboxError, match="failed to start 3 times"):
        humaneval.grade_batch([ROW], ["    return 1\n"])


def test_code_toy_sandbox_error_is_a_grade_error(monkeypatch):
    from tests.conftest import require_sandbox

    require_sandbox()
    from rlsuite.tasks.code_toy import CodeToy
    from rlsuite.tasks.sandbox import RunResult

    task = CodeToy(CodeToy.Config(name="code_toy"))
    try:
        ex = task.splits()["train"][0]
        monkeypatch.setattr(task.sandbox, "run_many", lambda codes, t=None: [
            RunResult("sandbox_error", None, "sandbox setup failed: OSError", 0.0) for _ in codes])
        g = task.grade_batch([ex], [task.gold(ex)])
        assert g[0].error is not None and "sandbox setup failed" in g[0].error and not g[0].correct
    finally:
        task.close()


# -- retrieval (checked: no silent path; an unreachable server is loud) ----------------------

def test_an_unreachable_retrieval_server_raises_not_an_empty_observation():
    import socket

    from rlsuite.tasks.retrieval import RemoteRetriever
    from rlsuite.tasks.search import SearchEnv

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    env = SearchEnv(lambda: RemoteRetriever(f"http://127.0.0.1:{port}/retrieve", timeout_s=2, retries=1), 3)
    with pytest.raises(RuntimeError, match="retrieval server .* failed after 2 tries"):
        env.step("<search> capital of Norway </search>")


# -- the trainer ------------------------------------------------------------------------------

class _HalfErrors(ParityTask):
    """Parity reward; completions of odd length cannot be graded (a grader error)."""

    name = "_grade_errors_half_test"

    def grade(self, example, completion):
        if len(completion) % 2:
            return Grade.errored(f"grader broke on a length-{len(completion)} completion")
        return super().grade(example, completion)


class _AllErrors(ParityTask):
    name = "_grade_errors_all_test"

    def grade(self, example, completion):
        return Grade.errored("the grading service is down")


for _cls in (_HalfErrors, _AllErrors):
    if _cls.name not in TASKS:
        TASKS.register(_cls.name, _cls)


def test_grade_errors_are_counted_and_left_out_of_the_loss(tmp_path):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trainer import Trainer

    spec = resolve(_HalfErrors.name, "grpo", "tiny", 0, sets=[("model.warm_start", "none")])
    task, algo = TASKS.get(spec.task.name)(spec.task), ALGORITHMS.get("grpo")(spec.algo)
    model, tok, _ = load_model(spec.model)
    tr = Trainer(spec, tmp_path / "run", task, algo, model, tok)
    tr.state.step_no = 1
    batch, _ = tr._collect_batch(tr.context())
    err = batch.grade_error.cpu()
    odd = torch.tensor([len(t) % 2 == 1 for t in batch.texts])
    assert torch.equal(err, odd) and 0 < int(err.sum()) < batch.batch_size
    assert float(batch.loss_mask[err].sum()) == 0.0 and bool((batch.loss_mask[~err].sum(-1) > 0).all())
    assert float(batch.scores[err].abs().sum()) == 0.0
    errors, stage = tr.rollouts.errors, tr.rollouts
    assert errors.count == int(err.sum())
    # Group.grade (the task judge's and anchors' grader) counts its grade errors too
    n = errors.count
    assert stage.grade_one(tr.splits["train"][0], "x") == 0.0 and errors.count == n + 1
    assert stage.grade_one(tr.splits["train"][0], "xy") == 1.0 and errors.count == n + 1


def test_run_counts_reward_grade_errors_per_step(tmp_path, capsys):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve

    spec = resolve(_HalfErrors.name, "grpo", "tiny", 0, sets=[("model.warm_start", "none")])
    code, run_dir = execute(spec, tmp_path)
    assert code == 0
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert rows and all("reward/grade_errors" in r for r in rows)
    assert any(r["reward/grade_errors"] > 0 for r in rows)
    assert all(r["stability/nonfinite"] == 0 for r in rows)
    assert "could not grade" in capsys.readouterr().err
    assert all("grade_errors" in e for e in read_jsonl(run_dir / "evals.jsonl"))


def test_a_run_whose_every_grade_errors_fails_naming_the_grader_error(tmp_path):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trainer import Trainer

    spec = resolve(_AllErrors.name, "grpo", "tiny", 0, sets=[("model.warm_start", "none")])
    code, run_dir = execute(spec, tmp_path / "out")  # the first grading is the step-0 val eval
    assert code == 1
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed"
    assert status["reason"].startswith("GraderError: ") and "the grading service is down" in status["reason"]
    # a training step whose every grade errored stops the same way (never trains on all-zero rewards)
    model, tok, _ = load_model(spec.model)
    tr = Trainer(spec, tmp_path / "run", TASKS.get(spec.task.name)(spec.task), ALGORITHMS.get("grpo")(spec.algo),
                 model, tok)
    tr.state.step_no = 1
    with pytest.raises(GraderError, match=r"could not grade any of the 16 completions at step 1 "
                                          r"\(first error: the grading service is down\)"):
        tr._collect_batch(tr.context())
