"""The committed warm-start bases (suite/warmstart.py): the same bytes on every machine, checked
on load, part of the run identity; other configurations build a local base."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from rlsuite import tasks  # noqa: F401
from rlsuite.suite import warmstart
from rlsuite.suite.cli import main
from rlsuite.suite.config import ModelConfig
from rlsuite.suite.models import load_model
from rlsuite.suite.spec import resolve
from rlsuite.tasks.base import TASKS, Task

WITH_WARM_START = sorted(n for n, c in TASKS.items() if c.warm_start is not Task.warm_start and not n.startswith("_"))


def test_every_embedded_task_with_a_warm_start_has_a_committed_base():
    assert WITH_WARM_START, "no task has a warm start"
    for name in WITH_WARM_START:
        spec = resolve(name, "grpo", "tiny", 0)
        man = warmstart.committed_base(name, spec.task, "tiny")
        assert man is not None, \
            f"{name}: no committed base for the default configuration (rlsuite warmstart {name} --rebuild)"
        assert warmstart.sha256_file(warmstart.BASES / f"{name}__tiny.safetensors") == man["sha256"]
        assert man["task_version"] == str(TASKS.get(name).version)
        assert man["built_on"]["cpu_model"] and man["measured"], man


@pytest.mark.parametrize("name", WITH_WARM_START)
def test_the_committed_base_loads_and_its_sha_is_in_env_and_identity(name):
    spec = resolve(name, "grpo", "tiny", 0)
    task = TASKS.get(name)(spec.task)
    try:
        model, tok, _ = load_model(ModelConfig())
        before = {k: v.clone() for k, v in model.state_dict().items()}
        info = warmstart.warm_started(task, model, tok, "tiny", 1)
    finally:
        task.close()
    assert info["source"] == "committed" and info["sha256"] == warmstart.base_identity(spec)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied


def test_the_base_sha_is_part_of_the_run_id(monkeypatch):
    spec = resolve("arith", "grpo", "tiny", 0)
    rid = spec.run_id  # (a property: computed now, before the patches)
    man = warmstart.committed_base("arith", spec.task, "tiny")
    real = warmstart.committed_base
    monkeypatch.setattr(warmstart, "committed_base", lambda *a: {**real(*a), "sha256": "0" * 64})
    other = resolve("arith", "grpo", "tiny", 0).run_id
    monkeypatch.setattr(warmstart, "committed_base", lambda *a: None)
    built = resolve("arith", "grpo", "tiny", 0).run_id
    assert len({rid, other, built}) == 3
    assert man["sha256"] != "0" * 64


def test_no_committed_base_for_another_task_config_or_warm_start_none():
    assert warmstart.base_identity(resolve("arith", "grpo", "tiny", 0, sets=[("task.max_operand", 50)])) is None
    assert warmstart.base_identity(resolve("arith", "grpo", "tiny", 0, sets=[("model.warm_start", "none")])) is None


def test_a_changed_committed_file_fails_loudly(tmp_path, monkeypatch):
    shutil.copytree(warmstart.BASES, tmp_path / "bases")
    monkeypatch.setattr(warmstart, "BASES", tmp_path / "bases")
    f = tmp_path / "bases" / "arith__tiny.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    spec = resolve("arith", "grpo", "tiny", 0)
    model, tok, _ = load_model(ModelConfig())
    with pytest.raises(RuntimeError, match="sha256 .* was changed; restore it from git or rebuild"):
        warmstart.warm_started(TASKS.get("arith")(spec.task), model, tok, "tiny", 1)
    f.unlink()
    with pytest.raises(RuntimeError, match="is missing"):
        warmstart.warm_started(TASKS.get("arith")(spec.task), model, tok, "tiny", 1)


def test_warmstart_cli_shows_the_base_and_refuses_bad_names(capsys):
    assert main(["warmstart", "arith", "--json"]) == 0
    man = json.loads(capsys.readouterr().out)
    base = warmstart.committed_base("arith", resolve("arith", "grpo", "tiny", 0).task, "tiny")
    assert man["sha256"] == base["sha256"]
    assert main(["warmstart", "arithh"]) == 2
    assert "valid" in capsys.readouterr().err


@pytest.mark.slow
def test_rebuild_writes_a_complete_manifest_and_same_cpu_gives_the_same_bytes(tmp_path, monkeypatch, capsys):
    """On the CPU model (and ISA, torch) that built the committed base, a full rebuild gives its bytes
    (~4 min on one thread). Elsewhere the bytes cannot match, so the rebuild is cut to 40 SFT steps
    (the same code path, seconds) and only the manifest is checked."""
    import torch

    import rlsuite.suite.spec as spec_mod

    committed = json.loads(warmstart.manifest_path("arith", "tiny").read_text())
    key = ("cpu_model", "cpu_isa", "torch")
    here = {"cpu_model": warmstart.cpu_model(), "cpu_isa": warmstart.cpu_isa(),
            "torch": torch.__version__.split("+")[0]}
    same_machine = [here[k] for k in key] == [committed["built_on"].get(k) for k in key]
    if not same_machine:
        real = spec_mod.resolve
        monkeypatch.setattr(spec_mod, "resolve", lambda *a, sets=(), **k: real(
            *a, sets=list(sets) + [("task.warm_max_steps", 40)], **k))
    monkeypatch.setattr(warmstart, "BASES", tmp_path)
    assert main(["warmstart", "arith", "--rebuild"]) == 0
    assert "different bytes" in capsys.readouterr().err
    man = json.loads((tmp_path / "arith__tiny.json").read_text())
    assert man["sha256"] == warmstart.sha256_file(tmp_path / "arith__tiny.safetensors")
    assert set(man["measured"]) >= {"val/greedy_acc", "test/greedy_acc"}
    assert {k: man["built_on"][k] for k in key} == here
    if same_machine:  # bit-identical on the CPU model that built the committed base (not across CPUs)
        assert man["sha256"] == committed["sha256"]
    else:
        assert man["task_config"]["warm_max_steps"] == 40 and man["sha256"] != committed["sha256"]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.pending"))  # published whole


def test_a_rebuild_killed_between_its_renames_is_finished_not_torn(tmp_path, monkeypatch):
    """Issue 38 §2.3: killed after the new weights were renamed into place and before the manifest,
    the pair was torn and every run of the task failed. The manifest is now written pending first:
    a pending manifest that describes the weights in place is published by the next reader; one whose
    weights never arrived (killed before the first rename) is dropped, the committed pair intact."""
    shutil.copytree(warmstart.BASES, tmp_path / "bases")
    monkeypatch.setattr(warmstart, "BASES", tmp_path / "bases")
    spec = resolve("arith", "grpo", "tiny", 0)
    weights = tmp_path / "bases" / "arith__tiny.safetensors"
    manifest = warmstart.manifest_path("arith", "tiny")
    old = json.loads(manifest.read_text())
    # killed before the first rename: a pending manifest for weights that never arrived
    (manifest.with_suffix(".json.pending")).write_text(json.dumps({**old, "sha256": "0" * 64}))
    assert warmstart.committed_base("arith", spec.task, "tiny")["sha256"] == old["sha256"]
    assert not manifest.with_suffix(".json.pending").exists()
    # killed between the renames: new weights in place, their manifest pending
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    new_sha = warmstart.sha256_file(weights)
    (manifest.with_suffix(".json.pending")).write_text(json.dumps({**old, "sha256": new_sha}))
    assert warmstart.base_identity(spec) == new_sha  # finished: the run id names the weights in place
    assert json.loads(manifest.read_text())["sha256"] == new_sha and not manifest.with_suffix(".json.pending").exists()
