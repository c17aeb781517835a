"""``rollout.engine=native``: the kv sampler with its one-token decode step in C++.

* a prefill (several tokens a row) and one decode step: logits and cache writes equal the eager
  forward's (1e-5) on left-padded rows,
  for the tiny model, a Llama with GQA, a Llama with a bias on every projection, a Qwen2-style
  model, a GELU MLP and sizes off the vector width (head dim 24, MLP width 100);
* μ's log-probs of a whole rollout equal the HF training forward's (2e-5), with top-K; with
  per-row token caps (finished rows dropped mid-rollout) it samples what the kv sampler does;
* the same generator gives the same tokens as the kv sampler (and the row-invariant noise
  ``rollout.rng=row`` works through it); the attention statistic goes through the eager step;
* one-token prompts (the prefill itself through the C++ step, an empty prompt included) and
  rows of 300 keys sample what the kv sampler does;
* each of these with the AVX-512 loops (where the CPU has them) and with the plain loops;
* refusals, each one message and exit 2 before anything is written: non-fp32 weights, an
  activation it does not implement, no C++ compiler; no ninja and a failed build name the
  cause (the compiler's error lines);
* the C++ token loop samples exactly what the Python loop over the same step samples
  (temperatures 1, 0.7 and greedy; caps, EOS, compaction; the generator's state after);
* a NaN in a real cache slot gives NaN logits on every path, as in the eager step; under
  another default dtype the Python loop runs (sample_step draws in it);
* a training run with ``rollout.engine=native`` completes, in its own run id.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlsuite.suite.cli import main
from rlsuite.suite.config import ModelConfig
from rlsuite.suite.errors import BadInput
from rlsuite.suite.models import char_tokenizer, load_model
from rlsuite.suite.policy import policy_forward
from rlsuite.suite.rollout import collect
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.sampling import RowNoise
from rlsuite.suite.engines.base import SamplingParams, left_pad
from tests.fakes import tiny_variant

native = pytest.importorskip("rlsuite.suite.engines.native")

PROMPTS = ["12+34=", "7-3=", "Hello, world", "x"]


def _gelu_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = char_tokenizer()
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, hidden_act="gelu_pytorch_tanh", pad_token_id=0,
                                        eos_token_id=2)), tok


def _odd_llama():
    """Sizes off the 16-float vector width: head dim 24, MLP width 100, three query heads per
    key/value head — the vector loops' tails."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = char_tokenizer()
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=72, intermediate_size=100, num_hidden_layers=2,
                                        num_attention_heads=3, num_key_value_heads=1, pad_token_id=0,
                                        eos_token_id=2)), tok


@pytest.fixture(params=["tiny", "llama-gqa", "llama-bias", "qwen2", "gelu", "odd-sizes"])
def model_tok(request):
    if request.param == "tiny":
        m, t, _ = load_model(ModelConfig())
        return m, t
    if request.param == "gelu":
        return _gelu_llama()
    if request.param == "odd-sizes":
        return _odd_llama()
    return tiny_variant(request.param)


@pytest.fixture(params=["simd", "generic", "transposed"])
def simd(request, monkeypatch):
    """The AVX-512 loops (where the CPU has them) and the plain loops every CPU runs, each with
    the default matmul weights (oneDNN-packed where oneDNN serves); ``transposed``: the matmuls
    on transposed ``[in, out]`` copies through MKL's GEMM (the layout where oneDNN does not serve)."""
    avx = native.load_extension().has_avx512()
    if request.param == "simd" and not avx:
        pytest.skip("this CPU has no AVX-512: the simd loops are not used here")
    if request.param == "transposed":
        monkeypatch.setattr(native.NativeKVSampler, "packed", False)
        return avx
    return request.param == "simd"


def test_packed_weights_by_capability_sample_what_transposed_ones_sample(monkeypatch):
    """``packed=None`` packs the matmul weights for oneDNN exactly where the onednn engine would
    serve; packed and transposed engines sample the same tokens with log-probs within 1e-5."""
    from rlsuite.suite.engines.onednn import supported

    model, tok, _ = load_model(ModelConfig())
    default = native.NativeKVSampler(model, tok)
    assert default._packed == (supported(model) is None)
    if not default._packed:
        pytest.skip("oneDNN's packed linear kernels are not in this torch build")
    assert default._head_t.layout == torch._mkldnn and default._flat[1].layout == torch._mkldnn
    monkeypatch.setattr(native.NativeKVSampler, "packed", False)
    plain = native.NativeKVSampler(model, tok)
    assert not plain._packed and plain._head_t.layout == torch.strided
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(4)]
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_ids=(tok.eos_token_id,))
    a = default.generate(prompts, params, torch.Generator().manual_seed(3))
    b = plain.generate(prompts, params, torch.Generator().manual_seed(3))
    assert a.ids == b.ids
    assert max(abs(x - y) for r, q in zip(a.logp, b.logp) for x, y in zip(r, q)) < 1e-5


STEP = torch.tensor([[5], [9], [17], [2]])  # one new token for each of PROMPTS


def _prefilled(eng, tok, room: int):
    """PROMPTS left-padded and prefilled into a new cache of ``room`` slots past the prompt:
    (prefill logits, cache, key mask [B, W + room], positions [B, W], prompt width W)."""
    ids, mask = left_pad([tok.encode(p, add_special_tokens=False) for p in PROMPTS], tok.pad_token_id or 0, "cpu")
    B, W = ids.shape
    key_mask = torch.cat([mask, torch.ones(B, room, dtype=torch.long)], 1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    eng._rope_rows(W + room)
    cache = [[torch.zeros(B, eng.n_kv, W + room, eng.head_dim) for _ in range(2)] for _ in range(eng.n_layers)]
    logits, _ = eng.forward(ids, pos, cache, 0, key_mask)  # the prompts, W tokens a row at once
    return logits, cache, key_mask, pos, W


def test_one_decode_step_equals_the_eager_step(model_tok, simd):
    model, tok = model_tok
    eager, nat = KVSampler(model, tok), native.NativeKVSampler(model, tok)
    nat.simd = simd
    (ref_pre, ref_cache, key_mask, pos, W), (got_pre, got_cache, *_) = (_prefilled(eager, tok, 3),
                                                                        _prefilled(nat, tok, 3))
    # the prefill: the last prompt position's logits, and every prompt slot's key and value
    assert torch.allclose(got_pre, ref_pre, atol=1e-5), (got_pre - ref_pre).abs().max()
    for a, b in zip(ref_cache, got_cache):
        assert torch.allclose(a[0], b[0], atol=1e-5) and torch.allclose(a[1], b[1], atol=1e-5)
    allowed = key_mask.bool()[:, None, None, :W + 1]
    ref, _ = eager._forward(STEP, pos[:, -1:] + 1, ref_cache, W, allowed, key_mask)
    got, stat = nat._forward(STEP, pos[:, -1:] + 1, got_cache, W, allowed, key_mask)
    assert stat is None and got.shape == ref.shape
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()
    for a, b in zip(ref_cache, got_cache):  # the new key (after RoPE) and value written at slot W
        assert torch.allclose(a[0], b[0], atol=1e-6) and torch.allclose(a[1], b[1], atol=1e-6)


def test_rollout_logprobs_equal_the_training_forward(model_tok, simd):
    model, tok = model_tok
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS] * 2
    params = SamplingParams(max_new_tokens=10, temperature=0.8, stop_ids=(tok.eos_token_id,), topk=4)
    eng = native.NativeKVSampler(model, tok)
    eng.simd = simd
    rec, _ = collect(eng, tok, prompts, params, torch.Generator().manual_seed(0))
    with torch.no_grad():
        fwd = policy_forward(model, rec.tokens, rec.attn_mask, 0.8)
    assert torch.allclose(fwd.logp * rec.loss_mask, rec.behav_logp, atol=2e-5)
    assert (rec.topk_logp[..., 0] >= rec.behav_logp - 1e-5).all()
    # per-row caps: rows finish at 2..10 tokens, so the decode drops them on the way (compaction)
    caps = [2, 10, 3, 10, 4, 10, 6, 10]
    a = KVSampler(model, tok).generate(prompts, params, torch.Generator().manual_seed(1), limits=caps)
    b = eng.generate(prompts, params, torch.Generator().manual_seed(1), limits=caps)
    assert a.ids == b.ids and all(len(r) <= c for r, c in zip(b.ids, caps)) and len(b.ids[1]) > 3
    assert max(abs(x - y) for r, s in zip(a.logp, b.logp) for x, y in zip(r, s)) < 1e-5


def test_same_tokens_as_the_kv_sampler_and_row_noise():
    model, tok, _ = load_model(ModelConfig())
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(4)]
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_ids=(tok.eos_token_id,))
    eager, nat = KVSampler(model, tok), native.NativeKVSampler(model, tok)
    a = eager.generate(prompts, params, torch.Generator().manual_seed(3))
    b = nat.generate(prompts, params, torch.Generator().manual_seed(3))
    assert a.ids == b.ids and a.stop_reason == b.stop_reason
    assert max(abs(x - y) for r, s in zip(a.logp, b.logp) for x, y in zip(r, s)) < 1e-5
    rows = list(range(len(prompts)))
    a = eager.generate(prompts, params, RowNoise(11, rows))
    b = nat.generate(prompts, params, RowNoise(11, rows))
    assert a.ids == b.ids
    # the attention statistic is computed by the eager step, so it is the kv sampler's own
    a = eager.generate(prompts[:4], params, torch.Generator().manual_seed(1), want_attn=True)
    b = nat.generate(prompts[:4], params, torch.Generator().manual_seed(1), want_attn=True)
    assert a.ids == b.ids and a.attn_stat == b.attn_stat


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_the_cpp_token_loop_samples_what_the_python_loop_samples(temperature):
    """The C++ token loop (sampling, stop bookkeeping, compaction, decode) against the Python
    loop over the same decode step: the same tokens, bit-identical log-probs, the same stop
    reasons, the generator left in the same state; with per-row caps (one of 0 tokens), EOS
    and rows dropped on the way."""
    model, tok, _ = load_model(ModelConfig())
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(3)]
    params = SamplingParams(max_new_tokens=12, temperature=temperature, stop_ids=(tok.eos_token_id, 5))
    caps = [0, 12, 2, 12, 3, 5, 12, 1, 12, 4, 12, 7]
    outs, states = [], []
    for loop in (True, False):
        nat = native.NativeKVSampler(model, tok)
        nat.native_loop = loop
        g = torch.Generator().manual_seed(5) if temperature else None
        outs.append(nat.generate(prompts, params, g, limits=caps))
        states.append(g.get_state() if g is not None else None)
    a, b = outs
    assert a.ids == b.ids and a.logp == b.logp and a.trunc_logp == b.trunc_logp
    assert a.stop_reason == b.stop_reason and a.stopped == b.stopped
    assert all(len(r) <= c for r, c in zip(a.ids, caps)) and a.ids[0] == [] and len(set(map(len, a.ids))) > 3
    assert temperature == 0 or "eos" in a.stop_reason
    if temperature:
        assert torch.equal(states[0], states[1])


def test_one_token_prompts_and_long_rows(simd):
    """A one-token prompt width sends the prefill itself through the C++ step (slot 0, an empty
    prompt sees only itself); rows of 300+ keys at 2 threads: the attention's (row, head) pairs
    split across the threads, the softmax's vector loop runs many blocks of 16 keys and a tail."""
    model, tok, _ = load_model(ModelConfig())
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    eager, nat = KVSampler(model, tok), native.NativeKVSampler(model, tok)
    nat.simd = simd
    short = [[5], [9], [], [17]]
    a = eager.generate(short, params, torch.Generator().manual_seed(0))
    b = nat.generate(short, params, torch.Generator().manual_seed(0))
    assert a.ids == b.ids and max(abs(x - y) for r, q in zip(a.logp, b.logp) for x, y in zip(r, q)) < 1e-5
    model, tok = tiny_variant("llama-gqa")  # 4 query heads: 16 rows → 64 (row, head) pairs
    text = tok.encode("12+34=46. " * 31, add_special_tokens=False)[:300]
    prompts = [text[: 300 - 7 * (i % 3)] for i in range(16)]  # left padding too
    eager, nat = KVSampler(model, tok), native.NativeKVSampler(model, tok)
    nat.simd = simd
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = eager.generate(prompts, params, torch.Generator().manual_seed(1))
        b = nat.generate(prompts, params, torch.Generator().manual_seed(1))
    finally:
        torch.set_num_threads(threads)
    assert a.ids == b.ids and max(abs(x - y) for r, q in zip(a.logp, b.logp) for x, y in zip(r, q)) < 1e-5


def test_build_failures_name_the_cause(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_EXT", None)
    monkeypatch.setattr(native, "_ninja", lambda: None)
    with pytest.raises(BadInput, match=r"builds its decode step with ninja.*pip install ninja.*rollout.engine=kv"):
        native.load_extension()
    monkeypatch.undo()
    broken = tmp_path / "kv_decode.cpp"
    broken.write_text("#include <ATen/ATen.h>\nint decode( { this is not C++ }\n")
    monkeypatch.setattr(native, "_EXT", None)
    monkeypatch.setattr(native, "SOURCE", broken)
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BadInput, match=r"could not build kv_decode.cpp: .*error.*; use rollout.engine=kv"):
        native.load_extension()


def test_checkouts_at_other_paths_build_from_one_staged_source(monkeypatch, tmp_path):
    """torch's build files name the source by its path: the build reads the copy under
    ``$RLSUITE_CACHE/native/<digest>/``, the same path from any checkout, written once."""
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    code = native.SOURCE.read_bytes()
    first = native.staged_source(code, "d1")
    assert first == tmp_path / "cache" / "native" / "d1" / "kv_decode.cpp" and first.read_bytes() == code
    before = first.stat().st_mtime_ns
    other = tmp_path / "worktree" / "kv_decode.cpp"  # a second checkout's copy of the same source
    other.parent.mkdir()
    other.write_bytes(code)
    monkeypatch.setattr(native, "SOURCE", other)
    assert native.staged_source(other.read_bytes(), "d1") == first
    assert first.stat().st_mtime_ns == before  # not rewritten: ninja sees nothing newer than its objects
    assert list(first.parent.iterdir()) == [first]  # no temporary file left


def test_unsupported_models_are_refused():
    model, tok, _ = load_model(ModelConfig())
    with pytest.raises(BadInput, match=r"rollout.engine=native cannot serve torch.bfloat16 weights.*rollout.engine=kv"):
        native.NativeKVSampler(model.to(torch.bfloat16), tok)
    from transformers import LlamaConfig, LlamaForCausalLM

    odd = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, hidden_act="sigmoid"))
    with pytest.raises(BadInput, match=r"activation 'sigmoid' \(supported: gelu, gelu_new, gelu_pytorch_tanh, relu"):
        native.NativeKVSampler(odd, tok)


SMALL = ["--task", "arith", "--algo", "grpo", "--set", "model.warm_start=none", "--set", "eval.max_prompts=4",
    "--set", "eval.test_prompts=4",
         "--set", "rollout.prompts_per_step=4", "--set", "rollout.group_size=4", "--budget", "updates=2"]


def test_a_run_with_the_native_engine(tmp_path, capsys):
    code = main(["run", *SMALL, "--set", "rollout.engine=native", "--out", str(tmp_path / "n")])
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    spec = json.load(open(f"{run_dir}/spec.json"))
    assert spec["rollout"]["engine"] == "native"
    rows = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    assert len(rows) == 2 and all(r["budget/gen_tokens"] > 0 for r in rows)
    code = main(["run", *SMALL, "--out", str(tmp_path / "k")])
    assert code == 0
    other = capsys.readouterr().out.strip().splitlines()[-1].split("run_dir: ")[1]
    assert other.rsplit("/", 1)[1] != run_dir.rsplit("/", 1)[1]  # not the kv engine's run


def test_no_compiler_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(native, "_EXT", None)
    monkeypatch.setattr("rlsuite.suite.engines.native.shutil.which", lambda name: None)
    code = main(["run", *SMALL, "--set", "rollout.engine=native", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "rollout.engine=native" in err and "C++ compiler" in err and "rollout.engine=kv" in err
    assert not list(tmp_path.rglob("metrics.jsonl"))


def test_a_weight_sync_in_place_reaches_every_copy():
    """A step's weight sync overwrites the engine's tensors in place (the fused q/k/v and
    gate/up, and the native engine's transposed copies; its packed copies are packed again):
    afterwards the engines sample what
    fresh engines built from the new weights sample."""
    model, tok, _ = load_model(ModelConfig())
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(2)]
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    class Transposed(native.NativeKVSampler):
        packed = False

    kinds = [KVSampler, native.NativeKVSampler, Transposed]  # the native engine's packed and transposed copies
    engines = [k(model, tok) for k in kinds]
    fused = [e._layers[0][1] for e in engines]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    for e in engines:
        e.load_weights(model.state_dict(), 1)
    assert all(e._layers[0][1] is f for e, f in zip(engines, fused))  # in place, no new tensors
    for old, fresh in zip(engines, [k(model, tok) for k in kinds]):
        a = old.generate(prompts, params, torch.Generator().manual_seed(2))
        b = fresh.generate(prompts, params, torch.Generator().manual_seed(2))
        assert a.ids == b.ids and a.logp == b.logp
        assert all(torch.equal(x, y) for x, y in zip(old.state().values(), fresh.state().values()))


def test_a_nan_in_the_cache_gives_nan_logits_as_the_eager_step(simd):
    """A diverged run must show: a NaN key or value of a real slot makes that row's logits NaN
    on every path (the AVX-512 exp keeps NaN, the softmax max does not skip it)."""
    model, tok, _ = load_model(ModelConfig())
    eager, nat = KVSampler(model, tok), native.NativeKVSampler(model, tok)
    nat.simd = simd
    out = []
    for eng in (eager, nat):
        _, cache, key_mask, pos, W = _prefilled(eng, tok, 1)
        cache[0][0][1, 0, W - 1, 0] = float("nan")  # row 1's last prompt key (a real one)
        out.append(eng._forward(STEP, pos[:, -1:] + 1, cache, W, key_mask.bool()[:, None, None, :], key_mask)[0])
    for logits in out:
        assert torch.isnan(logits[1]).all() and torch.isfinite(logits[[0, 2, 3]]).all()


def test_another_default_dtype_takes_the_python_loop():
    """sample_step draws its noise in torch's default dtype; under float64 the C++ loop (which
    draws fp32) steps aside, so both loops still sample the same."""
    model, tok, _ = load_model(ModelConfig())
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        outs = []
        for loop in (True, False):
            nat = native.NativeKVSampler(model, tok)
            nat.native_loop = loop
            outs.append(nat.generate(prompts, params, torch.Generator().manual_seed(4)).ids)
    finally:
        torch.set_default_dtype(before)
    assert outs[0] == outs[1]


def test_an_in_place_sync_keeps_a_tied_head_apart_from_the_embedding():
    """An engine whose head aliases its embedding (loaded from a state without ``lm_head``) that
    then receives a separate ``lm_head.weight`` takes it as its own tensor: the embedding stays."""
    model, tok, _ = load_model(ModelConfig())
    for cls in (KVSampler, native.NativeKVSampler):
        eng = cls(model, tok)
        state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        eng.load_weights(state, 1)
        eng.w.pop("lm_head.weight")
        eng.load_weights(state, 1)  # no lm_head in the state: the head is the embedding
        assert eng.w["lm_head.weight"] is eng.w["embed_tokens.weight"]
        emb = eng.w["embed_tokens.weight"].clone()
        head = torch.randn_like(emb)
        eng.load_weights({"lm_head.weight": head}, 2)
        assert torch.equal(eng.w["embed_tokens.weight"], emb) and torch.equal(eng.w["lm_head.weight"], head)


def test_the_bf16_engine_samples_from_bf16_matmuls_and_is_refused_where_onednn_has_no_bf16(tmp_path, capsys,
                                                                                            monkeypatch):
    """``rollout.engine=native_bf16``: its weight copies are bf16 (oneDNN-packed), its log-probs
    differ from the fp32 engine's by bf16 rounding (more than float rounding, less than 0.1 on
    the tiny model), a weight sync repacks them, and a run through it logs the gap as ``mismatch/*``
    against the fp32 trainer. Where oneDNN has no bf16 it is refused with one message (exit 2)."""
    from rlsuite.suite.runfolder import read_jsonl

    if native.bf16_supported() is not None:
        with pytest.raises(BadInput, match="rollout.engine=native_bf16 cannot run: .*use rollout.engine=native"):
            native.NativeBF16KVSampler(*load_model(ModelConfig())[:2])
        return
    model, tok, _ = load_model(ModelConfig())
    bf = native.NativeBF16KVSampler(model, tok)
    assert bf._flat[1].dtype == torch.bfloat16 and bf._head_t.dtype == torch.bfloat16
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS for _ in range(4)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, stop_ids=(tok.eos_token_id,))
    rec, _ = collect(bf, tok, prompts, params, torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = policy_forward(model, rec.tokens, rec.attn_mask, 1.0).logp * rec.loss_mask
    gap = (ref - rec.behav_logp).abs().max()
    assert 1e-4 < gap < 0.1, gap
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    bf.load_weights(model.state_dict(), 1)
    fresh = native.NativeBF16KVSampler(model, tok)
    a = bf.generate(prompts, params, torch.Generator().manual_seed(2))
    b = fresh.generate(prompts, params, torch.Generator().manual_seed(2))
    assert a.ids == b.ids and a.logp == b.logp
    code = main(["run", *SMALL, "--set", "rollout.engine=native_bf16", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = read_jsonl(out.strip().splitlines()[-1].split("run_dir: ")[1] + "/metrics.jsonl")
    assert all(r["mismatch/logp_abs_diff_max"] > 1e-4 for r in rows)
    monkeypatch.setattr(native, "bf16_supported", lambda: "oneDNN refused bf16 on this CPU (test)")
    code = main(["run", *SMALL, "--set", "rollout.engine=native_bf16", "--out", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert code == 2 and "rollout.engine=native_bf16 cannot run: oneDNN refused bf16" in err
    assert not list((tmp_path / "no").rglob("metrics.jsonl"))
