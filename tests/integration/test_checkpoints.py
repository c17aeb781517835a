"""Checkpoints that scale (issue 18 §5): a checkpoint holds the trained models, their optimizer
state and the behaviour weights only where they lag the policy (no frozen reference, no engine
copy equal to the policy, tied weights once); resume stays exact; a completed run drops its
``checkpoint/`` (``train.keep_checkpoint`` keeps it, without changing the run id) and keeps
``final/`` in the model's dtype; checkpoint bytes ≤ 1.25 × what resuming needs."""

from __future__ import annotations

import json

import pytest
import torch

from rlsuite.suite.checkpoint import component_bytes, unpack
from rlsuite.suite.runfolder import read_jsonl
from tests import fakes  # noqa: F401  (the _parity_test task)

BOUND = 1.25


def _spec(*sets, algo: str = "grpo", updates: int = 4):
    """A tiny run on the fake parity task that keeps its checkpoint (to be inspected)."""
    from rlsuite.suite.spec import resolve

    return resolve("_parity_test", algo, "tiny", 0, sets=[("model.warm_start", "none"), ("train.keep_checkpoint", True),
                                                         *sets], budgets=[("updates", updates)])


def _raw(run_dir) -> dict:
    return torch.load(run_dir / "checkpoint" / "state.pt", weights_only=False, map_location="cpu")


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("time", "budget/wall_s") and not k.startswith("perf/")}
            for r in rows]


def _crash_and_resume(spec, tmp_path, monkeypatch, crash_at: int) -> tuple[dict, dict, int]:
    """Run ``spec``; run it again with a crash at step ``crash_at`` and resume: metrics and evals
    must match. Returns the raw checkpoint the resume read, the uninterrupted run's last one and
    that one's size in bytes."""
    from rlsuite.suite.runner import execute
    from rlsuite.suite.trainer import Trainer

    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    real, crashed = Trainer.step, {"done": False}

    def flaky(self):
        if self.step_no == crash_at and not crashed["done"]:
            crashed["done"] = True
            raise RuntimeError("injected crash")
        return real(self)

    monkeypatch.setattr(Trainer, "step", flaky)
    code, run = execute(spec, tmp_path / "crash")
    assert code == 1 and crashed["done"]
    read = _raw(run)
    code, run = execute(spec, tmp_path / "crash")
    assert code == 0
    for name in ("metrics.jsonl", "evals.jsonl"):
        assert _strip(read_jsonl(run / name)) == _strip(read_jsonl(ref / name)), name
    return read, _raw(ref), (ref / "checkpoint" / "state.pt").stat().st_size


def _unique_bytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            n += s.nbytes()
    return n


def _needed_bytes(raw: dict, behaviour_copies: int) -> int:
    """Trainable models + their optimizer state + ``behaviour_copies`` policy copies, from the
    checkpoint's own state tensors."""
    st = unpack(raw)
    models = _unique_bytes(list(st["model"].values()) + list(st.get("critic", {}).values()))
    opt = _unique_bytes([t for s in st["opt"]["state"].values() for t in s.values() if isinstance(t, torch.Tensor)])
    policy = _unique_bytes(st["model"].values())
    return models + opt + behaviour_copies * policy


# -- (a) what a checkpoint holds, and exact resume ---------------------------------------------

def test_on_policy_checkpoint_has_no_reference_or_engine_copy_and_resumes_exactly(tmp_path, monkeypatch):
    spec = _spec(("algo.kl_coef", 0.1), ("train.checkpoint_every", 2))  # GRPO with a KL: π_ref exists
    read, last, size = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)
    for raw in (read, last):
        assert raw["format"] == 2
        assert not {"ref", "engine", "history"} & set(raw), sorted(raw)
        assert len(raw["base_sha256"]) == 64  # the base π_ref is rebuilt from, checked on resume
        assert raw["engine_version"] == raw["budget"]["counters"]["updates"]
    assert read["step"] == 2 and last["step"] == 4
    assert size <= BOUND * _needed_bytes(last, behaviour_copies=0)


def test_stale_engine_weights_are_kept_and_resume_exactly(tmp_path, monkeypatch):
    """staleness 2 (periodic): at the step-2 checkpoint the engine still samples with version 0,
    at the end (4 updates) with version 3; both are stored, once, and the resume is exact."""
    spec = _spec(("rollout.staleness", 2), ("train.checkpoint_every", 2))
    read, last, size = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)
    assert (read["engine_version"], last["engine_version"]) == (0, 3)
    for raw in (read, last):
        assert "engine" in raw and "ref" not in raw
        st = unpack(raw)
        assert any(not torch.equal(st["engine"][k], st["model"]["model." + k]) for k in st["engine"]
                   if "model." + k in st["model"])  # a lagging copy, not the policy
        assert raw["engine"]["lm_head.weight"] == raw["engine"]["embed_tokens.weight"]  # tied: stored once
    assert size <= BOUND * _needed_bytes(last, behaviour_copies=1)


def test_lag_history_is_kept_without_a_second_copy_of_the_policy(tmp_path, monkeypatch):
    spec = _spec(("rollout.sync", "lag"), ("rollout.staleness", 2), ("train.checkpoint_every", 2))
    read, last, size = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)
    for raw in (read, last):
        u = int(raw["budget"]["counters"]["updates"])
        assert "engine" not in raw and raw["engine_version"] == max(0, u - 2)  # rebuilt from the history
        assert sorted(raw["history"]) == list(range(max(0, u - 2), u + 1))
        assert raw["history"][u] == raw["model"]  # the current policy: the same stored tensors
        kept = {i for v in raw["history"] if v != u for i in raw["history"][v].values()}
        assert kept and not kept & set(raw["model"].values())  # the lagging policies: copies of their own
    assert size <= BOUND * _needed_bytes(last, behaviour_copies=2)


def test_a_refreshed_reference_is_kept_and_resumes_exactly(tmp_path, monkeypatch):
    """GGPO (one update a step here) refreshes π_ref every 3 updates and scores the frozen initial
    policy: a refreshed reference is no longer the base, so it is stored (once: at update 6 it
    is the policy itself), the resume from it is exact, and π_init is still rebuilt."""
    spec = _spec(("algo.refresh_every", 3), ("train.checkpoint_every", 1), algo="ggpo", updates=6)
    read, last, size = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=4)  # resumes after step 4
    assert read["algo"]["refreshes"] == 1 and "base_sha256" in read  # π_ref = the policy at update 3
    assert set(read["ref"].values()).isdisjoint(read["model"].values())  # the policy is at update 4
    assert last["algo"]["refreshes"] == 2 and last["ref"] == last["model"]  # refreshed at the last update


def test_a_resume_whose_base_loads_other_weights_is_refused(tmp_path, monkeypatch):
    from rlsuite.suite.runner import execute
    from rlsuite.suite.trainer import Trainer

    spec = _spec(("algo.kl_coef", 0.1), ("train.checkpoint_every", 1))
    real = Trainer.step

    def flaky(self):
        if self.step_no == 1:
            raise RuntimeError("injected crash")
        return real(self)

    monkeypatch.setattr(Trainer, "step", flaky)
    code, run = execute(spec, tmp_path)
    assert code == 1
    raw = _raw(run)
    raw["base_sha256"] = "0" * 64  # as if the model had loaded other weights at the start
    torch.save(raw, run / "checkpoint" / "state.pt")
    monkeypatch.setattr(Trainer, "step", real)
    code, run = execute(spec, tmp_path)
    st = json.loads((run / "status.json").read_text())
    assert code == 1 and st["state"] == "failed" and "base model with other weights" in st["reason"], st


def test_a_checkpoint_written_before_format_2_still_resumes_exactly(tmp_path, monkeypatch):
    """The old layout (plain state dicts, the frozen reference and the engine's copy included)."""
    from rlsuite.suite.models import load_model
    from rlsuite.suite.runner import execute
    from rlsuite.suite.trainer import Trainer

    spec = _spec(("algo.kl_coef", 0.1), ("train.checkpoint_every", 2))
    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    real = Trainer.step

    def flaky(self):
        if self.step_no == 2:
            raise RuntimeError("injected crash")
        return real(self)

    monkeypatch.setattr(Trainer, "step", flaky)
    code, run = execute(spec, tmp_path / "crash")
    assert code == 1
    old = {k: v for k, v in unpack(_raw(run)).items() if k != "base_sha256"}
    old["ref"] = load_model(spec.model)[0].state_dict()  # the base (warm_start=none: the built model)
    old["engine"] = {k.removeprefix("model."): v.clone() for k, v in old["model"].items()}  # on-policy: the policy
    torch.save(old, run / "checkpoint" / "state.pt")
    monkeypatch.setattr(Trainer, "step", real)
    code, run = execute(spec, tmp_path / "crash")
    assert code == 0
    for name in ("metrics.jsonl", "evals.jsonl"):
        assert _strip(read_jsonl(run / name)) == _strip(read_jsonl(ref / name)), name


# -- (b) tied weights once ---------------------------------------------------------------------

def test_tied_weights_are_stored_once(tmp_path):
    from rlsuite.suite.models import load_model
    from rlsuite.suite.runner import execute

    spec = _spec(updates=1)
    code, run = execute(spec, tmp_path)
    assert code == 0
    raw = _raw(run)
    assert raw["model"]["lm_head.weight"] == raw["model"]["model.embed_tokens.weight"]
    model, _, _ = load_model(spec.model)
    params = sum(p.numel() * p.element_size() for p in model.parameters())  # tied parameters counted once
    assert component_bytes(unpack(raw))["model"] == params
    assert sum(t.numel() * t.element_size() for t in raw["tensors"]) == params  # nothing else is a weight copy


# -- (c) what a completed run keeps -------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_completed_run_drops_its_checkpoint_and_keeps_final_in_the_model_dtype(tmp_path, dtype):
    from safetensors import safe_open

    from rlsuite.suite.runner import execute

    spec = _spec(("model.dtype", dtype), ("train.keep_checkpoint", False), updates=2)  # the later setting wins
    assert not spec.train.keep_checkpoint
    code, run = execute(spec, tmp_path)
    assert code == 0 and json.loads((run / "status.json").read_text())["state"] == "completed"
    assert not (run / "checkpoint").exists() and not list(run.glob(".checkpoint*"))
    with safe_open(str(run / "final" / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_tensor(k).dtype for k in keys}
        stored = sum(f.get_tensor(k).numel() for k in keys)
    assert dtypes == {getattr(torch, dtype)}
    assert "lm_head.weight" not in keys  # tied to the embedding: stored once
    from rlsuite.suite.models import load_model

    model, _, _ = load_model(spec.model)
    assert stored == sum(p.numel() for p in model.parameters())
    assert execute(spec, tmp_path) == (0, run)  # a re-run: already completed, nothing written
    assert not (run / "checkpoint").exists()


def test_keep_checkpoint_keeps_it(tmp_path):
    from rlsuite.suite.runner import execute

    code, run = execute(_spec(updates=2), tmp_path)
    assert code == 0 and (run / "checkpoint" / "state.pt").is_file() and (run / "final" / "model.safetensors").is_file()


# -- (d) the run id ------------------------------------------------------------------------------

def test_keep_checkpoint_is_not_in_the_run_id():
    from rlsuite.suite.config import identity_doc
    from rlsuite.suite.runner import _semantic
    from rlsuite.suite.spec import resolve

    base = resolve("arith", "grpo", "tiny", 0)
    kept = resolve("arith", "grpo", "tiny", 0, sets=[("train.keep_checkpoint", True)])
    assert base.train.keep_checkpoint is False and kept.train.keep_checkpoint is True
    assert kept.run_id == base.run_id
    doc = lambda s: json.loads(json.dumps(s.to_dict() | {"run_id": s.run_id}))  # noqa: E731
    assert _semantic(doc(kept)) == _semantic(doc(base)) and "keep_checkpoint" not in identity_doc(doc(kept))["train"]


# -- (e) the size bound --------------------------------------------------------------------------

@pytest.mark.parametrize("sets,copies", [
    ((), 0),
    ((("algo.kl_coef", 0.1),), 0),
    ((("algo", "ppo"),), 0),  # a value head: trainable, with its own AdamW state
    ((("rollout.staleness", 1),), 1),  # 3 updates: the engine lags at version 2
])
def test_checkpoint_bytes_are_within_the_bound(tmp_path, sets, copies):
    from rlsuite.suite.runner import execute

    algo = dict(sets).pop("algo", "grpo")
    code, run = execute(_spec(*[s for s in sets if s[0] != "algo"], algo=algo, updates=3), tmp_path)
    assert code == 0
    raw = _raw(run)
    assert ("engine" in raw) == (copies > 0)
    size = (run / "checkpoint" / "state.pt").stat().st_size
    needed = _needed_bytes(raw, copies)
    assert size <= BOUND * needed, (size, needed, component_bytes(unpack(raw)))


# -- the tensor store ----------------------------------------------------------------------------

def test_pack_stores_bitwise_equal_tensors_once_and_unpack_restores_them():
    from rlsuite.suite.checkpoint import pack

    big = torch.arange(2**24 + 3, dtype=torch.int32).to(torch.float32)  # past float32's exact integers
    emb = torch.randn(6, 4)
    fused = torch.randn(8, 4)
    sd = {"embed": emb, "head": emb, "big": big, "zero": torch.zeros(3), "negzero": -torch.zeros(3),
          "q": fused[:4], "k": fused[4:]}
    packed = pack({"model": sd, "history": {0: {k: v.clone() for k, v in sd.items()}}, "step": 1})
    m = packed["model"]
    assert m["embed"] == m["head"] and m["zero"] != m["negzero"]  # bits, not values: -0.0 is kept apart
    assert packed["history"][0] == m and len(packed["tensors"]) == 6
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size()  # views compacted
               for t in packed["tensors"])
    st = unpack(packed)
    assert st["step"] == 1 and st["model"]["head"] is st["model"]["embed"]
    for k, v in sd.items():
        assert torch.equal(st["model"][k], v) and torch.equal(st["history"][0][k], v)
    assert component_bytes(st) == {"model": sum(t.numel() * t.element_size() for t in packed["tensors"])}
