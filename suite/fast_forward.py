"""A functional training/scoring forward for Llama-family models, with two opt-in levers.

:func:`rlsuite.suite.policy.policy_forward` calls :func:`fast_forward` instead of the HF module
forward when a run sets either lever and the model supports it (:func:`unsupported`):

* ``train.share_prefix`` — **one prompt pass per group.** The G completions of a prompt share
  its tokens, so the prompt positions are computed once per distinct prompt (``U`` rows, not
  ``B``) and their keys/values serve every completion of the group; the response positions
  attend to ``[shared prompt keys | own keys]``. Gradients flow back through the shared keys and
  values into the one prompt pass (summed over the group, as the per-row passes' gradients are).
  The saving is ``(G − 1)/G`` of the prompt positions of every training and scoring pass, so it
  grows with the prompt: tiny on two-digit sums, large on few-shot math prompts.
* ``train.compile`` — the layer stack through ``torch.compile`` (dynamic shapes; inductor fuses
  RMSNorm, RoPE and SwiGLU into a few kernels). The first call of each process compiles (tens
  of seconds on a CPU), so it pays off only in runs of many steps.

Both change floating-point summation order only (the same math); neither is on by default, so
runs without them are bit-identical to the HF forward. Log-prob rows keep the layout of
:mod:`rlsuite.suite.types` (position t = log π(tokens[:, t] | prefix), position 0 = 0).

Supported: ``llama``, ``mistral`` and ``qwen2`` (RMSNorm, rotary embeddings from the model's
own rotary module — so RoPE scaling variants are honoured — grouped-query attention, SwiGLU,
optional q/k/v, output and MLP biases), for the fields ``logp``, ``entropy``, ``sum_pi_sq`` and ``topk``
(``topk`` without prefix sharing). Anything else (hidden states, values, attention statistics, other
architectures, a sliding window shorter than the sequence) uses the HF forward.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from rlsuite.suite.types import Forward

FAST_ARCHITECTURES = ("llama", "mistral", "qwen2")
FAST_FIELDS = frozenset({"entropy", "sum_pi_sq", "topk"})
POSITION_STATS = ("entropy", "sum_pi_sq")
"""The per-position statistics of the full distribution :func:`distribution_stats` computes on request."""
LINEARS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
           ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj"))
"""A decoder layer's linear layers, (submodule, name), in the order :func:`_stack` applies them."""


def sliding_window(cfg) -> Optional[int]:
    """The attention window of a model whose layers (any of them) use sliding-window attention:
    Mistral's ``sliding_window``, Qwen2's when ``layer_types`` has a sliding layer (transformers
    derives it from ``use_sliding_window`` and ``max_window_layers``); else None."""
    window = getattr(cfg, "sliding_window", None)
    if not window:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return window if "sliding_attention" in types else None
    return window if getattr(cfg, "use_sliding_window", True) else None


def unsupported(model, want: frozenset[str], width: int) -> Optional[str]:
    """Why :func:`fast_forward` cannot serve this call (None when it can)."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in FAST_ARCHITECTURES:
        return f"model_type {getattr(cfg, 'model_type', None)!r} (fast forward: {', '.join(FAST_ARCHITECTURES)})"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} (fast forward: silu)"
    extra = set(want) - FAST_FIELDS
    if extra:
        return f"fields {sorted(extra)} (fast forward: logp, {', '.join(sorted(FAST_FIELDS))})"
    if getattr(cfg, "attention_dropout", 0.0):
        return f"attention_dropout {cfg.attention_dropout} (fast forward: no dropout)"
    window = sliding_window(cfg)
    if window and width > window:
        return f"sequence width {width} exceeds the sliding window {window}"
    core = _hf(model)
    if core is not model:  # a LoRA policy (or its BaseView): the adapters the stack reads must be plain
        from rlsuite.suite.lora import layer_problem

        for i, layer in enumerate(core.model.layers):
            for part, name in LINEARS:
                why = layer_problem(getattr(getattr(layer, part), name))
                if why is not None:
                    return f"LoRA adapters of this form (layer {i} {name}: {why})"
    return None


def _hf(model):
    """The Hugging Face causal LM whose layers the functional forward reads: ``model``, or the one
    inside a LoRA policy's PEFT wrappers (a :class:`rlsuite.suite.lora.BaseView`'s policy's)."""
    from rlsuite.suite.lora import BaseView, is_lora

    if isinstance(model, BaseView):
        model = model.policy
    return model.get_base_model() if is_lora(model) else model


def shared_positions(model, want: frozenset[str], tokens: Tensor, attn_mask: Tensor, prompt_width: int) -> int:
    """The prompt positions :func:`rlsuite.suite.policy.policy_forward` saves on this call: 0 when it
    takes the HF forward (:func:`unsupported`), shares nothing, or top-K log-probs are wanted."""
    if not prompt_width or "topk" in want or unsupported(model, want, tokens.shape[1]) is not None:
        return 0
    return positions_saved(tokens, attn_mask, prompt_width)


def _linear(mod) -> tuple:
    """``(weight, bias, lora)`` of a decoder linear layer. ``lora`` is None for a plain ``nn.Linear``
    or a PEFT LoRA layer whose adapters are disabled (π_ref / π_init of a LoRA run, inside
    ``disable_adapter()``), else ``(A [r, in], B [out, r], B's bias or None, scaling, dropout p)``
    of the run's one adapter (:func:`unsupported` names other forms)."""
    from rlsuite.suite.lora import ADAPTER

    base = getattr(mod, "base_layer", None)
    if base is None:
        return mod.weight, mod.bias, None
    if mod.disable_adapters:
        return base.weight, base.bias, None
    a, b = mod.lora_A[ADAPTER], mod.lora_B[ADAPTER]
    return base.weight, base.bias, (a.weight, b.weight, b.bias, float(mod.scaling[ADAPTER]),
                                    float(getattr(mod.lora_dropout[ADAPTER], "p", 0.0)))


def _layer_weights(model) -> list[tuple]:
    out = []
    for layer in model.model.layers:
        q, k, v, o, g, u, d = (_linear(getattr(getattr(layer, part), name)) for part, name in LINEARS)
        out.append((layer.input_layernorm.weight, q, k, v, o, layer.post_attention_layernorm.weight, g, u, d))
    return out


def _lin(x: Tensor, lin: tuple) -> Tensor:
    """A linear layer of :func:`_linear`: ``x W^T + b``, plus the LoRA adapter's ``s·B(A(drop(x)))``
    as PEFT computes it (the input cast to the adapter's dtype, the sum back to the base's; dropout
    only in a forward that builds a graph, as :class:`rlsuite.suite.lora.GradDropout`). x [..., in]
    → [..., out]."""
    w, b, lora = lin
    y = F.linear(x, w, b)
    if lora is None:
        return y
    a, bw, bb, scaling, p = lora
    x = x.to(a.dtype)
    if p:
        x = F.dropout(x, p, training=torch.is_grad_enabled())
    return (y + F.linear(F.linear(x, a), bw, bb) * scaling).to(y.dtype)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """HF's ``apply_rotary_pos_emb`` on one of q/k: x [N, h, S, D], cos/sin [N, 1, S, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def _stack(x: Tensor, cos: Tensor, sin: Tensor, mask: Optional[Tensor],
           prefix_kv: Optional[list[tuple[Tensor, Tensor]]], layers: list[tuple], norm_w: Tensor, n_heads: int,
           n_kv: int, head_dim: int, eps: float, gqa: bool) -> tuple[Tensor, list]:
    """The decoder layers and the final norm.

    x [N, S, H] embeddings; cos/sin [N, S, D]; mask [N, 1, S, K] bool (K = prefix + S) or None
    for plain causal attention; prefix_kv: per layer (k, v) [N, n_kv, P, D] of earlier
    positions (or None); layers: per layer (norm weight, q, k, v, o, norm weight, gate, up, down) with
    each linear as :func:`_linear` gives it; gqa: n_kv < n_heads (a bool, so a compiled stack
    specialises on it).
    Returns (final hidden [N, S, H], per layer (k, v) of these positions).
    """
    N, S, H = x.shape
    cos, sin = cos[:, None], sin[:, None]
    kvs = []
    for i, (ln1, q_lin, k_lin, v_lin, o_lin, ln2, g_lin, u_lin, d_lin) in enumerate(layers):
        h = F.rms_norm(x, (H,), ln1, eps)
        q = _lin(h, q_lin).view(N, S, n_heads, head_dim).transpose(1, 2)
        k = _lin(h, k_lin).view(N, S, n_kv, head_dim).transpose(1, 2)
        v = _lin(h, v_lin).view(N, S, n_kv, head_dim).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kvs.append((k, v))
        if prefix_kv is not None:
            k, v = torch.cat([prefix_kv[i][0], k], 2), torch.cat([prefix_kv[i][1], v], 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)
        x = x + _lin(o.transpose(1, 2).reshape(N, S, n_heads * head_dim), o_lin)
        h = F.rms_norm(x, (H,), ln2, eps)
        x = x + _lin(F.silu(_lin(h, g_lin)) * _lin(h, u_lin), d_lin)
    return F.rms_norm(x, (H,), norm_w, eps), kvs


_compiled = None


def _compiled_stack():
    """``_stack`` through ``torch.compile`` with dynamic shapes. Calls always pass a mask (so
    the graph does not depend on padding) and run with duck sizing off (so a batch size that
    happens to equal another dimension does not specialise the graph): the variants compiled
    are grad/no-grad × with/without a shared prefix, four per model and precision (the
    recompile limit is raised to 64 so that a process with several stays compiled)."""
    global _compiled
    if _compiled is None:
        # four graphs per model and precision; a process that trains several models or
        # precisions (a local sweep, benchmarks/levers.py) needs more than dynamo's default
        # of 8, past which it would silently run the stack eagerly
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        compiled = torch.compile(_stack, dynamic=True)

        def call(*args):
            with torch.fx.experimental._config.patch(use_duck_shape=False):
                return compiled(*args)

        _compiled = call
    return _compiled


def _mask(key_mask: Tensor, n_queries: int, offset: int, explicit: bool = False) -> Optional[Tensor]:
    """Causal-and-padding mask [N, 1, S, K] for queries at positions offset..offset+S−1 over keys
    0..K−1, or None when plain causal attention is exact (no padded key before a real query)
    and ``explicit`` is False. A query with no real key (left padding) may see itself, so no
    softmax row is empty."""
    K = key_mask.shape[1]
    if not explicit and offset == 0 and bool(key_mask[:, 0].all()):
        return None  # no left padding: right padding lies after every real query
    dev = key_mask.device
    q_pos = torch.arange(offset, offset + n_queries, device=dev)[:, None]
    k_pos = torch.arange(K, device=dev)[None, :]
    allowed = (k_pos <= q_pos)[None, None] & key_mask.bool()[:, None, None, :]
    return allowed | (k_pos == q_pos)[None, None]


def distribution_stats(logits: Tensor, targets: Tensor, temperature: float, want: frozenset[str],
                       topk_ids: Optional[Tensor]) -> tuple[Tensor, dict[str, Tensor], Optional[Tensor]]:
    """logits [N, S, V] predicting targets [N, S] → logp [N, S], the wanted :data:`POSITION_STATS`
    (entropy, Σπ²: name → [N, S]), top-K logp [N, S, K]; in fp32 at ``temperature``. The one place
    both forwards (this module's and :func:`rlsuite.suite.policy.policy_forward`'s HF one) compute them."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    stats = {}
    if "entropy" in want:
        stats["entropy"] = -(logp_all.exp() * logp_all).sum(-1)
    if "sum_pi_sq" in want:
        stats["sum_pi_sq"] = torch.exp(2 * logp_all).sum(-1)
    topk = logp_all.gather(-1, topk_ids) if topk_ids is not None else None
    return logp, stats, topk


def share_plan(tokens: Tensor, attn_mask: Tensor, prompt_width: int) -> Optional[tuple[int, Tensor, Tensor]]:
    """How :func:`fast_forward` shares prompt passes: ``(W, first [U], inv [B])`` — the prompt
    width, the first row of each distinct prompt and each row's prompt number — or None when no
    two rows share their first ``prompt_width`` tokens (or there is no response to speak of)."""
    B, T = tokens.shape
    W = prompt_width
    if not 0 < W < T - 1:
        return None
    uniq, inv = torch.unique(torch.cat([tokens[:, :W], attn_mask[:, :W].long()], 1), dim=0, return_inverse=True)
    if uniq.shape[0] == B:
        return None
    first = torch.full((uniq.shape[0],), B, dtype=torch.long, device=tokens.device).scatter_reduce(
        0, inv, torch.arange(B, device=tokens.device), "amin")
    return W, first, inv


def positions_saved(tokens: Tensor, attn_mask: Tensor, prompt_width: int) -> int:
    """Real (unpadded) token positions a shared-prefix forward does not compute: the prompt
    tokens of every row but the first of each distinct prompt (0 without sharing). The FLOP
    accounting charges the positions actually computed."""
    plan = share_plan(tokens, attn_mask, prompt_width)
    if plan is None:
        return 0
    W, first, _ = plan
    return int(attn_mask[:, :W].sum()) - int(attn_mask[first, :W].sum())


def buckets(lengths: list[int], overhead: float) -> list[list[int]]:
    """Rows grouped for the response pass of :func:`fast_forward`: sorted by real length
    (longest first) and cut into runs of consecutive rows, each computed at its own longest
    length, so that the positions computed plus ``overhead`` per extra pass (the cost of one
    more pass of the layer stack, in positions) are fewest (an exact partition by dynamic
    programming over the sorted rows). Returns lists of row indices."""
    order = sorted(range(len(lengths)), key=lambda b: (-lengths[b], b))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j sorted rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # the last run is sorted rows i..j-1, as wide as row i
            c = best[i] + (j - i) * lengths[order[i]] + (overhead if i else 0.0)
            if c < best[j]:
                best[j], cut[j] = c, i
    runs, j = [], n
    while j:
        runs.append(order[cut[j]:j])
        j = cut[j]
    return runs[::-1]


def pass_overhead(model) -> float:
    """One more pass of the layer stack, in token positions, for :func:`buckets`: its weights read
    again in the forward and backward and its weight gradients summed once more (about 3 passes
    over the weights at ~10 GB/s against 6 FLOPs a weight and position at ~50 GFLOP/s on a CPU
    core: about 10 positions whatever the size), plus the per-op cost of its layers (~0.4 ms a
    layer, forward and backward: 3.3e6 / the parameters of a layer): about 23 positions for the
    embedded tiny model, 11 for a 135M-parameter one (measured there, 2 prompts × 4 rows of 7–64
    response tokens: 6.2–6.7 s for forward and backward with this grouping or one pass per length,
    8.3–10.5 s with one pass at the longest length). Only the grouping depends on it."""
    per_layer = sum(p.numel() for p in model.model.layers[0].parameters())
    return 10.0 + 3.3e6 / max(1, per_layer)


def fast_forward(model, tokens: Tensor, attn_mask: Tensor, temperature: float, want: frozenset[str] = frozenset(),
                 prompt_width: int = 0, compiled: bool = False, topk_ids: Optional[Tensor] = None,
                 logits_from: int = 0) -> Forward:
    """``policy_forward``'s result (fields logp, entropy, sum_pi_sq, topk_logp) from the functional forward.

    tokens, attn_mask [B, T]; prompt_width > 0 shares the prompt pass among rows whose first
    ``prompt_width`` tokens (and mask) are equal; topk_ids [B, T, K] (top-K log-probs; no
    prefix sharing then). ``compiled`` runs the layer stack through ``torch.compile``.
    ``logits_from``: the first position whose log-prob (entropy, top-K) is computed; earlier
    positions hold 0 (see :func:`rlsuite.suite.policy.policy_forward`).

    With prefix sharing the response pass skips each row's right padding: rows are grouped by
    their real response length (:func:`buckets`) and every group runs at its own longest
    length; predictions at padded positions (which the loss mask excludes) are 0.
    """
    from rlsuite.suite.lora import BaseView

    if isinstance(model, BaseView):  # π_ref / π_init of a LoRA run: the policy with its adapters disabled
        with model.policy.disable_adapter():
            return fast_forward(model.policy, tokens, attn_mask, temperature, want, prompt_width, compiled, topk_ids,
                                logits_from)
    model = _hf(model)  # a LoRA policy's LoRA layers carry the adapters (:func:`_linear`)
    cfg = model.config
    n_heads = cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    eps = cfg.rms_norm_eps
    layers, norm_w = _layer_weights(model), model.model.norm.weight
    stack = _compiled_stack() if compiled else _stack
    B, T = tokens.shape
    s0 = min(max(int(logits_from), 1), T)  # the first position predicted
    pos = (attn_mask.long().cumsum(-1) - 1).clamp(min=0)
    want_topk = "topk" in want and topk_ids is not None
    plan = share_plan(tokens, attn_mask, 0 if want_topk else prompt_width)
    if plan is None:
        x = model.model.embed_tokens(tokens)
        cos, sin = model.model.rotary_emb(x, pos)
        h, _ = stack(x, cos, sin, _mask(attn_mask, T, 0, compiled), None, layers, norm_w, n_heads, n_kv, head_dim, eps,
                     n_kv != n_heads)
        logp, stats, topk = distribution_stats(model.lm_head(h[:, s0 - 1:-1]), tokens[:, s0:], temperature, want,
                                               topk_ids[:, s0:] if want_topk else None)
        pad = (s0, 0)
        return Forward(logp=F.pad(logp, pad), **{k: F.pad(v, pad) for k, v in stats.items()},
                       topk_logp=F.pad(topk, (0, 0, s0, 0)) if topk is not None else None)
    # one prompt pass per distinct prompt (row `first` of each), its keys/values indexed by `inv`;
    # one embedding call and (below) one LM-head call for the whole batch: the table's gradient is
    # formed once, not once per pass
    W, first, inv = plan
    dev = tokens.device
    emb = model.model.embed_tokens(tokens)
    p_tok, p_mask, p_pos = tokens[first, :W], attn_mask[first, :W], pos[first, :W]
    x = emb[first, :W]
    cos, sin = model.model.rotary_emb(x, p_pos)
    h_p, kv_p = stack(x, cos, sin, _mask(p_mask, W, 0, compiled), None, layers, norm_w, n_heads, n_kv, head_dim, eps,
                      n_kv != n_heads)
    # the response positions of every row, attending to [the group's prompt keys | their own],
    # in groups of rows of similar real length, each group cut to its longest row
    R = T - W
    real = attn_mask[:, W:].bool()
    lengths = torch.where(real, torch.arange(1, R + 1, device=dev), 0).amax(1).tolist()
    wanted = [k for k in POSITION_STATS if k in want]
    # the hidden states predicting a wanted position, with that position's (row, column) and token
    hs, at_row, at_col = [], [], []
    if s0 <= W:  # the last prompt position predicts each row's first response token
        hs.append(h_p[inv, -1])
        at_row.append(torch.arange(B, device=dev))
        at_col.append(torch.full((B,), W, dtype=torch.long, device=dev))
    q0 = max(s0, W + 1) - (W + 1)  # the first response prediction wanted, as an index into h_r
    for rows in buckets(lengths, pass_overhead(model)):
        S = max(1, lengths[rows[0]])
        idx = torch.tensor(rows, dtype=torch.long, device=dev)
        kv_rows = [(k[inv[idx]], v[inv[idx]]) for k, v in kv_p]
        x = emb[idx, W:W + S]
        cos, sin = model.model.rotary_emb(x, pos[idx, W:W + S])
        h_r, _ = stack(x, cos, sin, _mask(attn_mask[idx, :W + S], S, W), kv_rows, layers, norm_w, n_heads, n_kv,
                       head_dim, eps, n_kv != n_heads)
        if S - 1 > q0:  # predictions of positions W+1+q0 .. W+S-1 of these rows
            cols = torch.arange(W + 1 + q0, W + S, device=dev)
            hs.append(h_r[:, q0:S - 1].reshape(-1, h_r.shape[-1]))
            at_row.append(idx[:, None].expand(-1, cols.numel()).reshape(-1))
            at_col.append(cols[None].expand(idx.numel(), -1).reshape(-1))
    logp = h_p.new_zeros(B, T, dtype=torch.float32)  # statistics in fp32 for any weight dtype, as the HF path
    out = {k: h_p.new_zeros(B, T, dtype=torch.float32) for k in wanted}
    if hs:
        at_row, at_col = torch.cat(at_row), torch.cat(at_col)
        lp, st, _ = distribution_stats(model.lm_head(torch.cat(hs))[None], tokens[at_row, at_col][None], temperature,
                                       want, None)
        logp = logp.index_put((at_row, at_col), lp[0])
        out = {k: out[k].index_put((at_row, at_col), st[k][0]) for k in wanted}
    if s0 < W:  # prompt positions s0..W-1, once per prompt, copied to each of its rows
        lp, st, _ = distribution_stats(model.lm_head(h_p[:, s0 - 1:-1]), p_tok[:, s0:], temperature, want, None)
        logp = torch.cat([logp[:, :s0], lp[inv], logp[:, W:]], 1)
        out = {k: torch.cat([out[k][:, :s0], st[k][inv], out[k][:, W:]], 1) for k in wanted}
    return Forward(logp=logp, **out)
