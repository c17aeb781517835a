"""``rollout.engine=onednn``: the kv sampler with its matmuls through oneDNN on packed weights.

* a prefill and one decode step: logits and cache writes equal the kv sampler's (1e-5) on
  left-padded rows, for the tiny model, a Llama with GQA, a Llama with a bias on every
  projection and a Qwen2-style model;
* μ's log-probs of a whole rollout equal the HF training forward's (2e-5), with top-K; with
  per-row token caps (rows dropped mid-rollout) and with the row-invariant noise it samples what
  the kv sampler samples;
* a weight sync repacks: the engine then samples what a fresh one built from the new weights
  samples;
* refusals (non-fp32 weights, a torch without oneDNN's kernels) name the way out, and a training
  run with it completes in its own run id.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlsuite.suite.cli import main
from rlsuite.suite.config import ModelConfig
from rlsuite.suite.engines.onednn import OneDNNKVSampler, supported
from rlsuite.suite.errors import BadInput
from rlsuite.suite.models import load_model
from rlsuite.suite.policy import policy_forward
from rlsuite.suite.rollout import collect
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.sampling import RowNoise
from rlsuite.suite.engines.base import SamplingParams, left_pad
from tests.fakes import tiny_variant

if supported(load_model(ModelConfig())[0]) is not None:  # pragma: no cover - torch builds without oneDNN
    pytest.skip("this torch build has no oneDNN linear kernels", allow_module_level=True)

PROMPTS = ["12+34=", "7-3=", "Hello, world", "x"]


@pytest.fixture(params=["tiny", "llama-gqa", "llama-bias", "qwen2"])
def model_tok(request):
    if request.param == "tiny":
        m, t, _ = load_model(ModelConfig())
        return m, t
    return tiny_variant(request.param)


def _prefilled(eng, tok, room: int):
    ids, mask = left_pad([tok.encode(p, add_special_tokens=False) for p in PROMPTS], tok.pad_token_id or 0, "cpu")
    B, W = ids.shape
    key_mask = torch.cat([mask, torch.ones(B, room, dtype=torch.long)], 1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    eng._rope_rows(W + room)
    cache = [[torch.zeros(B, eng.n_kv, W + room, eng.head_dim) for _ in range(2)] for _ in range(eng.n_layers)]
    logits, _ = eng.forward(ids, pos, cache, 0, key_mask)
    return logits, cache, key_mask, pos, W


def test_prefill_and_decode_step_equal_the_kv_samplers(model_tok):
    model, tok = model_tok
    kv, dnn = KVSampler(model, tok), OneDNNKVSampler(model, tok)
    (ref_pre, ref_cache, key_mask, pos, W), (got_pre, got_cache, *_) = _prefilled(kv, tok, 3), _prefilled(dnn, tok, 3)
    assert torch.allclose(got_pre, ref_pre, atol=1e-5), (got_pre - ref_pre).abs().max()
    for a, b in zip(ref_cache, got_cache):
        assert torch.allclose(a[0], b[0], atol=1e-5) and torch.allclose(a[1], b[1], atol=1e-5)
    step = torch.tensor([[5], [9], [17], [2]])
    allowed = key_mask.bool()[:, None, None, :W + 1]
    ref, _ = kv._forward(step, pos[:, -1:] + 1, ref_cache, W, allowed, key_mask)
    got, _ = dnn._forward(step, pos[:, -1:] + 1, got_cache, W, allowed, key_mask)
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()


def test_rollout_logprobs_equal_the_training_forward(model_tok):
    model, tok = model_tok
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS] * 2
    params = SamplingParams(max_new_tokens=10, temperature=0.8, stop_ids=(tok.eos_token_id,), topk=4)
    eng = OneDNNKVSampler(model, tok)
    rec, _ = collect(eng, tok, prompts, params, torch.Generator().manual_seed(0))
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 0.8)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)
    assert (rec.topk_logp[..., 0] >= rec.behav_logp - 1e-5).all()
    caps = [2, 10, 3, 10, 4, 10, 6, 10]  # rows finish on the way: the decode drops them
    a = KVSampler(model, tok).generate(prompts, params, torch.Generator().manual_seed(1), limits=caps)
    b = eng.generate(prompts, params, torch.Generator().manual_seed(1), limits=caps)
    assert a.ids == b.ids and all(len(r) <= c for r, c in zip(b.ids, caps))
    assert max(abs(x - y) for r, s in zip(a.logp, b.logp) for x, y in zip(r, s)) < 1e-5
    rows = list(range(len(prompts)))
    a = KVSampler(model, tok).generate(prompts, params, RowNoise(11, rows))
    b = eng.generate(prompts, params, RowNoise(11, rows))
    assert a.ids == b.ids


def test_a_weight_sync_repacks():
    model, tok, _ = load_model(ModelConfig())
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(2)]
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    eng = OneDNNKVSampler(model, tok)
    packed = dict(eng._packed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    eng.load_weights(model.state_dict(), 1)
    assert eng._packed.keys() == packed.keys() and all(eng._packed[k] is not v for k, v in packed.items())
    fresh = OneDNNKVSampler(model, tok)
    a = eng.generate(prompts, params, torch.Generator().manual_seed(2))
    b = fresh.generate(prompts, params, torch.Generator().manual_seed(2))
    assert a.ids == b.ids and a.logp == b.logp
    # a head given apart from a tied embedding becomes a tensor (and a packed copy) of its own
    head = torch.randn_like(eng.w["embed_tokens.weight"])
    eng.load_weights({"lm_head.weight": head}, 2)
    assert eng.w["lm_head.weight"] is not eng.w["embed_tokens.weight"] and id(eng.w["lm_head.weight"]) in eng._packed


def test_unsupported_models_are_refused(monkeypatch):
    model, tok, _ = load_model(ModelConfig())
    with pytest.raises(BadInput, match=r"rollout.engine=onednn cannot serve torch.bfloat16 weights.*rollout.engine=kv"):
        OneDNNKVSampler(model.to(torch.bfloat16), tok)
    model, tok, _ = load_model(ModelConfig())
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(BadInput, match=r"no oneDNN linear kernels; use rollout.engine=kv"):
        OneDNNKVSampler(model, tok)


SMALL = ["--task", "arith", "--algo", "grpo", "--set", "model.warm_start=none", "--set", "eval.max_prompts=4",
    "--set", "eval.test_prompts=4",
         "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4", "--budget", "updates=2"]


def test_a_run_with_the_onednn_engine(tmp_path, capsys):
    code = main(["run", *SMALL, "--set", "rollout.engine=onednn", "--out", str(tmp_path / "d")])
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    assert json.load(open(f"{run_dir}/spec.json"))["rollout"]["engine"] == "onednn"
    rows = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    assert len(rows) == 2 and all(r["budget/gen_tokens"] > 0 for r in rows)
