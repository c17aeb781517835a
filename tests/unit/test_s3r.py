"""S3R (rlsuite.suite.engines.speculative): the speculative-sampling rule is exact, the engine's output
distribution equals dense sampling, and the negative control (no residual) does not.

No test depends on timing. The χ² test (~20k samples per position, three positions,
Bonferroni-corrected α = 1e-3) is marked ``slow`` but stays well under a minute on one thread.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.models import load_model
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.base import SamplingParams, left_pad
from rlsuite.suite.engines.speculative import (
    S3RSampler,
    exact_one_step_distribution,
    residual_distribution,
    speculative_accept,
)

D = torch.float64


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = load_model(ModelConfig())
    return model.eval(), tok


def enc(tok, s: str) -> list[int]:
    return tok.encode(s, add_special_tokens=False)


# ----------------------------------------------------------------------------------------
# the rule on toy distributions


def _toy_pairs():
    g = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(20):
        p = torch.rand(7, generator=g, dtype=D) ** 3
        q = torch.rand(7, generator=g, dtype=D) ** 3
        pairs.append((p / p.sum(), q / q.sum()))
    e = torch.eye(4, dtype=D)
    pairs += [
        # q misses p's mass
        (torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=D), torch.tensor([0.0, 0.25, 0.25, 0.5], dtype=D)),
        # p = q
        (torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=D), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=D)),
        (e[0], e[3]),  # disjoint
        (torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=D), torch.tensor([0.3, 0.3, 0.4, 0.0], dtype=D)),
    ]
    return pairs


def test_residual_distribution_by_hand():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=D)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=D)
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0], dtype=D))
    p = torch.tensor([0.4, 0.4, 0.2], dtype=D)
    q = torch.tensor([0.1, 0.2, 0.7], dtype=D)  # max(p − q, 0) = (0.3, 0.2, 0) → (0.6, 0.4, 0)
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([0.6, 0.4, 0.0], dtype=D))


def test_speculative_accept_threshold():
    p = torch.tensor([0.2, 0.8], dtype=D)
    q = torch.tensor([0.4, 0.6], dtype=D)
    assert speculative_accept(p, q, 0, 0.49)      # ratio 0.5
    assert not speculative_accept(p, q, 0, 0.51)
    assert speculative_accept(p, q, 1, 0.999999)  # p > q: always accepted
    assert not speculative_accept(torch.tensor([0.0, 1.0]), q, 0, 0.0)  # p = 0: never


@pytest.mark.parametrize("i", range(len(_toy_pairs())))
def test_one_step_distribution_is_exact(i):
    p, q = _toy_pairs()[i]
    torch.testing.assert_close(exact_one_step_distribution(p, q), p, atol=1e-6, rtol=0)
    # the same by enumeration: draft d ~ q, accepted w.p. min(1, p/q) (the acceptance region of
    # speculative_accept is u < p(d)/q(d)), else one draw from the residual
    res = residual_distribution(p, q)
    out = torch.zeros_like(p)
    for d in range(len(p)):
        if q[d] == 0:
            continue
        a = min(1.0, float(p[d] / q[d]))
        if a < 1:
            assert speculative_accept(p, q, d, a - 1e-9) and not speculative_accept(p, q, d, a + 1e-9)
        out[d] += q[d] * a
        out += q[d] * (1 - a) * res
    torch.testing.assert_close(out, p, atol=1e-6, rtol=0)


def test_negative_control_formula_is_biased():
    p, q = _toy_pairs()[0]
    biased = exact_one_step_distribution(p, q, residual=False)
    assert abs(float(biased.sum()) - 1) < 1e-12
    assert 0.5 * float((biased - p).abs().sum()) > 0.01


# ----------------------------------------------------------------------------------------
# the engine: greedy equals the dense sampler, μ is the dense model's log-prob


PROMPTS = ["12+7=", "hello world, this is a longer prompt than the others", "a", "What is 37 times 12? "]


@pytest.mark.parametrize("gamma,sink,window", [(4, 1, 2), (3, 0, 1), (2, 4, 8), (0, 1, 1), (5, 2, 1000)])
def test_greedy_equals_kv_sampler(tiny, gamma, sink, window):
    model, tok = tiny
    kv, s3 = KVSampler(model, tok), S3RSampler(model, tok, gamma=gamma, sink=sink, window=window)
    prompts = [enc(tok, s) for s in PROMPTS]
    stop = enc(tok, "e")[0]
    params = SamplingParams(max_new_tokens=24, temperature=0, stop_ids=(stop,), topk=5)
    limits = [24, 7, 1, 16]
    a = kv.generate(prompts, params, None, want_attn=True, limits=limits)
    b = s3.generate(prompts, params, None, want_attn=True, limits=limits)
    assert b.ids == a.ids
    assert b.stop_reason == a.stop_reason and b.stopped == a.stopped
    for x, y in zip(a.logp, b.logp):
        torch.testing.assert_close(torch.tensor(y), torch.tensor(x), atol=1e-4, rtol=0)
    assert b.trunc_logp == b.logp
    for x, y in zip(a.topk_ids, b.topk_ids):
        assert torch.equal(x, y)
    for x, y in zip(a.attn_stat, b.attn_stat):
        torch.testing.assert_close(torch.tensor(y), torch.tensor(x), atol=1e-4, rtol=0)
    st = s3.last_stats
    assert st["verify_forwards"] >= 1 and 0 <= st["accepted"] <= st["proposed"]
    assert st["tokens_per_verify"] == pytest.approx(1 + st["mean_accepted_length"])


def test_greedy_stop_strings_and_loaded_weights(tiny):
    model, tok = tiny
    kv, s3 = KVSampler(model, tok), S3RSampler(model, tok, gamma=3, sink=1, window=3)
    g = torch.Generator().manual_seed(1)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
    kv.load_weights(state, 3)
    s3.load_weights(state, 3)
    assert s3.version == 3
    params = SamplingParams(max_new_tokens=30, temperature=0, stop_strings=("ab", "x"))
    prompts = [enc(tok, s) for s in PROMPTS]
    a, b = kv.generate(prompts, params), s3.generate(prompts, params)
    assert b.ids == a.ids and b.stop_reason == a.stop_reason


def test_sparse_gather_equals_mask_reference(tiny):
    model, tok = tiny
    s3 = S3RSampler(model, tok, gamma=2, sink=2, window=3)
    prompts = [enc(tok, s) for s in PROMPTS]
    ids, mask = left_pad(prompts, 0, s3.device)
    B, W = ids.shape
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    pad = W - mask.sum(-1)
    out = {}
    for mode in ("sparse", "sparse_mask", "dense"):
        cache = [[torch.zeros(B, s3.n_kv, W + 2, s3.head_dim) for _ in range(2)] for _ in range(s3.n_layers)]
        s3.forward(ids[:, :-1], pos[:, :-1], cache, 0, mask)
        slot = torch.full((B,), W - 1)
        out[mode], _ = s3.forward_tokens(ids[:, -1:], pos[:, -1:], cache, slot, pad, mode)
    torch.testing.assert_close(out["sparse"], out["sparse_mask"], atol=1e-5, rtol=0)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    torch.testing.assert_close(out["dense"][:, 0], ref, atol=1e-4, rtol=0)
    long_rows = mask.sum(-1) > 5  # longer than sink + window: the draft really differs
    assert (out["sparse"] - out["dense"]).abs()[long_rows].amax() > 1e-2


def test_sampled_logp_is_dense_model_logp(tiny):
    model, tok = tiny
    s3 = S3RSampler(model, tok, gamma=3, sink=1, window=2)
    prompts = [enc(tok, s) for s in PROMPTS] * 4
    params = SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=20)
    out = s3.generate(prompts, params, torch.Generator().manual_seed(0))
    assert [len(x) for x in out.ids] == [12] * len(prompts)
    seqs = [p + x for p, x in zip(prompts, out.ids)]
    ids, mask = left_pad(seqs, 0, "cpu")
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    from rlsuite.suite.engines.sampling import truncate_logits
    for b, x in enumerate(out.ids):
        n = len(x)
        lg = logits[b, -n - 1:-1].float() / params.temperature
        tgt = torch.tensor(x)
        mu = torch.log_softmax(lg, -1).gather(-1, tgt[:, None])[:, 0]
        tr = torch.log_softmax(truncate_logits(lg, params.top_p, params.top_k), -1).gather(-1, tgt[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(out.logp[b]), mu, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(out.trunc_logp[b]), tr, atol=1e-4, rtol=0)
    st = s3.last_stats
    assert 0 < st["acceptance_rate"] < 1
    s3.generate(prompts[:2], params, torch.Generator().manual_seed(1))
    tot = s3.total_stats
    assert tot["proposed"] == st["proposed"] + s3.last_stats["proposed"]
    s3.reset_stats()
    assert s3.total_stats["proposed"] == 0


def test_full_window_accepts_almost_everything(tiny):
    model, tok = tiny
    s3 = S3RSampler(model, tok, gamma=4, sink=0, window=4096)  # sparse = dense up to rounding
    s3.generate([enc(tok, s) for s in PROMPTS], SamplingParams(max_new_tokens=20, temperature=1.0),
                torch.Generator().manual_seed(0))
    assert s3.last_stats["acceptance_rate"] > 0.99


def test_empty_prompt_falls_back_to_dense(tiny):
    model, tok = tiny
    kv, s3 = KVSampler(model, tok), S3RSampler(model, tok)
    params = SamplingParams(max_new_tokens=5, temperature=0)
    assert s3.generate([[], enc(tok, "ab")], params).ids == kv.generate([[], enc(tok, "ab")], params).ids
    assert s3.last_stats["proposed"] == 0


# ----------------------------------------------------------------------------------------
# χ²: S3R's samples follow the dense distribution, in a setting where sparse ≠ dense


CHI_PROMPT = "hello world"
CHI_T = 0.5
CHI_N = 20_000
CHI_ALPHA = 1e-3
CHI_KW = dict(gamma=2, sink=1, window=2)


def _dense_marginals(s3: S3RSampler, prompt: list[int], T: float):
    """Exact dense marginals of generated positions 0, 1, 2 (float64), and the exact draft
    distribution of positions 0 and 1 (given 0) as the engine computes it."""
    V = s3.w["lm_head.weight"].shape[0]
    W = len(prompt)
    ids = torch.tensor([prompt])
    pos = torch.arange(W)[None]
    one = torch.ones(1, W + 2, dtype=torch.long)

    def cache_for(rows: int):
        return [[torch.zeros(rows, s3.n_kv, W + 2, s3.head_dim) for _ in range(2)] for _ in range(s3.n_layers)]

    def expand(cache, rows):
        return [[c.expand(rows, -1, -1, -1).clone() for c in layer] for layer in cache]

    base = cache_for(1)
    s3.forward(ids[:, :-1], pos[:, :-1], base, 0, one)
    out = {}
    for mode in ("dense", "sparse"):
        c0 = expand(base, 1)
        lg0, _ = s3.forward_tokens(ids[:, -1:], pos[:, -1:], c0, torch.tensor([W - 1]),
                                   torch.zeros(1, dtype=torch.long), mode)
        p0 = torch.softmax(lg0[0, 0].double() / T, -1)
        c1 = expand(c0, V)
        lg1, _ = s3.forward_tokens(torch.arange(V)[:, None], torch.full((V, 1), W), c1, torch.full((V,), W),
                                   torch.zeros(V, dtype=torch.long), mode)
        p1c = torch.softmax(lg1[:, 0].double() / T, -1)  # [V(c), V]
        out[mode] = (p0, p1c, c1)
    p0, p1c, c1 = out["dense"]
    # position 2: feed every (c, d) pair densely
    p2cd = torch.empty(V, V, V, dtype=D)
    for c in range(0, V, 20):  # in chunks of 20 first tokens (20·V rows)
        cs = slice(c, min(c + 20, V))
        n = (cs.stop - cs.start) * V
        c2 = [[x[cs].repeat_interleave(V, 0) for x in layer] for layer in c1]
        lg2, _ = s3.forward_tokens(torch.arange(V).repeat(cs.stop - cs.start)[:, None], torch.full((n, 1), W + 1),
                                   c2, torch.full((n,), W + 1), torch.zeros(n, dtype=torch.long), "dense")
        p2cd[cs] = torch.softmax(lg2[:, 0].double() / T, -1).view(-1, V, V)
    m0 = p0
    m1 = p0 @ p1c
    m2 = torch.einsum("c,cd,cdv->v", p0, p1c, p2cd)
    q0, q1c, _ = out["sparse"]
    return (m0, m1, m2), (p0, q0, p1c, q1c)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float, int]:
    n = counts.sum().item()
    exp = probs * n
    small = exp < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum()[None]])
    e = torch.cat([exp[~small], exp[small].sum()[None]])
    if e[-1] == 0:
        obs, e = obs[:-1], e[:-1]
    stat = float(((obs - e) ** 2 / e).sum())
    df = len(e) - 1
    return stat, float(stats.chi2.sf(stat, df)), df


def _run_chi2(model, tok, residual: bool):
    s3 = S3RSampler(model, tok, residual=residual, **CHI_KW)
    prompt = enc(tok, CHI_PROMPT)
    g = torch.Generator().manual_seed(12345)
    params = SamplingParams(max_new_tokens=3, temperature=CHI_T)
    V = s3.w["lm_head.weight"].shape[0]
    counts = torch.zeros(3, V, dtype=torch.long)
    acc = []
    for _ in range(CHI_N // 5000):
        out = s3.generate([prompt] * 5000, params, g)
        toks = torch.tensor(out.ids)  # [5000, 3] (no stop ids)
        for j in range(3):
            counts[j] += torch.bincount(toks[:, j], minlength=V)
        acc.append(s3.last_stats["acceptance_rate"])
    return s3, counts, sum(acc) / len(acc)


@pytest.mark.slow
def test_chi2_s3r_matches_dense_and_control_fails(tiny):
    model, tok = tiny
    s3, counts, acc_rate = _run_chi2(model, tok, residual=True)
    marg, (p0, q0, p1c, q1c) = _dense_marginals(s3, enc(tok, CHI_PROMPT), CHI_T)
    tv0 = 0.5 * float((p0 - q0).abs().sum())
    tv1 = float((p0 * 0.5 * (p1c - q1c).abs().sum(-1)).sum())  # E_c TV(draft, dense) at position 1
    assert tv0 > 0.05 and tv1 > 0.05, (tv0, tv1)  # the draft really differs from the target
    m = len(marg)  # Bonferroni over the tested positions (each χ² is an omnibus over categories)
    res = [_chi2(counts[j], marg[j]) for j in range(m)]
    _, ctrl_counts, ctrl_acc = _run_chi2(model, tok, residual=False)
    ctrl = [_chi2(ctrl_counts[j], marg[j]) for j in range(m)]
    print(f"\nS3R χ² (N={CHI_N}, T={CHI_T}, {CHI_KW}): TV(q, p) pos0 = {tv0:.4f}, E TV pos1 = {tv1:.4f}, "
          f"acceptance {acc_rate:.3f} (control {ctrl_acc:.3f})")
    for j, ((s, pv, df), (cs, cpv, _)) in enumerate(zip(res, ctrl)):
        print(f"  pos {j}: S3R χ²={s:.1f} df={df} p={pv:.3g} | no-residual control χ²={cs:.1f} p={cpv:.3g}")
    assert all(pv > CHI_ALPHA / m for _, pv, _ in res), res
    assert min(pv for _, pv, _ in ctrl) < CHI_ALPHA / m, ctrl


def test_greedy_equals_kv_sampler_with_biases_on_every_projection():
    """A Llama with attention_bias and mlp_bias (biases randomised; HF zeroes them): S3R reads
    the o_proj / gate / up / down biases as the KV sampler does (which equals the HF forward)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlsuite.suite.models import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         attention_bias=True, mlp_bias=True, pad_token_id=0, eos_token_id=2))
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.endswith(".bias"):
                prm.normal_(0, 0.5)
    prompts = [enc(tok, s) for s in PROMPTS]
    params = SamplingParams(max_new_tokens=12, temperature=0)
    a = KVSampler(model.eval(), tok).generate(prompts, params)
    b = S3RSampler(model, tok, gamma=3, sink=1, window=2).generate(prompts, params)
    assert b.ids == a.ids
    for x, y in zip(a.logp, b.logp):
        torch.testing.assert_close(torch.tensor(y), torch.tensor(x), atol=1e-4, rtol=0)
