"""One migration instead of four compatibility layers (issue 32 §5): version-1 ``spec.json`` documents
(every committed run folder predates the reset) read as version 2, completely, and the run id has
one rule (``identity_doc``) for the run id, the runner's folder check and the reports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlsuite.reports.scores import config_fingerprint
from rlsuite.suite.config import MOVED, SCHEMA, identity_doc
from rlsuite.suite.errors import BadInput
from rlsuite.suite.migrate import V1_VALUES, migrate, schema_of
from rlsuite.suite.runner import _semantic
from rlsuite.suite.spec import resolve, spec_from_dict

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted({*(ROOT / "benchmarks").rglob("spec.json"), *(ROOT / "tests" / "fixtures").rglob("spec.json")})
"""Every committed run folder: the studies' compact runs (``benchmarks/<study>/``) and the test fixtures."""


def _doc(spec) -> dict:
    return json.loads(json.dumps(spec.to_dict() | {"run_id": spec.run_id}))  # what spec.json holds


def test_a_version_1_document_moves_each_old_key_and_fills_the_values_of_its_time():
    old = {"task": {"name": "arith", "max_operand": 20}, "algo": {"name": "rloo", "clip_eps": 0.1},
           "model": {"name": "tiny"}, "rollout": {"rng": "row"}, "optim": {"lr": 1e-3}, "eval": {},
           "budget": {"updates": 4},
           "train": {"epochs": 1, "world_size": 2, "shard": "none", "is_correction": "token_tis", "is_high": 3.0,
                     "log": ["tensorboard"], "log_dir": "/tb", "log_project": "p", "progress": "lines"},
           "seed": 3, "run_id": "arith__rloo__s3__0123abcd"}
    snapshot = json.dumps(old, sort_keys=True)
    new = migrate(old)
    assert json.dumps(old, sort_keys=True) == snapshot  # the caller's document is left as it was
    assert new["schema"] == SCHEMA == 3 and schema_of(old) == 1 and new["run_id"] == old["run_id"]
    assert new["dist"] == {"world_size": 2, "shard": "none", "shard_precision": "fp32"}
    assert new["loss"] == {"is_correction": "token_tis", "is_high": 3.0, "is_low": 0.0, "empty_rows": "count"}
    assert new["log"] == {"trackers": ["tensorboard"], "dir": "/tb", "project": "p", "progress": "lines"}
    assert new["train"] == {"epochs": 1, "autocast": "none", "share_prefix": False, "compile": False,
                            "bucket_by_length": False}
    assert new["optim"] == {"lr": 1e-3, "fused": False}  # off then, whatever `auto` is now
    assert (new["algo"]["clip_eps_low"], new["algo"]["clip_eps_high"]) == (0.1, 0.1) and "clip_eps" not in new["algo"]
    assert new["task"]["style"] == "bare" and new["rollout"] == {"rng": "row"}  # (given: kept)
    assert migrate({"rollout": {}})["rollout"] == {"rng": "batch"}
    assert new["identity"] == {"task_version": None, "base_sha256": None}  # not recorded before the reset
    assert new["eval"] == {"test_prompts": 200}  # the test evals read max_prompts' default then
    assert migrate(new) == new  # a current document passes unchanged
    spec = spec_from_dict(new)  # and resolves
    assert spec.dist.world_size == 2 and spec.loss.is_correction == "token_tis"
    assert spec.log.trackers == ("tensorboard",)


def test_every_moved_key_is_migrated_and_refused_in_new_input():
    for old, new in MOVED.items():
        sec, key = old.split(".")
        doc = migrate({sec: {key: 1}})
        for target in new.split(" and "):
            nsec, nkey = target.split(".")
            assert doc[nsec][nkey] == 1, (old, doc)
        assert key not in doc[sec]
        with pytest.raises(BadInput, match=f"{old} was moved: set {new} instead"):
            resolve("arith", "rloo", "tiny", 0, sets=[(old, 1)])


def test_every_committed_run_folder_migrates_completely():
    """The committed results are the records of their commit (and test fixtures): each of their
    spec.json documents migrates to one that re-resolves to itself (no field left for a current
    default to fill, no unknown key), so the reports read them under today's rule of identity."""
    assert len(COMMITTED) > 200
    for path in COMMITTED:
        old = json.loads(path.read_text())
        # runs before the reset are schema 1 (README: "Results and the reset"); a study's copies since, the current
        assert schema_of(old) in (1, 2, SCHEMA), path
        doc = migrate(old)
        again = identity_doc(spec_from_dict(doc).to_dict())
        mine = identity_doc(doc)
        assert {k: v for k, v in mine.items() if k != "identity"} == \
               {k: v for k, v in again.items() if k != "identity"}, path


def test_a_version_2_document_scored_the_first_max_prompts_of_its_test_split():
    """Version 3 added ``eval.test_prompts`` (0: the whole test split). A version-2 run's test evals
    read the first ``eval.max_prompts``: the migration says so, so such a run pools with a version-3
    run only where that one scored the same prompts, and a current run at the defaults is another run."""
    v2 = _doc(resolve("arith", "grpo", "tiny", 0, sets=[("eval.max_prompts", 120)]))
    v2["schema"] = 2
    del v2["eval"]["test_prompts"]
    new = migrate(v2)
    assert new["schema"] == 3 and new["eval"]["test_prompts"] == 120 and new["run_id"] == v2["run_id"]
    same = _doc(resolve("arith", "grpo", "tiny", 0, sets=[("eval.max_prompts", 120), ("eval.test_prompts", 120)]))
    assert identity_doc(new) == identity_doc(same)
    default = _doc(resolve("arith", "grpo", "tiny", 0, sets=[("eval.max_prompts", 120)]))  # test_prompts 0
    assert identity_doc(new) != identity_doc(default)
    assert migrate({"schema": 2, "eval": {}})["eval"] == {"test_prompts": 200}  # max_prompts' default then


def test_a_newer_document_is_refused_with_one_line():
    with pytest.raises(BadInput, match="schema 4, newer than this rlsuite's \\(3\\)"):
        migrate({"schema": 4})
    with pytest.raises(BadInput, match="schema must be a positive integer"):
        migrate({"schema": "2"})


def test_v1_values_name_only_existing_fields():
    spec = resolve("arith", "grpo", "tiny", 0)
    for sec, values in V1_VALUES.items():
        assert set(values) <= {f.name for f in dataclasses.fields(getattr(spec, sec))}, sec


@pytest.mark.parametrize("algo", ["grpo", "rloo", "3po"])
def test_the_three_views_of_run_identity_agree(algo):
    base = resolve("arith", algo, "tiny", 0)
    same = [dataclasses.replace(base, sweep="x", factors={"f": 1}, tuning={"t": 1}),
            dataclasses.replace(base, train=dataclasses.replace(base.train, checkpoint_every=7, keep_checkpoint=True),
                                dist=dataclasses.replace(base.dist, world_size=2),
                                log=dataclasses.replace(base.log, trackers=("tensorboard",), progress="off"))]
    for s in same:  # labels and settings that do not change results: one run in every view
        assert s.run_id == base.run_id
        assert _semantic(_doc(s)) == _semantic(_doc(base)) == identity_doc(_doc(base))
        assert config_fingerprint(_doc(s)) == config_fingerprint(_doc(base))
    reseeded = dataclasses.replace(base, seed=1)  # another seed: another run of the same configuration
    assert reseeded.run_id != base.run_id and _semantic(_doc(reseeded)) != _semantic(_doc(base))
    assert config_fingerprint(_doc(reseeded)) == config_fingerprint(_doc(base))
    for other in (resolve("arith", algo, "tiny", 0, sets=[("eval.seed", 7)]),  # a setting that changes results
                  dataclasses.replace(base, identity=dataclasses.replace(base.identity, task_version="9")),
                  dataclasses.replace(base, identity=dataclasses.replace(base.identity, base_sha256="0" * 64))):
        assert other.run_id != base.run_id and _semantic(_doc(other)) != _semantic(_doc(base))
        assert config_fingerprint(_doc(other)) != config_fingerprint(_doc(base))


def test_the_identity_inputs_are_computed_at_resolution():
    from rlsuite.suite import warmstart
    from rlsuite.tasks.base import TASKS

    spec = resolve("arith", "grpo", "tiny", 0)
    man = json.loads(warmstart.manifest_path("arith", "tiny").read_text())
    assert spec.identity.base_sha256 == man["sha256"] and spec.identity.task_version == str(TASKS.get("arith").version)
    assert _doc(spec)["identity"] == {"task_version": spec.identity.task_version, "base_sha256": man["sha256"]}
    assert resolve("arith", "grpo", "tiny", 0, sets=[("task.max_operand", 50)]).identity.base_sha256 is None


def test_a_task_setting_added_with_another_default_gets_the_value_its_run_used():
    old = {"schema": SCHEMA, "task": {"name": "hops_toy", "warm_target": 0.85}}
    assert migrate(old)["task"]["warm_read_share"] == 0.0  # before the field: the blind teacher
    assert "warm_read_share" not in old["task"]  # the caller's document is left as it was
    new = {"schema": SCHEMA, "task": {"name": "hops_toy", "warm_read_share": 0.6}}
    assert migrate(new)["task"]["warm_read_share"] == 0.6
