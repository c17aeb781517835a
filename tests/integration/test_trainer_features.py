"""Trainer features beyond the default path: staleness, KL in the reward, sampled evals,
divergence, capability refusal, the filter/refill loop and the warm-start cache lock."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from rlsuite.algorithms.base import ALGORITHMS, AlgoConfig
from rlsuite.algorithms.grpo import GRPO
from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl
from tests import fakes  # the fake tasks, and crash_then_resume

SMALL = ["--task", "arith", "--set", "model.warm_start=none", "--set", "eval.max_prompts=8",
    "--set", "eval.test_prompts=8",
         "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4"]


def _run(tmp_path, capsys, *args) -> tuple[int, str, str]:
    code = main(["run", *SMALL, *args, "--out", str(tmp_path)])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _dir(out: str) -> str:
    return out.strip().splitlines()[-1].split("run_dir: ")[1]


class _NaNLoss(GRPO):
    name = "_test_nan"

    def loss(self, fwd, batch, ctx):
        loss, m = super().loss(fwd, batch, ctx)
        return loss * float("nan") if ctx.step >= 2 else loss, m


class _NeedsAttn(GRPO):
    name = "_test_needs_attn"

    @property
    def needs(self):
        return super().needs | {"attn_stat"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class _HalfCfg(AlgoConfig):
    keep_mixed_only: bool = True
    """test knob"""


class _FilterMixed(GRPO):
    """DAPO-style dynamic sampling: drop groups whose rewards are all equal."""

    name = "_test_filter"

    def filter(self, batch, ctx):
        G = ctx.group_size
        r = batch.scores.view(-1, G)
        mixed = (r != r[:, :1]).any(-1)
        return mixed.repeat_interleave(G)


for cls in (_NaNLoss, _NeedsAttn, _FilterMixed):
    if cls.name not in ALGORITHMS:
        ALGORITHMS.register(cls.name, cls)


def test_staleness_keeps_mu_apart_from_pi_old(tmp_path, capsys):
    code = main(["run", "--task", "_parity_test", "--algo", "grpo", "--budget", "updates=6",
                 "--set", "rollout.staleness=2", "--set", "algo.kl_coef=0", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    stale = [r["offpolicy/staleness_max"] for r in rows]
    assert stale[:4] == [0, 1, 2, 0]  # the engine syncs once it lags more than 2 updates
    lagging = [r for r in rows if r["offpolicy/staleness_max"] > 0]
    assert all(r["mismatch/logp_abs_diff_mean"] > 1e-4 for r in lagging)  # μ ≠ π_old
    assert all(r["mismatch/logp_abs_diff_mean"] < 1e-5 for r in rows if r["offpolicy/staleness_max"] == 0)


def test_kl_in_reward_and_sampled_evals(tmp_path, capsys):
    code = main(["run", "--task", "_parity_test", "--algo", "ppo", "--budget", "updates=3", "--set", "algo.kl_coef=0.1",
                 "--set", "eval.n_samples=4", "--set", "eval.ks=[1,2,4]", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    assert "stats/kl_ref" in rows[-1] and "loss/kl" not in rows[-1]
    assert rows[0]["reward/shaped_mean"] == pytest.approx(rows[0]["reward/mean"], abs=1e-6)  # π_old = π_ref at step 1
    assert rows[-1]["reward/shaped_mean"] != rows[-1]["reward/mean"]
    ev = read_jsonl(f"{_dir(out)}/evals.jsonl")[-1]
    for k in (1, 2, 4):
        for m in ("avg", "pass", "maj"):
            assert 0 <= ev[f"eval/_parity_test/{m}@{k}"] <= 1
    assert ev["eval/_parity_test/pass@1"] == pytest.approx(ev["eval/_parity_test/avg@4"])
    assert ev["eval/_parity_test/pass@4"] >= ev["eval/_parity_test/pass@2"] >= ev["eval/_parity_test/pass@1"]
    assert ev["n_samples"] == 4


def test_divergence_is_recorded_and_not_rerun(tmp_path, capsys):
    code, out, err = _run(tmp_path, capsys, "--algo", "_test_nan", "--budget", "updates=5")
    assert code == 3
    status = json.loads(open(f"{_dir(out)}/status.json").read())
    assert status["state"] == "diverged" and "non-finite loss at step 2" in status["reason"]
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    assert rows[-1]["stability/nonfinite"] == 1
    code, out, err = _run(tmp_path, capsys, "--algo", "_test_nan", "--budget", "updates=5")
    assert code == 3 and "already diverged" in err


def test_capability_refusal_names_the_need_and_the_backend(tmp_path, capsys):
    code, _, err = _run(tmp_path / "a", capsys, "--algo", "_test_needs_attn", "--budget", "updates=1")
    assert code == 2 and "'attn_stat'" in err and "attn_implementation=eager" in err
    assert not (tmp_path / "a").exists()
    code, _, err = _run(tmp_path / "b", capsys, "--algo", "_test_needs_attn", "--budget", "updates=1",
                        "--set", "model.attn_implementation=eager")
    assert code == 0, err


def test_filter_refill_loop_charges_discarded_samples(tmp_path, capsys):
    code = main(["run", "--task", "_parity_test", "--algo", "_test_filter", "--budget", "updates=3",
                 "--set", "rollout.max_refill_tries=3", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    for prev, r in zip([{"budget/samples": 0}] + rows, rows):
        drawn = r["budget/samples"] - prev["budget/samples"]
        assert drawn == 16 * r["filter/rollout_batches"]  # every drawn batch is charged
        assert r["filter/discarded"] == drawn - round(r["filter/kept_frac"] * drawn)


@pytest.mark.slow
def test_warm_start_cache_is_built_once_under_concurrency(tmp_path):
    script = textwrap.dedent("""
        import json, sys, torch
        torch.set_num_threads(1)
        from rlsuite.suite.config import ModelConfig
        from rlsuite.suite.models import load_model
        from rlsuite.suite.warmstart import warm_started
        from rlsuite.tasks.arith import Arith, ArithConfig
        m, tok, _ = load_model(ModelConfig())
        info = warm_started(Arith(ArithConfig(name="arith", warm_target=0.0, warm_max_steps=100)), m, tok, "tiny", 1)
        print(json.dumps({"cached": info["cached"], "sum": float(sum(p.sum() for p in m.parameters()))}))
    """)
    env = {"RLSUITE_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    import os
    env = {**os.environ, **env}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    res = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(r["cached"] for r in res) == [False, True]  # one built it, the other waited and loaded it
    assert res[0]["sum"] == res[1]["sum"]
    folders = [p for p in (tmp_path / "warmstart").iterdir() if p.is_dir()]
    assert len(folders) == 1 and not any(".tmp" in p.name for p in folders)


def test_lag_staleness_holds_the_behaviour_policy_k_updates_back(tmp_path, capsys):
    code = main(["run", "--task", "_parity_test", "--algo", "grpo", "--budget", "updates=6",
                 "--set", "rollout.sync=lag", "--set", "rollout.staleness=2", "--set", "algo.kl_coef=0",
                 "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    assert [r["offpolicy/staleness_max"] for r in rows] == [0, 1, 2, 2, 2, 2]
    assert all(r["mismatch/logp_abs_diff_mean"] > 1e-4 for r in rows[1:])


def test_mismatch_knob_makes_mu_differ_from_pi_old_on_policy(tmp_path, capsys):
    for knob, sets in (("bf16", []), ("noise", ["--set", "rollout.mismatch_scale=0.05"])):
        code = main(["run", "--task", "_parity_test", "--algo", "grpo", "--budget", "updates=2",
                     "--set", f"rollout.mismatch={knob}", *sets, "--out", str(tmp_path / knob)])
        out, err = capsys.readouterr()
        assert code == 0, err
        rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
        assert rows[0]["offpolicy/staleness_max"] == 0
        assert rows[0]["mismatch/logp_abs_diff_mean"] > 1e-6, knob  # μ from the rounded/perturbed copy


def _assert_crash_and_resume_reproduce(spec, tmp_path, monkeypatch, crash_at: int) -> list[dict]:
    """Run ``spec`` once; run it again with a crash injected at step ``crash_at``, then resume it
    from its checkpoint: the metrics of both must match. Returns the reference rows."""
    from rlsuite.suite.runner import execute

    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    run = fakes.crash_then_resume(spec, tmp_path / "crash", monkeypatch, at_step=crash_at)  # exits 1, then 0
    strip = lambda rows: [{k: v for k, v in r.items()
                           if k not in ("time", "budget/wall_s") and not k.startswith("perf/")}
                          for r in rows]
    rows = read_jsonl(ref / "metrics.jsonl")
    assert strip(read_jsonl(run / "metrics.jsonl")) == strip(rows)
    return rows


def test_lag_staleness_resumes_exactly(tmp_path, monkeypatch):
    from rlsuite.suite.spec import resolve

    spec = resolve("_parity_test", "grpo", "tiny", 0,
                   sets=[("rollout.sync", "lag"), ("rollout.staleness", 2), ("rollout.mismatch", "noise"),
                         ("train.checkpoint_every", 2)],
                   budgets=[("updates", 6)])
    _assert_crash_and_resume_reproduce(spec, tmp_path, monkeypatch, crash_at=3)


def test_kl_to_the_initial_policy_survives_reference_refreshes(tmp_path, capsys):
    """GGPO with π_ref refreshed every update: the KL to π_ref restarts each step while the KL to
    the frozen initial policy (an extra scoring pass, charged) keeps the whole drift."""
    code = main(["run", "--task", "_parity_test", "--algo", "ggpo", "--budget", "updates=4", "--set", "optim.lr=3e-3",
                 "--set", "algo.refresh_every=1", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(f"{_dir(out)}/metrics.jsonl")
    assert rows[0]["algo/ggpo/kl_init"] == pytest.approx(rows[0]["algo/ggpo/kl_ref"], abs=1e-6)  # nothing moved yet
    assert abs(rows[-1]["algo/ggpo/kl_init"]) > 1e-3 and rows[-1]["algo/ggpo/kl_init"] != rows[-1]["algo/ggpo/kl_ref"]
    assert rows[-1]["budget/flops_score_init"] > 0
    from rlsuite.algorithms.ggpo import GGPO, GGPOConfig

    assert "init_logp" not in GGPO(GGPOConfig(refresh_every=None)).needs  # π_ref = the initial policy then


def test_replayed_groups_are_rescored_and_resume_exactly(tmp_path, monkeypatch):
    """IS-GRPO's response reading re-uses the previous step's groups (the replay hook): from step 2
    on they come back appended, π_old re-scored, weighted by ρ; a crash and resume from the
    checkpoint (which holds the buffer) reproduces the metrics."""
    from rlsuite.suite.spec import resolve

    spec = resolve("_parity_test", "is_grpo", "tiny", 0, sets=[("algo.reading", "response"),
                                                             ("train.checkpoint_every", 1)], budgets=[("updates", 4)])
    rows = _assert_crash_and_resume_reproduce(spec, tmp_path, monkeypatch, crash_at=2)
    B = spec.rollout.prompts_per_step * spec.rollout.group_size
    assert "replay/rows" not in rows[0] and all(r["replay/rows"] == B for r in rows[1:])
    assert all(r["algo/is_grpo/replayed_rows"] == B and 0 < r["algo/is_grpo/rho_mean"] <= 2 for r in rows[1:])
