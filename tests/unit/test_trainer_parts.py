"""The units split out of the trainer and the engines package, each on its narrow input."""

import types

import pytest
import torch

from rlsuite.suite.errors import BadInput


def _model(arch, weight=None):
    """A stand-in with a config and (for ``auto``, which asks the oneDNN engine) parameters."""
    w = torch.zeros(1) if weight is None else weight
    return types.SimpleNamespace(config=types.SimpleNamespace(model_type=arch), parameters=lambda: iter([w]))


def test_old_import_paths_are_gone_and_the_hooks_are_one_module():
    import importlib

    import rlsuite.algorithms.base as ab
    import rlsuite.suite.hooks as hooks

    for old in ("sampler", "native_decode", "speculative", "vllm_engine"):  # the shims of the engine split
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"rlsuite.suite.{old}")
    for name in ("Context", "Group", "Behaviour", "Revision", "AdvOut", "NEEDS", "STAGES"):
        assert getattr(ab, name) is getattr(hooks, name)


def test_factory_resolves_class_capabilities_and_row_noise():
    from rlsuite.suite.engines import resolve_engine
    from rlsuite.suite.engines.hf import HFGenerateEngine
    from rlsuite.suite.engines.kv import KVSampler
    from rlsuite.suite.engines.native import NativeKVSampler
    from rlsuite.suite.engines.speculative import S3RSampler

    from rlsuite.suite.engines import native
    from rlsuite.suite.engines.onednn import OneDNNKVSampler, supported

    auto = resolve_engine("auto", _model("llama"))  # the fastest exact engine, by capability
    dnn = supported(_model("llama")) is None
    if native.toolchain() is None:  # a C++ compiler and ninja: the native step (packed weights where oneDNN serves)
        assert auto.cls is NativeKVSampler and auto.kind == "native"
    else:
        assert auto.cls is (OneDNNKVSampler if dnn else KVSampler)
        assert auto.kind == ("onednn" if dnn else "kv")
    assert resolve_engine("auto", _model("llama", torch.zeros(1, dtype=torch.bfloat16))).cls is KVSampler
    assert resolve_engine("auto", _model("gpt2")).kind == "hf"
    assert resolve_engine("auto", _model("gpt2")).cls is HFGenerateEngine
    assert resolve_engine("native", _model("qwen2")).cls is NativeKVSampler
    s3r = resolve_engine("s3r", _model("llama"))
    assert s3r.cls is S3RSampler and not s3r.row_rng and "behav_attn_stat" in s3r.capabilities
    assert resolve_engine("kv", _model("llama")).row_rng and not resolve_engine("hf", _model("llama")).row_rng
    assert "behav_attn_stat" not in resolve_engine("hf", _model("llama")).capabilities
    with pytest.raises(BadInput, match="rollout.engine=kv supports llama, mistral, qwen2 models, not 'gpt2'"):
        resolve_engine("kv", _model("gpt2"))


def test_every_engine_conforms_to_the_protocol_and_declares_its_traits():
    """Every ``rollout.engine`` setting (suite/engine_traits.py) builds a class that implements each
    member of :class:`RolloutEngine` with the protocol's parameters, records ``behav_logp``, and
    takes its traits from the one table (the checks of config.check_ranges read the same table)."""
    import inspect

    import typing

    from rlsuite.suite.config import RolloutConfig
    from rlsuite.suite.engine_traits import TRAITS, EngineTraits, engines_with
    from rlsuite.suite.engines import RolloutEngine, engine_class
    from rlsuite.suite.engines.speculative import S3RSampler

    members = [n for n in vars(RolloutEngine) if not n.startswith("_")] + list(RolloutEngine.__annotations__)
    assert {"load_weights", "state", "generate", "stats", "reset_stats", "capabilities", "version"} <= set(members)
    kinds = [k for k in TRAITS if k != "auto"]
    assert set(TRAITS) == set(typing.get_args(typing.get_type_hints(RolloutConfig)["engine"]))  # every setting
    for kind in kinds:
        cls = engine_class(kind, _model("llama"))
        assert isinstance(cls.traits, EngineTraits) and cls.traits is TRAITS[kind], kind
        assert "behav_logp" in cls.capabilities, kind
        for name in (n for n in vars(RolloutEngine) if not n.startswith("_") and callable(vars(RolloutEngine)[n])):
            want = list(inspect.signature(getattr(RolloutEngine, name)).parameters)
            got = list(inspect.signature(getattr(cls, name)).parameters)
            assert got[:len(want)] == want, (kind, name, got, want)
    assert TRAITS["auto"] is TRAITS["kv"]
    assert engines_with("row_rng") == ["auto", "kv", "native", "native_bf16", "onednn"]
    assert engines_with("layerwise_sync") == ["auto", "kv", "native", "native_bf16", "onednn", "s3r"]
    s = S3RSampler.__new__(S3RSampler)
    s.reset_stats()
    assert set(s.stats()) <= {"rollout/s3r_acceptance_rate", "rollout/s3r_mean_accepted_length",
                              "rollout/s3r_tokens_per_verify"}


class _Engine:
    def __init__(self):
        self.version, self.loads = 0, []

    def load_weights(self, state, version):
        self.version = version
        self.loads.append(version)


def test_behaviour_sync_lag_and_periodic():
    from rlsuite.suite.behaviour import BehaviourSync

    model = torch.nn.Linear(2, 2)
    lag = types.SimpleNamespace(sync="lag", staleness=1, mismatch="none")
    e = _Engine()
    b = BehaviourSync(lag, 0, e, model)
    assert list(b.history) == [0]
    b.sync(1)
    assert e.loads == [] and sorted(b.history) == [0, 1]  # target 0 = the engine's version
    b.sync(2)
    assert e.loads == [1] and sorted(b.history) == [1, 2]
    per = types.SimpleNamespace(sync="periodic", staleness=1, mismatch="none")
    e = _Engine()
    b = BehaviourSync(per, 0, e, model)
    b.sync(1)
    b.sync(2)
    assert e.loads == [2] and b.history == {}


def test_behaviour_state_mismatch_is_seeded():
    from rlsuite.suite.behaviour import BehaviourSync

    model = torch.nn.Linear(4, 4)
    r = types.SimpleNamespace(sync="periodic", staleness=0, mismatch="noise", mismatch_scale=0.1)
    e = _Engine()
    b = BehaviourSync(r, 3, e, model)
    assert e.loads == [0]
    a1, a2 = b.behaviour_state(model.state_dict(), 5), b.behaviour_state(model.state_dict(), 5)
    assert all(torch.equal(a1[k], a2[k]) for k in a1)
    assert not torch.equal(a1["weight"], model.weight)


def test_merge_and_lr_factor():
    from rlsuite.suite.step_metrics import merge
    from rlsuite.suite.update_plan import lr_factor

    m = merge({"a_min": [(1.0, 1), (0.5, 1)], "loss/x": [(1.0, 1), (3.0, 1)], "stats/grad_norm": [(2.0, 1), (4.0, 1)],
               "w": [(1.0, 1.0), (4.0, 3.0)]})
    assert m == {"a_min": 0.5, "loss/x": 2.0, "stats/grad_norm": 3.0, "w": 3.25}
    o = types.SimpleNamespace(warmup_updates=4, schedule="linear")
    assert lr_factor(o, 1, 0.0) == 0.5 and lr_factor(o, 4, 0.25) == 0.75


def test_counting_grader_and_signals():
    from rlsuite.suite.lifecycle import CountingGrader, Signals

    class G:
        def __init__(self, e):
            self.error = e

    class T:
        name = "t"

        def grade(self, ex, c):
            return G("boom" if c == "x" else None)

        def grade_batch(self, exs, cs):
            return [self.grade(e, c) for e, c in zip(exs, cs)]

    g = CountingGrader(T())
    g.grade_batch([0, 0], ["x", "y"])
    g.grade(0, "x")
    assert (g.graded, g.errors, g.first, g.name) == (3, 2, "boom", "t")
    s = Signals()
    assert s.agreed(types.SimpleNamespace(active=False)) is None
