"""Run ids of the bundled sweep specs and of every entry stay as recorded (``run_ids.json``,
written by ``python -m tests.sweeps.record_run_ids`` before the §4–§7 refactor of issue 17), and
the three views of run identity (run id, runner's folder check, reports' config fingerprint) agree."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rlsuite.reports.scores import config_fingerprint
from rlsuite.suite.config import identity_doc
from rlsuite.suite.runner import _semantic
from rlsuite.suite.spec import resolve
from tests.sweeps.record_run_ids import FIXTURE, current_run_ids, entry_run_ids

CHANGES = FIXTURE.with_name("run_id_changes.json")
INTENDED_CHANGES: dict[str, dict[str, str]] = json.loads(CHANGES.read_text())
"""Deliberate run-id changes: spec (or ``_entries``) → {old id: new id}, in ``run_id_changes.json``.
Two changes so far. First, a task's ``version`` is part of the identity from version 2 on (issue 17 §6),
so the ids of the tasks at version 2 changed — arith (its warm start now stops at 30% checked
every 20 steps), humaneval/mbpp (judged grading jobs; version 3: bare code closed by a lone fence
is graded as the code, issue 18) and gsm8k (a single data file carves test
before val, as math does: ``rlsuite.tasks.base.carve_splits``). The clip rename (clip_eps →
clip_eps_low/clip_eps_high) changes no id: the old key is hashed when both bounds agree. Second,
the seed-fidelity issue made the defaults of ``edas`` (its authors' launchers: GRPO's KL 0.01,
DAPO without overlong penalty, the warm-up in steps), ``rrc``/``rrc_self``/``rrc_anchor`` (the
paper's vote rule), ``drpo`` (δ = 12.5, the authors' port), ``dppo_pdm`` (the top-K forward KL),
``3po`` (independent perturbations) and ``sp3o`` (relative anchors, token GAE: the authors' code)
their sources', so their ids changed (an old id maps to the newest)."""

SOURCE_DEFAULTS = {"edas", "rrc", "rrc_self", "rrc_anchor", "drpo", "dppo_pdm", "3po", "sp3o"}
"""The entries whose defaults changed to their sources' (the second intended change)."""


def test_the_intended_changes_are_the_version_2_tasks_and_the_source_defaults():
    from rlsuite import tasks  # noqa: F401
    from rlsuite.tasks.base import TASKS

    pairs = [(old, new) for ch in INTENDED_CHANGES.values() for old, new in ch.items()]
    by_task = {old.split("__")[0] for old, new in pairs if old.split("__")[1] not in SOURCE_DEFAULTS}
    assert by_task and all(str(TASKS.get(t).version) != "1" for t in by_task), by_task
    assert {"arith", "humaneval", "mbpp", "gsm8k"} >= by_task
    assert all(old.split("__")[:3] == new.split("__")[:3] for old, new in pairs)  # same task, entry and seed


def _expected() -> dict:
    rec = json.loads(FIXTURE.read_text())
    for spec, changes in INTENDED_CHANGES.items():
        if isinstance(rec[spec], dict):
            rec[spec] = {k: changes.get(v, v) for k, v in rec[spec].items()}
        else:
            rec[spec] = [changes.get(v, v) for v in rec[spec]]
    return rec


def test_bundled_sweep_and_entry_run_ids_are_unchanged():
    rec, cur = _expected(), current_run_ids() | {"_entries": entry_run_ids()}
    assert sorted(rec) == sorted(cur)
    for spec in rec:
        assert cur[spec] == rec[spec], spec


def _doc(spec) -> dict:
    return json.loads(json.dumps(spec.to_dict() | {"run_id": spec.run_id}))  # what spec.json holds


@pytest.mark.parametrize("algo", ["grpo", "rloo", "3po"])
def test_the_three_views_of_run_identity_agree(algo):
    base = resolve("arith", algo, "tiny", 0)
    same = [dataclasses.replace(base, sweep="x", factors={"f": 1}, tuning={"t": 1}),
            dataclasses.replace(base, train=dataclasses.replace(base.train, checkpoint_every=7, world_size=2,
                                                                keep_checkpoint=True))]
    for s in same:  # labels and settings that do not change results: one run in every view
        assert s.run_id == base.run_id
        assert _semantic(_doc(s)) == _semantic(_doc(base)) == identity_doc(_doc(base))
        assert config_fingerprint(_doc(s)) == config_fingerprint(_doc(base))
    reseeded = dataclasses.replace(base, seed=1)  # another seed: another run of the same configuration
    assert reseeded.run_id != base.run_id and _semantic(_doc(reseeded)) != _semantic(_doc(base))
    assert config_fingerprint(_doc(reseeded)) == config_fingerprint(_doc(base))
    other = resolve("arith", algo, "tiny", 0, sets=[("eval.seed", 7)])  # a setting that changes results
    assert other.run_id != base.run_id and _semantic(_doc(other)) != _semantic(_doc(base))
    assert config_fingerprint(_doc(other)) != config_fingerprint(_doc(base))


def test_an_old_spec_json_with_clip_eps_is_the_same_run():
    spec = resolve("arith", "rloo", "tiny", 0, sets=[("algo.clip_eps_low", 0.1), ("algo.clip_eps_high", 0.1)])
    old = _doc(spec)
    algo = old["algo"]
    algo["clip_eps"] = algo.pop("clip_eps_low")
    del algo["clip_eps_high"]
    assert _semantic(old) == _semantic(_doc(spec)) and config_fingerprint(old) == config_fingerprint(_doc(spec))
    asym = resolve("arith", "rloo", "tiny", 0, sets=[("algo.clip_eps_low", 0.1), ("algo.clip_eps_high", 0.3)])
    assert asym.run_id != spec.run_id  # distinct bounds: a new configuration, hashed under the new names
