"""Options added after schema 3 (``IN_ID_WHEN_SET``: the shared ``loss`` and ``rollout`` options
of issue 39, the ``model`` section's LoRA fields of issue 40, ``train.critic_warmup_steps``) changed
no run id: at their default they are left out of the identity, as in a document written before they
existed; any other value is in it."""

from __future__ import annotations

import json

import pytest

from rlsuite.suite.config import SECTION_CLASSES, _when_set, identity_doc
from rlsuite.suite.spec import resolve

OTHER = {"filter_zero_variance": "mask", "retire_pass_rate": 0.9, "opsm_delta": 0.5, "kl_is_weight": True,
         "top_entropy_quantile": 0.2, "entropy_coef": 0.01, "entropy_target": 0.5, "entropy_coef_delta": 0.01,
         "entropy_coef_max": 0.5, "lora_rank": 8, "lora_alpha": 32.0, "lora_dropout": 0.1,
         "lora_targets": "q_proj", "critic_warmup_steps": 2}
"""A value other than the default for each such field."""
ALGO = {"critic_warmup_steps": "ppo"}
"""The entry a field is tried with where grpo cannot take it (default: grpo)."""


def test_the_fields_and_their_defaults():
    got = {(sec, k): v for sec, fields in _when_set().items() for k, v in fields.items()}
    assert got == {("rollout", "filter_zero_variance"): "off", ("rollout", "retire_pass_rate"): None,
                   ("loss", "opsm_delta"): None, ("loss", "kl_is_weight"): False,
                   ("loss", "top_entropy_quantile"): 1.0, ("loss", "entropy_coef"): 0.0,
                   ("loss", "entropy_target"): None, ("loss", "entropy_coef_delta"): 0.005,
                   ("loss", "entropy_coef_max"): 1.0, ("model", "lora_rank"): 0, ("model", "lora_alpha"): 16.0,
                   ("model", "lora_dropout"): 0.0, ("model", "lora_targets"): "all-linear",
                   ("train", "critic_warmup_steps"): 0}
    assert set(OTHER) == {k for _, k in got}


@pytest.mark.parametrize("sec, key", [(sec, k) for sec, f in _when_set().items() for k in f])
def test_default_is_out_of_the_id_and_another_value_is_in_it(sec, key):
    assert key in {f for f in SECTION_CLASSES[sec].__dataclass_fields__}
    algo = ALGO.get(key, "grpo")
    base = resolve("arith", algo, "tiny", 0, sets=[("algo.kl_coef", 0.1)])
    doc = json.loads(json.dumps(base.to_dict()))
    older = json.loads(json.dumps(doc))
    older[sec].pop(key, None)  # a document written before the field existed (to_dict may leave it out)
    assert key not in identity_doc(doc)[sec] and identity_doc(older) == identity_doc(doc)
    default = getattr(getattr(base, sec), key)
    same = resolve("arith", algo, "tiny", 0, sets=[("algo.kl_coef", 0.1), (f"{sec}.{key}", default)])
    assert same.run_id == base.run_id
    other = resolve("arith", algo, "tiny", 0, sets=[("algo.kl_coef", 0.1), (f"{sec}.{key}", OTHER[key])])
    assert other.run_id != base.run_id and identity_doc(other.to_dict())[sec][key] == OTHER[key]


def test_an_entry_field_added_when_set_leaves_the_entrys_run_ids_alone():
    """``IN_ID_WHEN_SET`` on an algorithm entry's own field (GiGPO's ``similarity``, added after its
    runs were committed): at its default it is out of the identity, as in a document written before
    it existed; set, it is in it. Another entry's field of the same name would not be touched."""
    base = resolve("arith", "gigpo", "tiny", 0)
    doc = json.loads(json.dumps(base.to_dict()))
    older = json.loads(json.dumps(doc))
    older["algo"].pop("similarity", None)  # (to_dict may leave a field at its default out)
    assert "similarity" not in identity_doc(doc)["algo"] and identity_doc(older) == identity_doc(doc)
    other = resolve("arith", "gigpo", "tiny", 0, sets=[("algo.similarity", 0.9)])
    assert other.run_id != base.run_id and identity_doc(other.to_dict())["algo"]["similarity"] == 0.9
    grpo = json.loads(json.dumps(resolve("arith", "grpo", "tiny", 0).to_dict()))
    grpo["algo"]["similarity"] = None  # not a grpo field: kept as it stands
    assert identity_doc(grpo)["algo"]["similarity"] is None
