"""Progress output (issue 21 §3, :mod:`rlsuite.suite.progress`): a terminal gets one line redrawn in place
(``\\r``), anything else plain lines at most every ``every_s`` seconds; evals and the end are
lines of their own; ``off`` is silent. Every timing comes from an injected fake clock.

Run: pytest tests/unit/test_progress.py
"""

from __future__ import annotations

import io
import types

import pytest
import torch

from rlsuite.suite import progress
from rlsuite.suite.budget import Budget
from rlsuite.suite.progress import Meter, Printer, RunProgress, fmt_count, fmt_duration, main_metric, resolve_mode


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _train(mode: str = "auto", every: float = 30.0):
    return types.SimpleNamespace(progress=mode, progress_every_s=every)


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert resolve_mode("auto", TTY()) == "bar" and resolve_mode("auto", io.StringIO()) == "lines"
    assert resolve_mode("lines", TTY()) == "lines" and resolve_mode("off", TTY()) == "off"
    with pytest.raises(ValueError):
        resolve_mode("loud", io.StringIO())


def test_a_terminal_gets_one_line_redrawn_in_place():
    out, clock = TTY(), Clock()
    p = Printer("auto", stream=out, clock=clock, redraw_s=0.2, width=200)
    assert p.mode == "bar"
    assert p.update("step 1 long text")
    clock.t = 0.1
    assert not p.update("step 2")  # throttled
    clock.t = 0.5
    assert p.update("step 3")
    assert out.getvalue() == "\rstep 1 long text" + "\rstep 3" + " " * 10  # the longer text is blanked out
    assert "\n" not in out.getvalue()
    p.note("eval val step 3: greedy_acc 0.500")  # cleared, the line, then the bar again
    assert out.getvalue().endswith("\r" + " " * 6 + "\r" + "eval val step 3: greedy_acc 0.500\n" + "\rstep 3")
    p.close()
    assert out.getvalue().endswith("\rstep 3\n")


def test_a_bar_is_cut_to_the_terminal_width():
    out = TTY()
    Printer("bar", stream=out, clock=Clock(), width=10).update("x" * 50)
    assert out.getvalue() == "\r" + "x" * 8 + "…"


def test_elsewhere_plain_lines_at_most_every_n_seconds():
    out, clock = io.StringIO(), Clock(100.0)
    p = Printer("auto", every_s=30, stream=out, clock=clock)
    assert p.mode == "lines"
    for t, text in ((100, "a"), (110, "b"), (129.9, "c"), (130, "d"), (140, "e"), (161, "f")):
        clock.t = t
        p.update(text)
    assert out.getvalue() == "a\nd\nf\n"
    p.update("g", force=True)
    p.note("eval test step 9: greedy_acc 0.250")
    assert out.getvalue().splitlines()[-2:] == ["g", "eval test step 9: greedy_acc 0.250"]
    assert "\r" not in out.getvalue()


def test_off_writes_nothing():
    out = TTY()
    p = Printer("off", stream=out, clock=Clock())
    p.update("x", force=True)
    p.note("y")
    p.close()
    assert out.getvalue() == ""


def _row(step: int, budget: Budget, reward: float) -> dict:
    return {"step": step, **budget.row(), "reward/mean": reward}


def test_run_progress_shows_budget_step_reward_throughput_and_eta():
    out, clock = io.StringIO(), Clock()
    budget = Budget({"samples": 128.0})
    rp = RunProgress(_train("lines", 30), budget, stream=out, clock=clock)
    rp.start(0)
    for step in (1, 2):
        budget.charge("samples", 32)
        budget.charge("gen_tokens", 1000)
        budget.charge("wall_s", 2.0)
        clock.t = 5.0 * step  # 5 s a step, evals included
        rp.on_step(_row(step, budget, 0.25 * step))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1  # the second step came 5 s after the first: within progress_every_s
    assert lines[0] == "train 25% step 1 | reward 0.250 | 500 tok/s 16.0 samples/s | ETA 15s"
    assert rp.text(_row(2, budget, 0.5)) == "train 50% step 2 | reward 0.500 | 500 tok/s 16.0 samples/s | ETA 10s"
    rp.on_eval({"step": 2, "split": "val", "eval/arith/pass@1": 0.5, "eval/arith/greedy_acc": 0.4125, "final": False,
                "n_prompts": 16})
    rp.on_eval({"step": 4, "split": "test", "eval/arith/greedy_acc": 0.5, "final": True})
    clock.t = 62.0
    rp.finish("completed")
    assert out.getvalue().splitlines()[1:] == ["eval val step 2: greedy_acc 0.412",
                                               "eval test step 4: greedy_acc 0.500 (final)",
                                               "completed at step 2 (50% of the budget) in 1m02s"]


def test_run_progress_on_a_terminal_is_a_bar():
    out, clock = TTY(), Clock()
    budget = Budget({"updates": 4.0})
    rp = RunProgress(_train("auto"), budget, stream=out, clock=clock, width=300)
    rp.start(0)
    for step in (1, 2):
        budget.charge("updates", 1)
        clock.t = float(step)
        rp.on_step(_row(step, budget, 0.5))
    text = out.getvalue()
    assert text.count("\r") == 2 and "\n" not in text
    assert text.endswith("\rtrain [##########..........] 50% step 2 | reward 0.500 | ETA 2s")
    rp.on_eval({"step": 2, "split": "val", "eval/t/greedy_acc": 1.0})
    assert "\reval val step 2: greedy_acc 1.000\n" in out.getvalue()
    rp.finish("preempted")
    assert out.getvalue().endswith("\npreempted at step 2 (50% of the budget) in 2s\n")


def test_run_progress_of_a_resumed_attempt_counts_from_its_start():
    out, clock = io.StringIO(), Clock()
    budget = Budget({"samples": 100.0})
    budget.charge("samples", 50)  # the checkpoint's counters
    budget.charge("wall_s", 100.0)
    rp = RunProgress(_train("lines"), budget, stream=out, clock=clock)
    rp.start(5)
    budget.charge("samples", 10)
    budget.charge("wall_s", 1.0)
    clock.t = 4.0
    rp.on_step(_row(6, budget, 0.0))
    assert out.getvalue() == "train 60% step 6 | reward 0.000 | 0 tok/s 10.0 samples/s | ETA 16s\n"


def test_rank_above_zero_prints_nothing():
    out = io.StringIO()
    budget = Budget({"samples": 10.0})
    rp = RunProgress(_train("lines"), budget, active=False, stream=out, clock=Clock())
    rp.start(0)
    budget.charge("samples", 5)
    rp.on_step(_row(1, budget, 1.0))
    rp.on_eval({"step": 1, "split": "val", "eval/t/greedy_acc": 1.0})
    rp.finish("completed")
    assert out.getvalue() == ""


def test_meter_lines_with_rate_eta_and_a_final_line():
    out, clock = io.StringIO(), Clock()
    m = Meter("warm start (SFT)", 400, "steps", mode="lines", every_s=30, stream=out, clock=clock)
    for step in range(1, 401):
        clock.t = step * 0.25  # 4 steps/s
        m.update(step, f"loss {1 / step:.3f}")
        if step == 200:
            break
    m.close("check 0.950")
    lines = out.getvalue().splitlines()
    assert lines[0] == "warm start (SFT): 1/400 steps (0%), 4.0 steps/s, ETA 1m40s, loss 1.000"
    assert lines[1] == "warm start (SFT): 121/400 steps (30%), 4.0 steps/s, ETA 1m10s, loss 0.008"  # t = 30.25 s
    assert lines[-1] == "warm start (SFT): 200/400 steps (50%), 4.0 steps/s, ETA 50s, check 0.950, done in 50s"
    assert len(lines) == 3  # t = 0.25, 30.25 and the final line


def test_meter_of_bytes_and_its_delay():
    out, clock = io.StringIO(), Clock()
    with Meter("[fetch] extracting x.gguf", 98_000_000, "B", mode="lines", stream=out, clock=clock,
               delay_s=1.0) as m:
        clock.t = 0.5
        m.advance(49_000_000)  # before the delay: nothing
        clock.t = 2.0
        m.advance(49_000_000)
    assert out.getvalue().splitlines() == [
        "[fetch] extracting x.gguf: 98.0 MB/98.0 MB (100%), 49.0 MB/s, ETA 0s",
        "[fetch] extracting x.gguf: 98.0 MB/98.0 MB (100%), 49.0 MB/s, ETA 0s, done in 2s"]
    quick = io.StringIO()
    with Meter("sha256 y", 10, "B", mode="lines", stream=quick, clock=Clock(), delay_s=2.0) as m:
        m.advance(10)  # a loop shorter than its delay prints nothing at all
    assert quick.getvalue() == ""


def test_meter_uses_the_process_defaults():
    out = io.StringIO()
    with progress.using("off"):
        Meter("x", 3, stream=out, clock=Clock()).update(1, force=True)
        assert progress.defaults()[0] == "off"
    assert progress.defaults()[0] == "auto" and out.getvalue() == ""


def test_formats():
    assert [fmt_duration(s) for s in (0, 59.4, 61, 3600 * 2 + 7 * 60, None, float("inf"))] == \
        ["0s", "59s", "1m01s", "2h07m", "?", "?"]
    assert [fmt_count(x) for x in (950, 1234, 3.4e6, 2.5)] == ["950", "1.2k", "3.4M", "2.5"]
    assert fmt_count(12_345_678, "B") == "12.3 MB" and fmt_count(999, "B") == "999 B"
    assert main_metric({"eval/t/pass@1": 0.1, "eval/t/greedy_acc": 0.3}) == ("greedy_acc", 0.3)
    assert main_metric({"eval/t/pass@1": 0.1, "final": True}) == ("pass@1", 0.1)
    assert main_metric({"step": 1}) is None


def test_the_warm_start_loop_shows_progress_and_trains_the_same(capsys):
    """``rlsuite.tasks.warm.sft_until`` (every warm start's loop) prints lines in ``lines`` mode; the
    weights it trains do not depend on the progress output."""
    from rlsuite.tasks.warm import sft_until

    def train(mode: str) -> torch.nn.Module:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        x, y = torch.randn(8, 3), torch.randn(8, 1)
        with progress.using(mode, 1e9):
            steps, acc = sft_until(model, lambda: (x, y), lambda b: ((model(b[0]) - b[1]) ** 2).mean(),
                                   lambda: 0.5, lambda a: False, max_steps=6, every=3, initial=0.0)
        assert (steps, acc) == (6, 0.5)
        return model

    quiet = train("off")
    assert capsys.readouterr().err == ""
    loud = train("lines")
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("warm start (SFT): 1/6 steps (17%)") and "loss" in err[0]
    assert err[-1].startswith("warm start (SFT): 6/6 steps (100%)") and "check 0.500, done in" in err[-1]
    assert len(err) == 2
    assert all(torch.equal(a, b) for a, b in zip(quiet.state_dict().values(), loud.state_dict().values()))
