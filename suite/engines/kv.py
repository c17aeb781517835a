"""``rollout.engine=kv``: a hand-written KV-cached sampler for Llama-style models.

``KVSampler`` supports ``llama``, ``mistral`` and ``qwen2`` architectures (RMSNorm, rotary
embeddings from the model's own ``inv_freq``, grouped-query attention, SwiGLU, optional
q/k/v, output and MLP biases); its logits equal the HF forward's (tested). The attention
concentration of each generated token is computed in the sampler's own forward (no second pass).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.engines.base import (KV_ARCHITECTURES, GenOutput, NoStats, SamplingParams, _StopTracker,
                                        _TensorTracker, left_pad)
from rlsuite.suite.engines.sampling import sample_step
from rlsuite.suite.errors import BadInput
from rlsuite.suite.engine_traits import TRAITS


def _diag(rows: int, cols: int, offset: int, device) -> Tensor:
    """Bool [rows, cols] with True at (i, offset + i)."""
    d = torch.zeros(rows, cols, dtype=torch.bool, device=device)
    d[torch.arange(rows), offset + torch.arange(rows)] = True
    return d


class KVSampler(NoStats):
    """Hand-written Llama-style forward with a static KV cache (its own weight copy).

    Speed (decoding is dominated by per-op overhead at small sizes): q/k/v and gate/up are
    fused into one matrix each at ``load_weights`` time (the per-name weights in ``w`` are
    views of the fused ones, so ``state()`` still returns the original state dict), RMSNorm
    is ``torch.nn.functional.rms_norm``, RoPE reads cos/sin from a table indexed by position
    and rotates q and k in one pass, attention is ``scaled_dot_product_attention`` with a
    boolean mask (the explicit softmax is kept when the attention statistic is requested),
    and ``generate`` keeps per-token results as tensors, converting them to lists once."""

    capabilities = frozenset({"behav_logp", "topk", "behav_attn_stat"})
    traits = TRAITS["kv"]
    """Accepts :class:`RowNoise` as its generator (``rollout.rng=row``)."""
    compact_frac = 0.25
    """``generate`` drops finished samples from the decode forward once they are this fraction
    of the rows it computes."""

    def __init__(self, model, tokenizer) -> None:
        cfg = model.config
        if getattr(cfg, "model_type", None) not in KV_ARCHITECTURES:
            raise ValueError(f"KVSampler supports {KV_ARCHITECTURES}, not {cfg.model_type!r}")
        self.tok = tokenizer
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        from transformers.activations import ACT2FN

        self.act = ACT2FN[getattr(cfg, "hidden_act", "silu")]  # the model's own MLP activation
        # sliding-window attention (Mistral; Qwen2 with sliding layers): the sampler attends to
        # every key, so a sequence longer than the window is refused
        from rlsuite.suite.fast_forward import sliding_window

        self.attention_window = sliding_window(cfg)
        rot = model.model.rotary_emb
        self.inv_freq = rot.inv_freq.detach().clone().float()
        self.rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.version = 0
        self.w: dict[str, Tensor] = {}
        self._layers: list[tuple] = []
        self._rope_table: Optional[tuple[Tensor, Tensor]] = None
        self.load_weights(model.state_dict(), 0)

    _QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    _GATE_UP = ("mlp.gate_proj", "mlp.up_proj")

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        """Copy ``state`` (a full or partial policy state dict) into the engine's own weights.
        Weights it already holds with the same shape and dtype are overwritten in place (the
        fused tensors they are views of included), so a step's sync is one copy per tensor."""
        new = False
        for k, v in state.items():
            key = k[len("model."):] if k.startswith("model.") else k
            cur = self.w.get(key)
            tied = key == "lm_head.weight" and cur is not None and cur is self.w.get("embed_tokens.weight")
            if cur is not None and not tied and cur.shape == v.shape and cur.dtype == v.dtype:
                cur.copy_(v.detach())
            else:
                self.w[key] = v.detach().to(self.device).clone()
                new = True
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["embed_tokens.weight"]  # tied embeddings
        if new:
            self._fuse()
        else:
            self._refresh()
        self.version = version

    def _refresh(self) -> None:
        """After an in-place weight load: update whatever is derived from the weights (the fused
        tensors are views-sharing already; subclasses with copies of their own override this)."""

    _linear = staticmethod(torch.nn.functional.linear)
    """The forward's matmul ``(x, weight, bias)`` on the engine's weight tensors (the subclass of
    ``rollout.engine=onednn`` runs it on packed copies of them)."""

    def _fuse(self) -> None:
        """Concatenate q/k/v (and their biases) and gate/up per layer; the per-name entries of
        ``w`` become row slices (views) of the fused tensors, so nothing is stored twice."""
        w, layers = self.w, []
        for i in range(self.n_layers):
            p = f"layers.{i}."
            qkv_w, qkv_b = self._fuse_rows(p, self._QKV)
            gu_w, gu_b = self._fuse_rows(p, self._GATE_UP)  # gu_b: Llama with mlp_bias=True
            # o_proj / down_proj biases: Llama with attention_bias=True / mlp_bias=True (None otherwise)
            layers.append((w[p + "input_layernorm.weight"], qkv_w, qkv_b, w[p + "self_attn.o_proj.weight"],
                           w.get(p + "self_attn.o_proj.bias"), w[p + "post_attention_layernorm.weight"], gu_w, gu_b,
                           w[p + "mlp.down_proj.weight"], w.get(p + "mlp.down_proj.bias")))
        self._layers = layers

    def _fuse_rows(self, p: str, names: Sequence[str]) -> tuple[Tensor, Optional[Tensor]]:
        """The weights of projections ``names`` of layer ``p`` stacked by rows, and their biases
        (zeros for a projection without one; None when none has one); each per-name entry of
        ``w`` becomes its row slice of the fused tensors."""
        w = self.w
        parts = [w[p + n + ".weight"] for n in names]
        fused_w = torch.cat(parts)
        fused_b = None
        if any(p + n + ".bias" in w for n in names):
            fused_b = torch.cat([w[p + n + ".bias"] if p + n + ".bias" in w else fused_w.new_zeros(x.shape[0])
                                 for n, x in zip(names, parts)])
        off = 0
        for n, x in zip(names, parts):
            r = x.shape[0]
            w[p + n + ".weight"] = fused_w[off:off + r]
            if fused_b is not None and p + n + ".bias" in w:
                w[p + n + ".bias"] = fused_b[off:off + r]
            off += r
        return fused_w, fused_b

    def state(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.w.items()}

    # -- the forward -----------------------------------------------------------------
    def _check_window(self, total: int) -> None:
        if self.attention_window is not None and total > self.attention_window:
            raise BadInput(f"sequence width {total} exceeds the model's sliding window {self.attention_window}; "
                           f"the kv and s3r samplers attend to every key, so use rollout.engine=hf for such lengths")

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * weight

    def _norm(self, x: Tensor, weight: Tensor) -> Tensor:
        """RMSNorm (HF's: in float32, then cast, then scaled by the weight)."""
        if x.dtype == torch.float32:
            return torch.nn.functional.rms_norm(x, weight.shape, weight, self.eps)
        return self._rms(x, weight)

    def _rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        freqs = pos.float()[..., None] * self.inv_freq.to(pos.device)  # [B, S, D/2]
        emb = torch.cat([freqs, freqs], -1)
        return ((emb.cos() * self.rope_scale).to(self.dtype)[:, None],
                (emb.sin() * self.rope_scale).to(self.dtype)[:, None])

    @staticmethod
    def _rot(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x.shape[-1] // 2
        rotated = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rotated * sin

    def _rope_rows(self, n: int) -> tuple[Tensor, Tensor]:
        """cos and *signed* sin tables ``[≥n, head_dim]`` for positions 0..n−1 (the values of
        :meth:`_rope`; the signed sin is −sin on the first half, so rotating is
        ``x·cos + roll(x, D/2)·sin_signed``, bit-identical to :meth:`_rot`)."""
        if self._rope_table is None or self._rope_table[0].shape[0] < n:
            n = max(n, 256)
            cos, sin = self._rope(torch.arange(n, device=self.device)[None])  # [1, 1, n, D]
            cos, sin = cos[0, 0], sin[0, 0]
            h = sin.shape[-1] // 2
            self._rope_table = (cos, torch.cat([-sin[:, :h], sin[:, h:]], -1))
        return self._rope_table

    def forward(self, ids: Tensor, pos: Tensor, cache: list[list[Tensor]], start: int, key_mask: Tensor,
                want_attn: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """Logits of the last position for ``ids [B, S]`` written at cache slots [start, start+S).

        key_mask [B, start+S]: 1 for real keys (padding excluded). Returns (logits [B, V],
        attention concentration [B] of the last query, averaged over layers, or None).
        """
        S = ids.shape[1]
        end = start + S
        causal = torch.ones(S, end, dtype=torch.bool, device=ids.device).tril(start)
        allowed = causal[None, None] & key_mask[:, None, None, :end].bool()  # [B, 1, S, end]
        # A query on left padding has no real key; let it see itself so no row is all −inf
        # (a NaN there would poison the cache through 0·NaN in later attention products).
        allowed = allowed | _diag(S, end, start, ids.device)[None, None]
        self._rope_rows(int(pos.max()) + 1 if pos.numel() else 1)
        return self._forward(ids, pos, cache, start, allowed, key_mask, want_attn)

    def _forward(self, ids: Tensor, pos: Tensor, cache: list[list[Tensor]], start: int, allowed: Tensor,
                 key_mask: Tensor, want_attn: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """:meth:`forward` with the attention mask ``allowed [B, 1, S, end]`` already built
        (bool; every query has at least one allowed key)."""
        w = self.w
        B, S = ids.shape
        end = start + S
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        x = torch.nn.functional.embedding(ids, w["embed_tokens.weight"])
        cos_t, sin_t = self._rope_table  # covers every position (forward / generate build it)
        cos, sin = cos_t[pos][:, :, None], sin_t[pos][:, :, None]  # [B, S, 1, D]
        half = hd // 2
        if want_attn:
            bias = torch.zeros(allowed.shape, dtype=self.dtype, device=ids.device).masked_fill(~allowed, float("-inf"))
            n_keys = key_mask[:, :end].sum(-1).float().clamp(min=2)
        conc = []
        rep = nh // nkv
        linear = self._linear
        for i, (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gu_w, gu_b, down_w, down_b) in enumerate(self._layers):
            qkv = linear(self._norm(x, ln1), qkv_w, qkv_b).view(B, S, nh + 2 * nkv, hd)
            qk = qkv[:, :, :nh + nkv]
            qk = qk * cos + torch.roll(qk, half, -1) * sin  # RoPE on q and k at once
            q = qk[:, :, :nh].transpose(1, 2)
            cache[i][0][:, :, start:end] = qk[:, :, nh:].transpose(1, 2)
            cache[i][1][:, :, start:end] = qkv[:, :, nh + nkv:].transpose(1, 2)
            kk, vv = cache[i][0][:, :, :end], cache[i][1][:, :, :end]
            if want_attn:  # explicit weights for the concentration statistic
                if rep > 1:
                    kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
                scores = (q @ kk.transpose(-1, -2)) / math.sqrt(hd) + bias
                attn = torch.softmax(scores.float(), -1).to(self.dtype)
                a = attn[:, :, -1].float().clamp(min=1e-12)
                conc.append(-(a * a.log()).sum(-1).mean(1) / n_keys.log())
                o = attn @ vv
            else:  # fused kernel; every query has at least its own key
                o = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=allowed,
                                                                     enable_gqa=rep > 1)
            x = x + linear(o.transpose(1, 2).reshape(B, S, -1), o_w, o_b)
            g, u = linear(self._norm(x, ln2), gu_w, gu_b).chunk(2, -1)
            x = x + linear(self.act(g) * u, down_w, down_b)
        x = self._norm(x[:, -1], w["norm.weight"])
        logits = linear(x, w["lm_head.weight"])
        return logits, (torch.stack(conc).mean(0) if want_attn else None)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        """Sample continuations of ``prompts`` (lists of ids). ``limits``: per-sample token caps
        (default ``params.max_new_tokens``).

        Identical prompts (a GRPO group) share one prefill. Samples that have finished are
        dropped from the forward once enough of them accumulate (``compact_frac`` of the rows
        computed); sampling still sees every row, so the noise each row gets is unchanged."""
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        ids, mask = left_pad(prompts, self.tok.pad_token_id or 0, self.device)
        B, W = ids.shape
        n_new = max(limits) if limits else 0
        total = W + n_new
        self._check_window(total)
        key_mask = torch.cat([mask, torch.ones(B, n_new, dtype=torch.long, device=self.device)], 1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        self._rope_rows(total)
        cache, logits, attn = self._shared_prefill(prompts, ids, pos, key_mask, total, want_attn)
        return self._decode(params, generator, want_attn, limits, cache, logits, attn, key_mask, pos[:, -1:] + 1, W)

    def _decode(self, params: SamplingParams, generator, want_attn: bool, limits: list[int], cache: list[list[Tensor]],
                logits: Tensor, attn: Optional[Tensor], key_mask: Tensor, next_pos: Tensor, W: int) -> GenOutput:
        """The token loop of :meth:`generate` after the prefill: ``logits [B, V]`` of the last
        prompt position, ``cache`` filled up to slot W, ``key_mask [B, W + max(limits)]``,
        ``next_pos [B, 1]`` the position of the first new token."""
        B, n_new = key_mask.shape[0], max(limits) if limits else 0
        # generated slots are real keys, so a decode step's mask is the key mask itself
        allowed = key_mask.bool()[:, None, None, :]
        track = _StopTracker(B, params, self.tok, limits) if params.stop_strings \
            else _TensorTracker(B, params, limits, self.device)
        rows: Optional[Tensor] = None  # the rows the forward computes (None: all B)
        km = key_mask
        for i in range(n_new):
            tok, lp, tlp, logp_all = sample_step(logits, params, generator)
            track.add(tok, lp, tlp, logp_all, attn)
            if i == n_new - 1:
                break
            live = ~track.done_mask().to(self.device)
            n_live = int(live.sum())
            if n_live == 0:
                break
            n_rows = B if rows is None else rows.numel()
            if n_rows - n_live >= max(1, int(self.compact_frac * n_rows)):  # drop finished rows
                keep = (live if rows is None else live[rows]).nonzero().squeeze(1)
                rows = keep if rows is None else rows[keep]
                for layer in cache:  # one layer's tensor at a time: the old one is freed as its copy lands
                    layer[0], layer[1] = layer[0][keep], layer[1][keep]
                allowed, next_pos, km = allowed[keep], next_pos[keep], km[keep]
            step_ids = tok[:, None] if rows is None else tok[rows][:, None]
            out, at = self._forward(step_ids, next_pos, cache, W + i, allowed[..., :W + i + 1], km, want_attn)
            if rows is None:
                logits, attn = out, at
            else:  # finished rows keep stale values: sampled, never recorded
                logits = logits.index_copy(0, rows, out)
                attn = attn.index_copy(0, rows, at) if at is not None else None
            next_pos = next_pos + 1
        return track.output(want_attn)

    def _shared_prefill(self, prompts: Sequence[Sequence[int]], ids: Tensor, pos: Tensor, key_mask: Tensor,
                        total: int, want_attn: bool) -> tuple[list[list[Tensor]], Tensor, Optional[Tensor]]:
        """The prompt forward into a new cache of ``total`` slots; identical prompts run once
        and their cache rows, logits and statistic are copied."""
        B = ids.shape[0]

        def new_cache(n: int) -> list[list[Tensor]]:
            return [[torch.zeros(n, self.n_kv, total, self.head_dim, dtype=self.dtype, device=self.device)
                     for _ in range(2)] for _ in range(self.n_layers)]

        first: dict[tuple[int, ...], int] = {}
        inv, uniq = [], []  # each row's prompt number; the first row of each distinct prompt
        for b, p in enumerate(prompts):
            j = first.setdefault(tuple(p), len(uniq))
            if j == len(uniq):
                uniq.append(b)
            inv.append(j)
        if len(uniq) == B:
            cache = new_cache(B)
            logits, attn = self.forward(ids, pos, cache, 0, key_mask, want_attn)
            return cache, logits, attn
        uniq = torch.tensor(uniq, dtype=torch.long, device=self.device)
        small = new_cache(len(first))
        logits, attn = self.forward(ids[uniq], pos[uniq], small, 0, key_mask[uniq], want_attn)
        inv_t = torch.tensor(inv, dtype=torch.long, device=self.device)
        for layer in small:  # expanded in place, layer by layer (peak: the small cache + one layer)
            layer[0], layer[1] = layer[0][inv_t], layer[1][inv_t]
        return small, logits[inv_t], attn[inv_t] if attn is not None else None

