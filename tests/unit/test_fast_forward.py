"""The functional forward behind ``train.share_prefix`` / ``train.compile`` (suite/fast_forward.py).

* with and without prompt sharing it gives the HF forward's log-probs, entropies, Σπ², top-K
  log-probs and parameter gradients (to float rounding), for the tiny model, a Llama with
  grouped-query attention and untied head, a Llama with biases on every projection, and a Qwen2
  model with q/k/v biases, on batches with
  left-padded prompts of different lengths, ragged responses and a temperature;
* ``positions_saved`` and the sharing plan, by hand;
* what it does not serve is named (architecture, fields, sliding window), and ``policy_forward``
  falls back to the HF forward there;
* (slow) the compiled layer stack gives the eager one's results.
"""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.fast_forward import (fast_forward, positions_saved, share_plan, shared_positions, sliding_window,
                                        unsupported)
from rlsuite.suite.models import load_model
from rlsuite.suite.policy import policy_forward


def _model(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if kind == "tiny":
        return load_model(ModelConfig())[0]
    torch.manual_seed(0)
    if kind == "llama-gqa":
        return LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                            rope_theta=500.0))
    if kind == "llama-bias":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
                                             mlp_bias=True))
        with torch.no_grad():
            for name, prm in model.named_parameters():
                if name.endswith(".bias"):
                    prm.normal_(0, 0.5)
        return model
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=60, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    with torch.no_grad():  # HF initialises biases to 0: make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def _batch(P: int = 3, G: int = 4, W: int = 7, R: int = 9, vocab: int = 60, seed: int = 0):
    """P prompts (left-padded: lengths W−3, W−1, W, …) × G ragged responses (2..R tokens)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (P, W), generator=g)
    pmask = torch.ones(P, W, dtype=torch.long)
    for p, pad in zip(range(P), (3, 1, 0, 2)):
        prompts[p, :pad], pmask[p, :pad] = 0, 0
    tokens = torch.cat([prompts.repeat_interleave(G, 0), torch.randint(3, vocab, (P * G, R), generator=g)], 1)
    attn = torch.cat([pmask.repeat_interleave(G, 0), torch.ones(P * G, R, dtype=torch.long)], 1)
    for b in range(P * G):
        n = int(torch.randint(2, R + 1, (1,), generator=g))
        tokens[b, W + n:], attn[b, W + n:] = 0, 0
    loss_mask = attn.float().clone()
    loss_mask[:, :W] = 0
    return tokens, attn, loss_mask, W


def _predicted(attn: torch.Tensor) -> torch.Tensor:
    """Positions whose prediction comes from a real token (both it and its predecessor are real)."""
    m = attn.bool().clone()
    m[:, 1:] &= attn[:, :-1].bool()
    m[:, 0] = False
    return m


def _grads(model, fwd, loss_mask) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    ((fwd.logp * loss_mask).sum() + 0.1 * (fwd.entropy * loss_mask).sum()).backward()
    out = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("kind", ["tiny", "llama-gqa", "llama-bias", "qwen2"])
@pytest.mark.parametrize("share", [False, True])
def test_equals_the_hf_forward(kind, share):
    model = _model(kind)
    vocab = model.config.vocab_size
    tokens, attn, loss_mask, W = _batch(vocab=vocab)
    want = frozenset({"entropy", "sum_pi_sq"})
    ref = policy_forward(model, tokens, attn, 0.7, want)
    g_ref = _grads(model, ref, loss_mask)
    out = fast_forward(model, tokens, attn, 0.7, want, prompt_width=W if share else 0)
    g = _grads(model, out, loss_mask)
    m = _predicted(attn)
    assert out.logp.shape == ref.logp.shape and (out.logp[:, 0] == 0).all()
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref.entropy[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.sum_pi_sq[m], ref.sum_pi_sq[m], atol=1e-6, rtol=1e-5)  # prompt positions too
    scale = max(float(x.abs().max()) for x in g_ref)
    assert scale > 0
    for a, b in zip(g, g_ref):
        assert float((a - b).abs().max()) <= 1e-4 * scale


def test_topk_logp_equals_the_hf_forward():
    model = _model("llama-gqa")
    tokens, attn, _, W = _batch()
    topk_ids = torch.randint(0, 60, (*tokens.shape, 3), generator=torch.Generator().manual_seed(1))
    ref = policy_forward(model, tokens, attn, 1.0, frozenset({"topk"}), topk_ids=topk_ids)
    out = fast_forward(model, tokens, attn, 1.0, frozenset({"topk"}), prompt_width=W, topk_ids=topk_ids)
    m = _predicted(attn)
    torch.testing.assert_close(out.topk_logp[m], ref.topk_logp[m], atol=1e-5, rtol=1e-5)
    assert out.entropy is None


@pytest.mark.parametrize("share", [False, True])
def test_sum_pi_sq_is_the_full_softmax_sum_of_squares_on_both_forwards(share):
    # Σ_v π(v)² at temperature 0.7, from the logits by hand (verl's logsumexp form), against the HF
    # forward's field and the functional forward's (with and without prompt sharing, from the response on)
    model = _model("qwen2")
    tokens, attn, _, W = _batch()
    m = _predicted(attn)
    m[:, :W] = False
    with torch.no_grad():
        logits = model(input_ids=tokens, attention_mask=attn,
                       position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits.float() / 0.7
    hand = torch.exp(torch.logsumexp(2 * logits, -1) - 2 * torch.logsumexp(logits, -1))
    hand = torch.nn.functional.pad(hand[:, :-1], (1, 0))  # aligned with the token each position predicts
    want = frozenset({"sum_pi_sq"})
    with torch.no_grad():
        ref = policy_forward(model, tokens, attn, 0.7, want, logits_from=W)
        out = fast_forward(model, tokens, attn, 0.7, want, prompt_width=W if share else 0, logits_from=W)
    assert ref.entropy is None and out.entropy is None and (ref.sum_pi_sq[:, :W] == 0).all()
    assert float(hand[m].min()) > 1 / 60 and float(hand[m].max()) < 1  # a real distribution: 1/V ≤ Σπ² ≤ 1
    torch.testing.assert_close(ref.sum_pi_sq[m], hand[m], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.sum_pi_sq[m], hand[m], atol=1e-6, rtol=1e-5)


def test_policy_forward_routes_to_the_fast_forward_only_when_asked():
    model = _model("tiny")
    tokens, attn, _, W = _batch(vocab=model.config.vocab_size)
    with torch.no_grad():
        hf = policy_forward(model, tokens, attn, 1.0)
        shared = policy_forward(model, tokens, attn, 1.0, prompt_width=W)
        direct = fast_forward(model, tokens, attn, 1.0, prompt_width=W)
    assert torch.equal(shared.logp, direct.logp)  # routed
    assert not torch.equal(shared.logp, hf.logp)  # another summation order…
    torch.testing.assert_close(shared.logp[_predicted(attn)], hf.logp[_predicted(attn)], atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # …and a field it does not serve goes to the HF forward
        h = policy_forward(model, tokens, attn, 1.0, frozenset({"hidden"}), prompt_width=W)
    assert h.hidden is not None and torch.equal(h.logp, hf.logp)


def test_sharing_plan_and_positions_saved_by_hand():
    # prompts: rows 0,1,2 share "5 6 7" (row 2 as well), row 3 has "0 6 7" with one pad
    tokens = torch.tensor([[5, 6, 7, 9, 9], [5, 6, 7, 8, 0], [5, 6, 7, 9, 8], [0, 6, 7, 9, 9]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    W, first, inv = share_plan(tokens, attn, 3)
    assert W == 3 and sorted(first.tolist()) == [0, 3]
    assert inv[0] == inv[1] == inv[2] != inv[3] and first[inv[3]] == 3 and first[inv[0]] == 0
    # 3 + 3 + 3 + 2 prompt tokens; computed once: 3 (rows 0-2) + 2 (row 3) → 6 saved
    assert positions_saved(tokens, attn, 3) == 6
    assert share_plan(tokens[[0, 3]], attn[[0, 3]], 3) is None  # all prompts distinct
    assert positions_saved(tokens, attn, 0) == 0
    assert share_plan(tokens, attn, 4) is None  # no response left to speak of (W ≥ T − 1)


def test_unsupported_names_what_it_cannot_serve():
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                              MistralForCausalLM)

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=20, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                      bos_token_id=1, eos_token_id=2))
    why = unsupported(gpt2, frozenset(), 8)
    assert "gpt2" in why and "llama" in why and "qwen2" in why
    tiny = _model("tiny")
    assert unsupported(tiny, frozenset({"entropy", "topk"}), 8) is None
    why = unsupported(tiny, frozenset({"hidden", "values", "entropy"}), 8)
    assert why.startswith("fields ['hidden', 'values']")
    mistral = MistralForCausalLM(MistralConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, num_key_value_heads=1, sliding_window=4))
    assert unsupported(mistral, frozenset(), 4) is None
    assert "sliding window 4" in unsupported(mistral, frozenset(), 9)
    dropout = LlamaForCausalLM(LlamaConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, attention_dropout=0.1))
    assert "attention_dropout" in unsupported(dropout, frozenset(), 4)


def test_sliding_window_of_each_family():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    assert sliding_window(MistralConfig(sliding_window=8)) == 8
    assert sliding_window(MistralConfig(sliding_window=None)) is None
    assert sliding_window(LlamaConfig()) is None
    assert sliding_window(Qwen2Config(num_hidden_layers=4)) is None  # use_sliding_window off by default
    assert sliding_window(Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                                      max_window_layers=2)) == 8  # layers 2, 3 slide
    assert sliding_window(Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                                      max_window_layers=4)) is None  # every layer full attention


def test_shared_positions_follow_the_path_taken():
    """The FLOP accounting subtracts prompt positions only when the fast forward serves the call."""
    from transformers import MistralConfig, MistralForCausalLM

    tokens, attn, _, W = _batch(vocab=20)  # width 16
    saved = positions_saved(tokens, attn, W)
    assert saved > 0
    small = MistralForCausalLM(MistralConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, sliding_window=8))
    wide = MistralForCausalLM(MistralConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1, sliding_window=64))
    assert shared_positions(small, frozenset(), tokens, attn, W) == 0  # HF forward: nothing saved
    assert shared_positions(wide, frozenset(), tokens, attn, W) == saved
    assert shared_positions(wide, frozenset({"topk"}), tokens, attn, W) == 0  # top-K: no sharing
    assert shared_positions(wide, frozenset(), tokens, attn, 0) == 0


@pytest.mark.slow
def test_compiled_stack_equals_the_eager_one():
    model = _model("llama-gqa")
    tokens, attn, loss_mask, W = _batch()
    want = frozenset({"entropy"})
    for share in (0, W):
        eager = fast_forward(model, tokens, attn, 0.7, want, prompt_width=share)
        g_eager = _grads(model, eager, loss_mask)
        comp = fast_forward(model, tokens, attn, 0.7, want, prompt_width=share, compiled=True)
        g = _grads(model, comp, loss_mask)
        m = _predicted(attn)
        torch.testing.assert_close(comp.logp[m], eager.logp[m], atol=1e-5, rtol=1e-5)
        scale = max(float(x.abs().max()) for x in g_eager)
        for a, b in zip(g, g_eager):
            assert float((a - b).abs().max()) <= 1e-4 * scale
    # several models or precisions in one process (a local sweep) stay compiled: dynamo's
    # default of 8 graphs per function would silently fall back to eager
    import torch._dynamo as dynamo

    assert dynamo.config.recompile_limit >= 64


def test_buckets_by_hand():
    from rlsuite.suite.fast_forward import buckets

    # sorted longest first (ties by row); no pass overhead: one group per distinct length
    assert buckets([5, 2, 5, 1], 0.0) == [[0, 2], [1], [3]]
    # a large overhead: one group at the longest length
    assert buckets([5, 2, 5, 1], 100.0) == [[0, 2, 1, 3]]
    # overhead 3: splitting off rows 1 and 3 (saves 2·5 − 2·2 = 6 positions) pays for one more pass
    assert buckets([5, 2, 5, 1], 3.0) == [[0, 2], [1, 3]]
    assert buckets([], 1.0) == []


@pytest.mark.parametrize("kind", ["tiny", "llama-gqa"])
@pytest.mark.parametrize("share", [False, True])
def test_logits_from_computes_the_same_values_from_there_on(kind, share, monkeypatch):
    """``logits_from=W`` (what the trainer passes: the loss mask starts at the prompt width):
    log-probs and entropies from W on are those of the whole-sequence forward, earlier positions
    are 0, and the gradients of a loss on the response are the same — bit for bit on the HF path
    (the default training forward), to float rounding on the shared-prefix path, there with every
    response length in a group of its own (no pass overhead)."""
    import rlsuite.suite.fast_forward as ff

    model = _model(kind)
    tokens, attn, loss_mask, W = _batch(vocab=model.config.vocab_size)
    want = frozenset({"entropy"})
    if share:
        monkeypatch.setattr(ff, "pass_overhead", lambda model: 0.0)
    ref = policy_forward(model, tokens, attn, 0.7, want)
    g_ref = _grads(model, ref, loss_mask)
    out = policy_forward(model, tokens, attn, 0.7, want, prompt_width=W if share else 0, logits_from=W)
    g = _grads(model, out, loss_mask)
    m = _predicted(attn) & (loss_mask > 0)
    assert out.logp.shape == ref.logp.shape and (out.logp[:, :W] == 0).all() and (out.entropy[:, :W] == 0).all()
    if not share:  # the HF forward: bit for bit
        assert torch.equal(out.logp[:, W:], ref.logp[:, W:]) and torch.equal(out.entropy[:, W:], ref.entropy[:, W:])
        assert all(torch.equal(a, b) for a, b in zip(g, g_ref))
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref.entropy[m], atol=1e-5, rtol=1e-5)
    scale = max(float(x.abs().max()) for x in g_ref)
    for a, b in zip(g, g_ref):
        assert float((a - b).abs().max()) <= 1e-4 * scale


def test_the_shared_pass_in_length_groups_equals_the_hf_forward(monkeypatch):
    """Prefix sharing with the response rows cut into groups of their own lengths (padding not
    computed; its predictions 0): the HF forward's values at every real response position."""
    import rlsuite.suite.fast_forward as ff

    model = _model("llama-bias")
    tokens, attn, loss_mask, W = _batch(P=2, G=5, R=12, seed=3)
    calls = []
    stack = ff._stack

    def counting(x, *a):
        calls.append(tuple(x.shape[:2]))
        return stack(x, *a)

    monkeypatch.setattr(ff, "pass_overhead", lambda model: 0.0)
    monkeypatch.setattr(ff, "_stack", counting)
    want = frozenset({"entropy"})
    ref = policy_forward(model, tokens, attn, 1.0, want)
    out = fast_forward(model, tokens, attn, 1.0, want, prompt_width=W)
    lengths = attn[:, W:].sum(1)
    assert calls[0] == (2, W) and sorted(calls[1:], key=lambda c: -c[1]) == calls[1:]
    assert {c[1] for c in calls[1:]} == set(lengths.tolist()) and sum(c[0] for c in calls[1:]) == tokens.shape[0]
    m = _predicted(attn)
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref.entropy[m], atol=1e-5, rtol=1e-5)
    assert (out.logp[:, W:][~attn[:, W:].bool()] == 0).all()  # the response padding: not computed
