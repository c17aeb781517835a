"""Reading older ``spec.json`` documents: one migration to the current schema (:data:`SCHEMA`).

Run folders written before the run-id reset of issue 32 (no ``schema`` field: version 1) stay the
records of their commit; the reports, the runner's folder check and ``spec_from_dict`` read them
through :func:`migrate`, which returns the document as this version writes it:

* keys that moved to a section by concern (:data:`rlsuite.suite.config.MOVED`: ``train.world_size``
  → ``dist.world_size``, ``train.is_correction`` → ``loss.is_correction``, ``train.log`` →
  ``log.trackers``, …) are moved; ``algo.clip_eps`` sets ``clip_eps_low`` and ``clip_eps_high``;
* settings a version-1 document could lack (added after it was written) get the value the run
  used, :data:`V1_VALUES`: the defaults of their time (``train.share_prefix`` and ``optim.fused``
  were off, whatever ``auto`` resolves to now);
* task settings added later with a default other than the old behaviour (:data:`ADDED_TASK_VALUES`,
  in documents of every version) get the value the run used;
* ``identity`` (the task version and the committed base's sha256) was not recorded: both are
  ``None`` ("not recorded"), so two version-1 runs of one configuration still pool, and never
  with a version-2 run.

Version 2 documents (issue 32's reset, before issue 34's whole-split test evals) lack
``eval.test_prompts``: their test evals read the first ``eval.max_prompts`` prompts, which is the
value the migration gives them (:func:`_v2_to_v3`), so a version-2 run keeps its identity and pools
only with version-3 runs that score the same test prompts.

The migrated document's :func:`rlsuite.suite.config.identity_doc` is the identity of the old run
as this version defines identities; the old folder name (its run id) is kept as ``run_id``.
Pure dict → dict, stdlib only (the reports import it without the trainer).
"""

from __future__ import annotations

import copy

from rlsuite.suite.config import MOVED, SCHEMA
from rlsuite.suite.errors import BadInput

V1_VALUES: dict[str, dict] = {
    "rollout": {"rng": "batch"},
    "train": {"autocast": "none", "share_prefix": False, "compile": False, "bucket_by_length": False},
    "loss": {"is_correction": "none", "is_low": 0.0, "is_high": 2.0, "empty_rows": "count"},
    "dist": {"shard_precision": "fp32"},
    "optim": {"fused": False},
    "algo": {"kl_target": None, "kl_horizon": 10000},
}
"""Version 1: the value of each setting a document may lack, by section (the field did not exist
yet when it was written, so the run used this)."""

V2_MAX_PROMPTS = 200
"""``eval.max_prompts``'s default before version 3 (a document that omits it used this)."""

V1_TASK_VALUES: dict[str, dict] = {"arith": {"style": "bare"}}
"""The same for task settings, by task name (``arith``'s prompt style came later)."""

ADDED_TASK_VALUES: dict[str, dict] = {"hops_toy": {"warm_read_share": 0.0}}
"""Task settings added in a later schema-3 version whose default is not the behaviour from before
them, by task name: a document of any version that lacks one was written before it existed and
used this value (``hops_toy``'s warm start read no ``h`` until its second committed base)."""


def schema_of(doc: dict) -> int:
    """The document's schema version (1 when it has none)."""
    v = doc.get("schema", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise BadInput(f"spec.json: schema must be a positive integer, got {v!r}")
    return v


def migrate(doc: dict) -> dict:
    """``doc`` as a version-:data:`SCHEMA` document (a copy; the caller's is left as it was).
    BadInput for a document newer than this version."""
    v = schema_of(doc)
    if v > SCHEMA:
        raise BadInput(f"spec.json has schema {v}, newer than this rlsuite's ({SCHEMA}): upgrade rlsuite to read it")
    if v == 1:
        doc = _v1_to_v2(doc)
    if schema_of(doc) == 2:
        doc = _v2_to_v3(doc)
    task = doc.get("task") if isinstance(doc.get("task"), dict) else None
    if task is not None and any(k not in task for k in ADDED_TASK_VALUES.get(task.get("name"), {})):
        doc = copy.deepcopy(doc)
        for k, v in ADDED_TASK_VALUES[task["name"]].items():
            doc["task"].setdefault(k, v)
    return doc


def _v2_to_v3(doc: dict) -> dict:
    """Version 3 added ``eval.test_prompts``; before it the test evals read the first
    ``eval.max_prompts`` prompts, so that is the value such a run used."""
    d = copy.deepcopy(doc)
    ev = dict(d.get("eval") or {})
    ev.setdefault("test_prompts", ev.get("max_prompts", V2_MAX_PROMPTS))
    d["eval"] = ev
    d["schema"] = 3
    return d


def _v1_to_v2(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    for sec in ("train", "loss", "dist", "log", "algo"):
        d[sec] = dict(d.get(sec) or {})
    for old, new in MOVED.items():
        sec, key = old.split(".")
        if key not in d[sec]:
            continue
        value = d[sec].pop(key)
        for target in new.split(" and "):
            nsec, nkey = target.split(".")
            d[nsec].setdefault(nkey, value)
    for sec, values in V1_VALUES.items():
        if sec == "algo" and not d.get("algo"):
            continue
        for k, v in values.items():
            d.setdefault(sec, {}).setdefault(k, v)
    task = d.get("task") if isinstance(d.get("task"), dict) else None
    if task is not None:
        for k, v in V1_TASK_VALUES.get(task.get("name"), {}).items():
            task.setdefault(k, v)
    d["identity"] = {"task_version": None, "base_sha256": None}
    d["schema"] = 2
    return d
