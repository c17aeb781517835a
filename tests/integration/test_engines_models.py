"""Rollout engines, the policy forward and model loading.

* the hand-written KV sampler's log-probs equal the HF forward's, greedy continuations equal
  HF ``generate``'s, for the tiny model and for a saved Llama with GQA, a Llama with biases on
  every projection (attention_bias, mlp_bias) and a Qwen2-style model with q/k/v biases;
* the HF-generate engine's μ log-probs equal the HF forward's;
* engines own their weights: ``load_weights`` changes sampling, the trained model does not;
* any model saved with ``save_pretrained`` loads by path, with its chat template;
* top-p truncation is recorded as mismatch while μ stays untruncated.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.models import char_tokenizer, load_model, non_embedding_params
from rlsuite.suite.policy import policy_forward
from rlsuite.suite.rollout import collect
from rlsuite.suite.engines.hf import HFGenerateEngine
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.base import SamplingParams, left_pad
from tests.fakes import tiny_variant


@pytest.fixture(params=["tiny", "llama-gqa", "llama-bias", "qwen2"])
def model_tok(request):
    if request.param == "tiny":
        m, t, _ = load_model(ModelConfig())
        return m, t
    return tiny_variant(request.param)


PROMPTS = ["12+34=", "7-3=", "Hello, world", "x"]


def test_kv_sampler_logprobs_equal_hf_forward(model_tok):
    model, tok = model_tok
    eng = KVSampler(model, tok)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=8, temperature=0.7, stop_ids=(tok.eos_token_id,), topk=5)
    rec, _ = collect(eng, tok, prompts, params, torch.Generator().manual_seed(0), want_attn=True)
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 0.7)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)
    # top-K log-probs: the sampled token's log-prob is ≤ the top-1
    assert (rec.topk_logp[..., 0] >= rec.behav_logp - 1e-5).all()


def test_kv_greedy_equals_hf_generate(model_tok):
    model, tok = model_tok
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    out = KVSampler(model, tok).generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.0))
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=None)
    assert [r[ids.shape[1]:].tolist() for r in ref] == out.ids


def test_hf_engine_logprobs_and_owned_weights():
    model, tok, _ = load_model(ModelConfig())
    eng = HFGenerateEngine(model, tok)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_ids=(tok.eos_token_id,))
    rec, _ = collect(eng, tok, prompts, params, torch.Generator().manual_seed(0))
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 1.0)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)
    # the engine's copy is independent of the trained model until load_weights
    kv = KVSampler(model, tok)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    before = kv.generate(prompts, greedy).ids
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1.0)
    assert kv.generate(prompts, greedy).ids == before  # its own copy: training does not leak in
    assert KVSampler(model, tok).generate(prompts, greedy).ids != before
    kv.load_weights(model.state_dict(), version=7)
    assert kv.version == 7
    assert kv.generate(prompts, greedy).ids == KVSampler(model, tok).generate(prompts, greedy).ids


def test_same_generator_seed_same_samples():
    model, tok, _ = load_model(ModelConfig())
    eng = KVSampler(model, tok)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS] * 4
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    a = eng.generate(prompts, params, torch.Generator().manual_seed(5)).ids
    b = eng.generate(prompts, params, torch.Generator().manual_seed(5)).ids
    c = eng.generate(prompts, params, torch.Generator().manual_seed(6)).ids
    assert a == b and a != c


def test_top_p_truncation_is_logged_as_mismatch():
    model, tok, _ = load_model(ModelConfig())
    eng = KVSampler(model, tok)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    rec, m = collect(eng, tok, prompts, SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.5),
                     torch.Generator().manual_seed(0))
    assert m["mismatch/trunc_logp_mean"] > 0  # the truncated distribution put more mass on sampled tokens
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 1.0)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)  # μ stays untruncated


def test_attention_statistic_matches_training_forward():
    model, tok, _ = load_model(ModelConfig(attn_implementation="eager"))
    eng = KVSampler(model, tok)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    rec, _ = collect(eng, tok, prompts, SamplingParams(max_new_tokens=5, temperature=1.0),
                     torch.Generator().manual_seed(0), want_attn=True)
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 1.0, frozenset({"attn_stat"}))
    assert torch.allclose(fwd.attn_stat * rec.loss_mask, rec.attn_stat * rec.loss_mask, atol=1e-4)
    assert ((rec.attn_stat >= 0) & (rec.attn_stat <= 1 + 1e-6)).all()


def test_saved_model_loads_by_path_with_chat_template(tmp_path, capsys):
    from rlsuite.suite.cli import main

    model, tok = tiny_variant("qwen2")
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded, ltok, embedded = load_model(ModelConfig(name=str(tmp_path / "m")))
    assert not embedded and non_embedding_params(loaded) == non_embedding_params(model)
    from rlsuite.suite.prompts import encode_prompt
    from rlsuite.tasks.arith import Arith, ArithConfig

    ids, text = encode_prompt(Arith(ArithConfig(name="arith")), Arith(ArithConfig(name="arith")).splits()["val"][0],
                              ltok, "auto")
    assert text.startswith("<user>") and text.endswith("<assistant>")
    code = main(["run", "--task", "arith", "--algo", "grpo", "--model", str(tmp_path / "m"), "--budget", "updates=2",
                 "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2", "--set", "eval.max_prompts=4",
                 "--set", "eval.test_prompts=4",
                 "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0
    spec = json.loads((tmp_path / "runs" / out.strip().splitlines()[-1].split("/")[-1] / "spec.json").read_text())
    assert spec["model"]["name"] == str(tmp_path / "m") and spec["rollout"]["max_new_tokens"] == 16  # hf preset


def test_missing_model_path_is_bad_input(tmp_path, capsys):
    from rlsuite.suite.cli import main

    (tmp_path / "empty").mkdir()
    code = main(["run", "--task", "arith", "--algo", "grpo", "--model", str(tmp_path / "empty"),
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "could not be loaded" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_kv_sampler_uses_the_models_activation():
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, hidden_act="gelu", pad_token_id=0, eos_token_id=2))
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    rec, _ = collect(KVSampler(model, tok), tok, prompts, params, torch.Generator().manual_seed(0))
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 1.0)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)


def test_kv_sampler_refuses_sequences_beyond_the_sliding_window():
    from transformers import MistralConfig, MistralForCausalLM

    from rlsuite.suite.errors import BadInput

    tok = char_tokenizer()
    model = MistralForCausalLM(MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                             sliding_window=8, pad_token_id=0, eos_token_id=2))
    eng = KVSampler(model, tok)
    prompt = [tok.encode("12+3=", add_special_tokens=False)]
    assert len(eng.generate(prompt, SamplingParams(max_new_tokens=3, temperature=0)).ids[0]) == 3  # 5 + 3 ≤ 8
    with pytest.raises(BadInput, match="sliding window 8.*rollout.engine=hf"):
        eng.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))
