"""Registry errors and run-spec resolution (suite.registry, suite.config, suite.spec)."""

from __future__ import annotations

import re

import pytest

from rlsuite import algorithms  # noqa: F401  (registration)
from rlsuite import tasks  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS
from rlsuite.suite.config import parse_assignment
from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import Registry, UnknownName, decorator
from rlsuite.suite.spec import resolve
from rlsuite.tasks.base import TASKS

# ----------------------------------------------------------------------------------------
# registry


def _reg() -> Registry:
    reg: Registry = Registry("widget")
    reg.register("alpha", 1, aliases=("a",))
    reg.register("beta", 2)
    return reg


def test_duplicate_name_raises():
    reg = _reg()
    with pytest.raises(ValueError, match="duplicate widget name 'alpha'"):
        reg.register("alpha", 3)
    assert reg.get("alpha") == 1  # the first entry is untouched


def test_name_clashing_with_alias_raises():
    reg = _reg()
    with pytest.raises(ValueError, match="duplicate"):
        reg.register("a", 3)
    with pytest.raises(ValueError, match="duplicate"):
        reg.register("gamma", 3, aliases=("beta",))
    assert "gamma" not in reg


def test_decorator_registers_and_refuses_duplicates():
    reg: Registry = Registry("widget")

    @decorator(reg, "thing")
    class Thing:
        pass

    assert reg.get("thing") is Thing
    with pytest.raises(ValueError):
        decorator(reg, "thing")(object)


def test_alias_resolves_to_canonical():
    reg = _reg()
    assert reg.canonical("a") == "alpha"
    assert reg.get("a") == 1
    assert reg.names() == ["alpha", "beta"]  # aliases are not listed as names


def test_unknown_name_lists_valid_names_and_suggests():
    reg = _reg()
    with pytest.raises(UnknownName) as e:
        reg.get("alpah")
    msg = str(e.value)
    assert "unknown widget 'alpah'" in msg
    assert "did you mean 'alpha'?" in msg
    assert "valid: alpha, beta" in msg
    assert not msg.startswith('"')  # plain text, not KeyError's quoted repr
    assert isinstance(e.value, KeyError)


def test_unknown_name_without_close_match_has_no_suggestion():
    with pytest.raises(UnknownName) as e:
        _reg().get("zzzzzz")
    assert "did you mean" not in str(e.value)
    assert "valid: alpha, beta" in str(e.value)


def test_builtin_registries_list_valid_names():
    with pytest.raises(UnknownName) as e:
        ALGORITHMS.get("grpoo")
    assert "did you mean 'grpo'?" in str(e.value)
    for name in ("grpo", "ppo"):
        assert name in str(e.value)
    with pytest.raises(UnknownName) as e:
        TASKS.get("arithm")
    assert "did you mean 'arith'?" in str(e.value)


# ----------------------------------------------------------------------------------------
# resolve: bad input


def _problems(**kw) -> list[str]:
    kw = {"task": "arith", "algo": "grpo", "model": "tiny", "seed": 0, **kw}
    with pytest.raises(BadInput) as e:
        resolve(**kw)
    return e.value.problems


def test_unknown_key_suggests_closest():
    (p,) = _problems(sets=[parse_assignment("rollout.temprature=0.7", "--set")])
    assert "rollout.temprature" in p
    assert "did you mean 'temperature'?" in p


def test_wrong_type_names_field_and_type():
    (p,) = _problems(sets=[parse_assignment("rollout.group_size=abc", "--set")])
    assert "rollout.group_size" in p and "int" in p and "'abc'" in p


def test_exponent_floats_without_a_dot_are_floats():
    """YAML 1.1 reads ``3e-4`` as a string; a float field takes it as the number it is."""
    from rlsuite.suite.spec import resolve

    spec = resolve("arith", "grpo", "tiny", 0, sets=[parse_assignment("optim.lr=3e-4", "--set")])
    assert spec.optim.lr == 3e-4
    (p,) = _problems(sets=[parse_assignment("optim.lr=3e-4x", "--set")])
    assert "optim.lr" in p and "float" in p


@pytest.mark.parametrize("raw", ["rollout.group_size=2.5", "rollout.group_size=true"])
def test_non_integer_values_for_int_field(raw):
    (p,) = _problems(sets=[parse_assignment(raw, "--set")])
    assert "rollout.group_size" in p


def test_out_of_range_top_p():
    (p,) = _problems(sets=[parse_assignment("rollout.top_p=1.5", "--set")])
    assert "rollout.top_p" in p and "1.5" in p


def test_bad_literal_lists_valid_values():
    (p,) = _problems(sets=[("rollout.engine", "vllm2")])
    assert "rollout.engine" in p and "kv" in p and "hf" in p


def test_unknown_task_and_algo_suggest():
    probs = _problems(task="arth", algo="grpoo")
    joined = "\n".join(probs)
    assert "unknown task 'arth'" in joined and "did you mean 'arith'?" in joined
    assert "unknown algorithm 'grpoo'" in joined and "did you mean 'grpo'?" in joined


def test_unknown_task_and_algo_config_keys_suggest():
    probs = _problems(sets=[("task.max_operandd", 5), ("algo.clip_eps_hgh", 0.3)])
    joined = "\n".join(probs)
    assert "task.max_operandd" in joined and "did you mean 'max_operand'?" in joined
    assert "algo.clip_eps_hgh" in joined and "did you mean 'clip_eps_high'?" in joined


def test_unknown_budget_key_suggests():
    (p,) = _problems(budgets=[("sample", 100)])
    assert "sample" in p and "did you mean 'samples'?" in p


def test_unknown_section_suggests():
    (p,) = _problems(sets=[("rollouts.top_p", 0.9)])
    assert "rollouts.top_p" in p and "did you mean 'rollout'?" in p


def test_several_problems_reported_at_once():
    probs = _problems(task="arth", sets=[parse_assignment("rollout.temprature=0.7", "--set"),
                                        parse_assignment("rollout.group_size=abc", "--set"),
                                        ("algo.clip_eps_lo", 0.1)],
                      budgets=[("sample", 100)])
    joined = "\n".join(probs)
    for needle in ("arth", "temprature", "group_size", "clip_eps_lo", "sample"):
        assert needle in joined, needle
    assert len(probs) == 5


def test_range_problem_reported_together_with_key_problem():
    probs = _problems(sets=[parse_assignment("rollout.temprature=0.7", "--set"),
                            parse_assignment("rollout.top_p=1.5", "--set")])
    joined = "\n".join(probs)
    assert "temprature" in joined
    assert "rollout.top_p" in joined


def test_several_range_problems_reported_at_once():
    probs = _problems(sets=[("rollout.top_p", 1.5), ("rollout.group_size", 0), ("optim.lr", -1.0)])
    joined = "\n".join(probs)
    assert "rollout.top_p" in joined and "rollout.group_size" in joined and "optim.lr" in joined


# ----------------------------------------------------------------------------------------
# run id


RUN_ID = re.compile(r"^arith__grpo__s3__[0-9a-f]{8}$")


def test_run_id_format_and_stability():
    a = resolve("arith", "grpo", "tiny", 3)
    b = resolve("arith", "grpo", "tiny", 3)
    assert RUN_ID.match(a.run_id), a.run_id
    assert a.run_id == b.run_id


def test_run_id_uses_canonical_names_and_seed():
    s = resolve("arith", "ppo", "tiny", 11)
    assert s.run_id.startswith("arith__ppo__s11__")


def test_run_id_changes_with_num_threads():
    a = resolve("arith", "grpo", "tiny", 3)
    b = resolve("arith", "grpo", "tiny", 3, sets=[("train.num_threads", 2)])
    assert a.run_id != b.run_id
    assert RUN_ID.match(b.run_id)


def test_run_id_ignores_checkpoint_every():
    a = resolve("arith", "grpo", "tiny", 3)
    b = resolve("arith", "grpo", "tiny", 3, sets=[("train.checkpoint_every", 5)])
    assert b.train.checkpoint_every == 5
    assert a.run_id == b.run_id


def test_run_id_changes_with_an_algorithm_knob():
    a = resolve("arith", "grpo", "tiny", 3)
    b = resolve("arith", "grpo", "tiny", 3, sets=[("algo.clip_eps_high", 0.28)])
    assert a.run_id != b.run_id


# ----------------------------------------------------------------------------------------
# presets


def test_embedded_preset_for_arith_tiny():
    s = resolve("arith", "grpo", "tiny", 0)
    assert s.rollout.max_new_tokens == 6      # RolloutConfig default is 512
    assert s.optim.lr == 1e-4                 # OptimConfig default is 1e-6
    assert s.budget.limits() == {"samples": 25600.0}
    assert s.algo.aggregation == "seq-mean-token-mean" and s.algo.kl_coef == 0.04


def test_user_set_overrides_preset():
    s = resolve("arith", "grpo", "tiny", 0, sets=[("rollout.max_new_tokens", 9)])
    assert s.rollout.max_new_tokens == 9


@pytest.mark.parametrize("kw", [{"budgets": [("updates", 3)]}, {"sets": [("budget.updates", 3)]},
                                {"configs": [{"budget": {"updates": 3}}]}])
def test_user_budget_replaces_preset_budget(kw):
    s = resolve("arith", "grpo", "tiny", 0, **kw)
    assert s.budget.limits() == {"updates": 3.0}   # preset samples=25600 dropped, not added
    assert s.rollout.max_new_tokens == 6           # the rest of the preset still applies
