"""Sharded training (``dist.shard=fsdp``, suite/sharding.py) on two gloo processes equals the
one-process unsharded run with the same global batch.

Each rank trains on half of every minibatch in two micro-batches of 4 (gradient accumulation
inside a rank, then a reduce-scatter of sums), so the gradients agree with the one-process
ones up to float summation order; the one update per step is unclipped or clipped by a norm
computed from the shards (~1e-7 relative). Runs use the cached arith warm start
(``RLSUITE_CACHE``, tests/conftest.py).

Run: pytest tests/integration/test_fsdp.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlsuite.suite.errors import BadInput
from rlsuite.suite.runfolder import read_jsonl
from rlsuite.suite.spec import resolve

sys.path.insert(0, str(Path(__file__).parent))
from fsdp_harness import probe, spawn_probe, spawn_run  # noqa: E402

BASE = [("eval.max_prompts", 8),
    ("eval.test_prompts", 8), ("rollout.prompts_per_step", 4), ("rollout.group_size", 4), ("rollout.rng", "row"),
        ("train.minibatches", 1), ("train.micro_batch_size", 4),
        ("train.share_prefix", False), ("optim.fused", False)]  # the levers a sharded run resolves `auto` to
SHARD2 = [("dist.world_size", 2), ("dist.shard", "fsdp")]
ALGOS = ["grpo", "ppo", "ggpo"]  # ppo: a critic (its own parameter group); ggpo: a reference (refreshed)
EXTRA = {"ggpo": [("algo.refresh_every", 1)]}  # π_ref ← π_θ after every update: the sharded refresh by step 2
TIMING = ("time", "budget/wall_s")


def _spec(algo: str, sets=(), budget=(("updates", 40),)):
    return resolve("arith", algo, "tiny", 1, sets=BASE + EXTRA.get(algo, []) + list(sets), budgets=list(budget))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


# The engine and the trainer compute the same fp32 log-probs with different kernels and summation
# orders, so ``mismatch/*`` (|Δ log-prob|, the k1 KL, the ratio μ/π_old) is float rounding noise: a
# few ulps of a log-prob (~1e-6 nats here) whose size depends on the CPU's kernels (AVX-512, AMX,
# plain loops) and on the sharding. No two runs need agree on it; what holds on any CPU is that it
# stays rounding-sized: |Δ log-prob| and the KL below 1e-4 nats, ratios within 1e-4 of 1. A real
# mismatch fails it: a missed weight push, or bf16 engine weights (largest |Δ log-prob| ~0.2 a token,
# benchmarks/mismatch/mismatch.md).
NOISE_BOUND = 1e-4


def _within_noise(key: str, a: float, b: float) -> None:
    centre = 1.0 if "ratio" in key or "weight" in key else 0.0
    for v in (a, b):
        assert abs(v - centre) <= NOISE_BOUND, (key, a, b)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Two steps of each algorithm on 2 sharded gloo ranks (one process group for all)."""
    out = tmp_path_factory.mktemp("fsdp2")
    return dict(zip(ALGOS, spawn_probe([_spec(a, SHARD2) for a in ALGOS], 2, out)))


@pytest.mark.parametrize("algo", ALGOS)
def test_two_sharded_ranks_equal_one_process_at_steps_1_and_2(algo, sharded, tmp_path):
    one_spec, two_spec = _spec(algo), _spec(algo, SHARD2)
    assert one_spec.run_id == two_spec.run_id  # dist.shard is not in the run id (like world_size)
    one = probe(one_spec, tmp_path)
    r0, r1 = sharded[algo]
    row1, row2 = one["rows"][0], r0["rows"][0]
    assert set(row1) == set(row2)
    for k in ("loss/total", "loss/policy", "stats/grad_norm") + (("loss/value",) if algo == "ppo" else ()):
        assert _rel(row1[k], row2[k]) < 1e-5, (k, row1[k], row2[k])
    assert row1["stats/grad_norm"] > 0 and 0 < row1["reward/mean"] < 1  # a non-trivial update
    for k, v in row1.items():  # every other metric of step 1 as well
        if k in TIMING or k.startswith("perf/") or not isinstance(v, float) or math.isnan(v):
            continue
        if k.startswith("mismatch/"):  # engine-vs-trainer rounding noise: bounded, not equal
            _within_noise(k, v, row2[k])
        else:
            assert row2[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    assert r0["delta"].keys() == one["delta"].keys()
    # the parameter update of step 1: within 1e-5 relative as a whole; tensor by tensor within
    # 1e-4 (AdamW's first step is g/|g| elementwise, so entries with a gradient near eps, e.g.
    # rarely seen embedding rows, move with the gradient's last bits)
    diff = torch.cat([(r0["delta"][k] - d).flatten() for k, d in one["delta"].items()])
    upd = torch.cat([d.flatten() for d in one["delta"].values()])
    assert float(upd.norm()) > 0 and float(diff.norm() / upd.norm()) < 1e-5, float(diff.norm() / upd.norm())
    for k, d in one["delta"].items():
        err = float((r0["delta"][k] - d).norm() / d.norm().clamp(min=1e-30))
        assert err < 1e-4, (k, err)
        torch.testing.assert_close(r1["delta"][k], r0["delta"][k], rtol=0, atol=0)  # every rank has the same view
    if algo == "ggpo":  # step 2 scores against the reference refreshed (sharded) after update 1
        a, b = one["rows"][1], r0["rows"][1]
        assert a["algo/ggpo/refreshes"] == b["algo/ggpo/refreshes"] == 1
        kls = [k for k in a if "kl" in k.lower() and isinstance(a[k], float) and math.isfinite(a[k])]
        assert kls, sorted(a)
        for k in kls:
            assert b[k] == pytest.approx(a[k], rel=1e-3, abs=1e-6), k
    assert len(one["tokens"]) == len(r0["tokens"]) == 2
    for a, b in zip(one["tokens"], r0["tokens"]):  # the step-1 and step-2 rollouts: the same tokens
        assert torch.equal(a, b)
    # (4) what a rank holds of parameters + optimizer state: about half of the unsharded run's
    full = one["mem"]["params"] + one["mem"]["optim"]
    for r in (r0, r1):
        half = r["mem"]["params"] + r["mem"]["optim"]
        assert 0.45 * full < half < 0.55 * full, (r["mem"], one["mem"])
        assert r["mem"]["optim"] < 0.55 * one["mem"]["optim"]


def test_shard_settings_are_checked_at_resolution():
    with pytest.raises(BadInput, match="dist.shard=fsdp"):
        _spec("grpo", [("dist.activation_checkpointing", True)])
    with pytest.raises(BadInput, match="share_prefix"):
        _spec("grpo", SHARD2 + [("train.share_prefix", True)])
    with pytest.raises(BadInput, match="shard_offload"):
        _spec("grpo", SHARD2 + [("dist.shard_offload", True), ("train.device", "cpu")])
    # bf16 parameters change results: in the run id; activation checkpointing does not
    assert _spec("grpo", SHARD2 + [("dist.shard_precision", "bf16")]).run_id != _spec("grpo").run_id
    assert _spec("grpo", SHARD2 + [("dist.activation_checkpointing", True)]).run_id == _spec("grpo").run_id


def _same_metrics(a: Path, b: Path, rel: float = 0.0) -> None:
    m1, m2 = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [r["step"] for r in m1] == [r["step"] for r in m2]
    for r1, r2 in zip(m1, m2):
        assert set(r1) == set(r2)
        for k, v in r1.items():
            if k in TIMING or k.startswith("perf/"):
                continue
            if isinstance(v, float) and math.isnan(v):
                assert math.isnan(r2[k]), k
            elif rel:  # mismatch/*: μ's log-probs (the engine) against π_old's: rounding-sized on-policy
                # (~1e-6, its ulps differ by CPU), real under a stale engine (~1e-3, equal up to rounding)
                tol = NOISE_BOUND / 10 if k.startswith("mismatch/") else 1e-7
                assert r2[k] == pytest.approx(v, rel=rel, abs=tol), \
                    (r1["step"], k)
            else:
                assert r2[k] == v, (r1["step"], k)


def _same_final(a: Path, b: Path, atol: float = 0.0) -> None:
    p1, p2 = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
    assert p1.keys() == p2.keys()
    for k in p1:
        torch.testing.assert_close(p2[k], p1[k], rtol=0 if not atol else 1e-5, atol=atol)


RESUME = [("train.checkpoint_every", 1), ("train.micro_batch_size", 8)]


def test_sharded_checkpoint_resumes_exactly_and_on_another_world_size(tmp_path):
    """(3) A sharded run stopped at step 2 (checkpoint: torch.distributed.checkpoint) resumes to
    the uninterrupted sharded run's result, exactly on the same world size and within float
    summation order on one rank; final/ is a save_pretrained folder equal to the unsharded run's."""
    budget = (("updates", 4),)
    spec = _spec("ppo", SHARD2 + RESUME, budget)
    assert spawn_run(spec, tmp_path / "ref", 2) == 0
    ref = tmp_path / "ref" / spec.run_id
    assert json.loads((ref / "status.json").read_text())["state"] == "completed"
    assert (ref / "final" / "config.json").exists()
    assert json.loads((ref / "final" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]

    assert spawn_run(spec, tmp_path / "same", 2, stop_at=2) == 130
    run = tmp_path / "same" / spec.run_id
    assert (run / "checkpoint" / "dcp" / ".metadata").exists() and (run / "checkpoint" / "state.pt").exists()
    assert len(list((run / "checkpoint" / "dcp").glob("*.distcp"))) == 2  # one file of shards per rank
    assert spawn_run(spec, tmp_path / "same", 2) == 0
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "completed" and st["attempt"] == 2 and st["step"] == 4
    _same_metrics(ref, run)
    _same_final(ref, run)

    assert spawn_run(spec, tmp_path / "other", 2, stop_at=2) == 130
    one_rank = _spec("ppo", [("dist.world_size", 1), ("dist.shard", "fsdp")] + RESUME, budget)
    assert one_rank.run_id == spec.run_id
    assert spawn_run(one_rank, tmp_path / "other", 1) == 0  # resharded from 2 ranks onto 1
    other = tmp_path / "other" / spec.run_id
    assert json.loads((other / "status.json").read_text())["state"] == "completed"
    _same_metrics(ref, other, rel=1e-4)
    _same_final(ref, other, atol=1e-6)

    # the unsharded one-process run of the same spec: the same run (final/ in the same format)
    plain = _spec("ppo", RESUME, budget)
    assert spawn_run(plain, tmp_path / "plain", 1) == 0
    _same_metrics(ref, tmp_path / "plain" / spec.run_id, rel=1e-4)
    _same_final(ref, tmp_path / "plain" / spec.run_id, atol=1e-6)
    assert sorted(os.listdir(ref / "final")) == sorted(os.listdir(tmp_path / "plain" / spec.run_id / "final"))


def test_a_stale_engine_under_sharding_equals_the_unsharded_stale_run(tmp_path):
    """``rollout.staleness=2, rollout.sync=lag``: the behaviour history holds sharded snapshots and
    the engine samples from the policy of two updates ago; the evals (rank 0, on the stale
    engine's eval copy, gathered by every rank) and every step's metrics equal the unsharded
    one-process run up to float summation order, and the lagging engine's weights resume from a
    sharded checkpoint exactly."""
    budget = (("updates", 4),)
    stale = [("rollout.staleness", 2), ("rollout.sync", "lag"), ("eval.every", 0.5)]
    spec = _spec("grpo", SHARD2 + RESUME + stale, budget)
    plain = _spec("grpo", RESUME + stale, budget)
    assert spec.run_id == plain.run_id
    assert spawn_run(spec, tmp_path / "fsdp", 2) == 0
    assert spawn_run(plain, tmp_path / "plain", 1) == 0
    a, b = tmp_path / "plain" / spec.run_id, tmp_path / "fsdp" / spec.run_id
    _same_metrics(a, b, rel=1e-4)
    ea, eb = read_jsonl(a / "evals.jsonl"), read_jsonl(b / "evals.jsonl")
    assert len(ea) == len(eb) >= 3 and [e["step"] for e in ea] == [e["step"] for e in eb]
    for x, y in zip(ea, eb):
        assert {k: v for k, v in x.items() if k.startswith("eval/")} == \
            {k: v for k, v in y.items() if k.startswith("eval/")}, (x["step"], x["split"])
    # the weights after 4 AdamW steps: float summation order moves near-zero-gradient entries
    # (Adam divides by sqrt(v)); as a whole within 1e-5 relative of the unsharded run's
    pa, pb = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
    assert pa.keys() == pb.keys()
    num = sum(float((pb[k] - pa[k]).norm()) ** 2 for k in pa) ** 0.5
    den = sum(float(pa[k].norm()) ** 2 for k in pa) ** 0.5
    assert num / den < 1e-5, num / den
    # stopped at step 2 (the engine two updates behind) and resumed: the uninterrupted sharded run
    assert spawn_run(spec, tmp_path / "resumed", 2, stop_at=2) == 130
    assert spawn_run(spec, tmp_path / "resumed", 2) == 0
    _same_metrics(b, tmp_path / "resumed" / spec.run_id)
    _same_final(b, tmp_path / "resumed" / spec.run_id)


@pytest.mark.slow
def test_a_killed_sharded_rank_fails_the_run_and_the_rerun_resumes_exactly(tmp_path):
    """(6) SIGKILL rank 1 of a sharded run: ``failed`` naming rank 1; the re-run resumes from the
    sharded checkpoint and ends with the uninterrupted sharded run's metrics and weights."""

    from rlsuite.suite.distributed import launch_local
    from rlsuite.suite.runner import execute
    from tests.fakes import kill_rank_when

    budget = (("updates", 8),)
    spec = _spec("grpo", SHARD2 + RESUME, budget)
    assert spawn_run(spec, tmp_path / "ref", 2) == 0
    run = tmp_path / "run" / spec.run_id
    watcher, killed = kill_rank_when(run, at_step=3, timeout_s=600)
    assert launch_local(spec, tmp_path / "run", execute, grace_s=2.0) == 1
    watcher.join(5)
    assert killed, "rank 1 was never seen running"
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == "failed" and "rank 1 exited with code -9" in st["reason"], st
    code, run_dir = execute(spec, tmp_path / "run")  # rlsuite run of the same spec: spawns 2 ranks, resumes
    assert code == 0 and run_dir == run
    _same_metrics(tmp_path / "ref" / spec.run_id, run)
    _same_final(tmp_path / "ref" / spec.run_id, run)


@pytest.fixture(scope="module")
def real_model() -> Path:
    from rlsuite.suite import pinned_models

    try:
        pinned_models.fetch(pinned_models.SMOLLM2_135M.name)
    except BadInput as e:
        msg = f"real model smollm2-135m not available: {e}"
        if os.environ.get("RLSUITE_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(msg + " (RLSUITE_REQUIRE_REAL_MODEL=1)")
        pytest.skip(msg)
    return pinned_models.verified_dir(pinned_models.SMOLLM2_135M)


REAL = [("task.style", "question"), ("task.max_operand", 20), ("task.ops", "+"), ("task.val_fraction", 0.1),
        ("rollout.prompts_per_step", 2), ("rollout.group_size", 2), ("rollout.max_new_tokens", 16),
        ("rollout.rng", "row"), ("train.micro_batch_size", 2), ("optim.lr", 1e-5), ("eval.max_prompts", 4),
        ("eval.test_prompts", 4),
        ("optim.grad_clip", 0.0), ("train.share_prefix", False), ("optim.fused", False)]
"""Unclipped: a clip coefficient from torch's float32 norm (above) would move AdamW's first step on
entries whose gradient is near eps by the norm's own error (measured 3e-5 of the update)."""


def test_one_sharded_step_on_the_real_model(real_model, tmp_path):
    """(5) SmolLM2-135M, 2 prompts × 2 samples × ≤ 16 tokens (seed 3: mixed rewards), one step on 2 sharded ranks equals
    one unsharded process (loss, grad norm, update), and a rank holds about half the state."""
    one_spec = resolve("arith", "grpo", "smollm2-135m", 3, sets=REAL, budgets=[("updates", 1)])
    two_spec = resolve("arith", "grpo", "smollm2-135m", 3, sets=REAL + SHARD2, budgets=[("updates", 1)])
    (r0, r1), = spawn_probe([two_spec], 2, tmp_path / "two", steps=1, deltas=False)
    one = probe(one_spec, tmp_path / "one", steps=1)
    row1, row2 = one["rows"][0], r0["rows"][0]
    for k in ("loss/total", "loss/policy", "reward/mean", "len/response_mean"):
        assert _rel(row1[k], row2[k]) < 1e-5, (k, row1[k], row2[k])
    # the gradient norm: the sharded one sums squared shard norms in float64; torch's float32
    # norm of the one process is itself off by ~3e-5 relative on the 28M-entry embedding gradient
    # (a float64 norm of the same gradients is the reference; measured: sharded within 1e-7 of it)
    assert row1["stats/grad_norm"] > 0
    assert _rel(one["norms64"][0], row2["stats/grad_norm"]) < 1e-5, (one["norms64"][0], row2["stats/grad_norm"])
    assert _rel(row1["stats/grad_norm"], row2["stats/grad_norm"]) < 1e-4
    assert torch.equal(one["tokens"][0], r0["tokens"][0])
    diff = sum(float((r0["delta"][k] - d).pow(2).sum()) for k, d in one["delta"].items()) ** 0.5
    upd = sum(float(d.pow(2).sum()) for d in one["delta"].values()) ** 0.5
    assert upd > 0 and diff / upd < 1e-5, diff / upd
    full = one["mem"]["params"] + one["mem"]["optim"]
    for r in (r0, r1):
        assert 0.45 * full < r["mem"]["params"] + r["mem"]["optim"] < 0.55 * full, (r["mem"], one["mem"])


def test_sweep_dry_run_shows_memory_per_rank_for_the_sharding():
    from rlsuite.sweeps.cost import dry_run_lines

    def mem(sets) -> str:
        spec = resolve("arith", "ppo", "smollm2-135m", 0, sets=[("rollout.rng", "row")] + sets,
                       budgets=[("updates", 4)])
        row = dry_run_lines([spec], 1, "test")[-2]
        return dict(c.split("=", 1) for c in row.split("\t") if "=" in c)["mem_rank"]

    def gib(s: str) -> float:
        return float(s[:-3]) * {"GiB": 1.0, "MiB": 1 / 1024}[s[-3:]]

    plain, dp, fsdp = mem([]), mem([("dist.world_size", 2)]), mem(SHARD2)
    assert plain == dp  # data parallelism: every rank holds everything
    engine = 134_515_008 * 4 / 2**30  # the rollout engine's full fp32 copy, never sharded
    assert gib(fsdp) - engine == pytest.approx((gib(plain) - engine) / 2, abs=0.01)  # printed to 0.01 GiB
