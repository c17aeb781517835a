"""Rollout engines: a hand-written KV-cached sampler for Llama-style models and HF ``generate``.

Both engines *own their own copy of the weights* (``load_weights(state, version)``), so the
trainer decides when the behaviour policy μ catches up with the trained policy (the
staleness setting) and μ's log-probs are never confused with π_old's.

``generate(prompts, params, generator, want)`` takes token-id lists (one per sample) and
returns, per sample, the generated ids, μ's log-prob of each (log-softmax of logits /
temperature, *untruncated*), the log-prob under the truncated (top-p / top-k) distribution
actually sampled from, whether it stopped, and optionally top-K log-probs and the attention
concentration of each generated token (computed in the sampler's own forward, no second
pass). Randomness comes only from ``generator``.

``KVSampler`` supports ``llama``, ``mistral`` and ``qwen2`` architectures (RMSNorm, rotary
embeddings from the model's own ``inv_freq``, grouped-query attention, SwiGLU, optional
q/k/v biases); its logits equal the HF forward's (tested). ``HFGenerateEngine`` works for any
causal LM. ``rollout.engine=vllm`` is :class:`suite.vllm_engine.VLLMEngine` (CUDA, the ``vllm``
extra; untested here).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
from torch import Tensor

KV_ARCHITECTURES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    """0 = greedy."""
    top_p: float = 1.0
    top_k: int = 0
    stop_ids: tuple[int, ...] = ()
    """Token ids that end a sample (EOS); the stop token is kept in the output."""
    stop_strings: tuple[str, ...] = ()
    """Strings that end a turn (multi-turn tools); checked on the decoded tail."""
    topk: int = 0
    """Record the top-K behaviour log-probs of every generated token (0 = off)."""


@dataclass
class GenOutput:
    """Per-sample results of one ``generate`` call (lists of length B)."""

    ids: list[list[int]]
    logp: list[list[float]]
    trunc_logp: list[list[float]]
    stopped: list[bool]
    """True when the sample ended on a stop token or stop string (not the length cap)."""
    stop_reason: list[str] = field(default_factory=list)
    """'eos', 'string' or 'length'."""
    topk_ids: Optional[list[Tensor]] = None
    topk_logp: Optional[list[Tensor]] = None
    attn_stat: Optional[list[list[float]]] = None


def truncate_logits(logits: Tensor, top_p: float, top_k: int) -> Tensor:
    """Mask logits outside the top-k / nucleus set with −inf. Shapes: [B, V] → [B, V]."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, -1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, -1, descending=True)
        probs = torch.softmax(sorted_logits, -1)
        remove = probs.cumsum(-1) - probs > top_p  # keep the smallest prefix with mass ≥ top_p
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return logits


def _signed64(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_SM_GAMMA, _SM_MUL1, _SM_MUL2 = (_signed64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _srl(x: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def splitmix64(x: Tensor) -> Tensor:
    """splitmix64 (Steele et al. 2014) of int64 tensors, elementwise: ``x + γ`` then the
    finaliser; wrapping 64-bit arithmetic, so it is bit-identical on every device."""
    x = x + _SM_GAMMA
    x = (x ^ _srl(x, 30)) * _SM_MUL1
    x = (x ^ _srl(x, 27)) * _SM_MUL2
    return x ^ _srl(x, 31)


class RowNoise:
    """Counter-based sampling noise that does not depend on the batch a row is sampled in.

    The uniform for (row ``r``, token position ``t``, vocab id ``v``) is a hash of
    ``(key, r, t, v)``: ``s = sm(sm(sm(key) ^ r) ^ t)``, ``u = (sm(s + v·γ) >> 11 + ½)·2⁻⁵³``
    (``sm`` = :func:`splitmix64`), so sampling a batch equals sampling any split of its rows
    separately — what data-parallel rollouts need (``rollout.rng=row``). ``rows`` are the
    global row ids of the samples in call order; ``offsets`` the token position each row
    starts at (its tokens so far in a multi-turn rollout). Each :meth:`gumbel` call is one
    token position further (one call per generated token, as ``KVSampler.generate`` does).
    """

    def __init__(self, key: int, rows: Sequence[int], offsets: Optional[Sequence[int]] = None) -> None:
        self.key = int(key) & ((1 << 63) - 1)
        self.rows = [int(r) for r in rows]
        self.offsets = [int(o) for o in offsets] if offsets is not None else [0] * len(self.rows)
        self.calls = 0

    def take(self, idx: Sequence[int], offsets: Optional[Sequence[int]] = None) -> "RowNoise":
        """The noise of rows ``idx`` (positions into ``rows``), starting at ``offsets``."""
        return RowNoise(self.key, [self.rows[i] for i in idx],
                        offsets if offsets is not None else [self.offsets[i] for i in idx])

    def uniform(self, n_vocab: int, device=None) -> Tensor:
        """``[B, V]`` float64 uniforms in (0, 1) for the next token position of every row."""
        rows = torch.tensor(self.rows, dtype=torch.long, device=device)
        pos = torch.tensor(self.offsets, dtype=torch.long, device=device) + self.calls
        self.calls += 1
        key = splitmix64(torch.full_like(rows, self.key))
        s = splitmix64(splitmix64(key ^ rows) ^ pos)  # [B]
        v = torch.arange(n_vocab, dtype=torch.long, device=device) * _SM_GAMMA  # wraps
        x = splitmix64(s[:, None] + v[None, :])
        return (_srl(x, 11).double() + 0.5) * 2.0 ** -53

    def gumbel(self, n_vocab: int, device=None) -> Tensor:
        """``[B, V]`` float64 standard Gumbel noise for the next token position."""
        return -torch.log(-torch.log(self.uniform(n_vocab, device)))


def sample_step(logits: Tensor, params: SamplingParams, generator):
    """Pick next tokens. Returns (tokens [B], μ logp [B], truncated logp [B], logp_all [B, V]).

    ``generator``: a ``torch.Generator`` (noise for the whole batch), a :class:`RowNoise`
    (noise per row, independent of the batch), or None (greedy only)."""
    if params.temperature == 0:
        logp_all = torch.log_softmax(logits.float(), -1)
        tok = logits.argmax(-1)
        lp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
        return tok, lp, lp, logp_all
    scaled = logits.float() / params.temperature
    logp_all = torch.log_softmax(scaled, -1)
    trunc = truncate_logits(scaled, params.top_p, params.top_k)
    trunc_logp = torch.log_softmax(trunc, -1)
    # Gumbel-max on the truncated distribution, noise from the run's generator only.
    if isinstance(generator, RowNoise):  # row-invariant noise (rollout.rng=row)
        tok = (trunc_logp.double() + generator.gumbel(trunc.shape[-1], trunc.device)).argmax(-1)
    else:
        u = torch.rand(trunc.shape, generator=generator, device="cpu").to(trunc.device)
        tok = (trunc_logp - torch.log(-torch.log(u.clamp_(1e-20, 1.0)))).argmax(-1)
    return tok, logp_all.gather(-1, tok[:, None]).squeeze(-1), trunc_logp.gather(-1, tok[:, None]).squeeze(-1), logp_all


class _StopTracker:
    """Per-sample stop bookkeeping shared by the engines."""

    def __init__(self, n: int, params: SamplingParams, tokenizer, limits: Sequence[int]) -> None:
        self.params, self.tok = params, tokenizer
        self.limits = list(limits)
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.logp: list[list[float]] = [[] for _ in range(n)]
        self.trunc: list[list[float]] = [[] for _ in range(n)]
        self.attn: list[list[float]] = [[] for _ in range(n)]
        self.topk_ids: list[list[Tensor]] = [[] for _ in range(n)]
        self.topk_lp: list[list[Tensor]] = [[] for _ in range(n)]
        self.reason = ["length"] * n
        self.done = [lim <= 0 for lim in self.limits]
        self.stop_ids = set(params.stop_ids)

    def add(self, tok: Tensor, lp: Tensor, tlp: Tensor, logp_all: Tensor, attn: Optional[Tensor]) -> None:
        toks, lps, tlps = tok.tolist(), lp.tolist(), tlp.tolist()
        attn_l = attn.tolist() if attn is not None else None
        if self.params.topk:
            tv, ti = torch.topk(logp_all, self.params.topk, -1)
        for b, t in enumerate(toks):
            if self.done[b]:
                continue
            self.ids[b].append(t)
            self.logp[b].append(lps[b])
            self.trunc[b].append(tlps[b])
            if attn_l is not None:
                self.attn[b].append(attn_l[b])
            if self.params.topk:
                self.topk_ids[b].append(ti[b].cpu())
                self.topk_lp[b].append(tv[b].float().cpu())
            if t in self.stop_ids:
                self.done[b], self.reason[b] = True, "eos"
            elif self.params.stop_strings and self._hit_string(b):
                self.done[b], self.reason[b] = True, "string"
            elif len(self.ids[b]) >= self.limits[b]:
                self.done[b] = True

    def _hit_string(self, b: int) -> bool:
        tail = self.tok.decode(self.ids[b][-16:])
        return any(tail.endswith(s) for s in self.params.stop_strings)

    def output(self, want_attn: bool) -> GenOutput:
        topk = bool(self.params.topk)
        return GenOutput(
            ids=self.ids, logp=self.logp, trunc_logp=self.trunc,
            stopped=[r != "length" for r in self.reason], stop_reason=self.reason,
            topk_ids=[torch.stack(x) if x else torch.zeros(0, self.params.topk, dtype=torch.long)
                      for x in self.topk_ids] if topk else None,
            topk_logp=[torch.stack(x) if x else torch.zeros(0, self.params.topk) for x in self.topk_lp] if topk else None,
            attn_stat=self.attn if want_attn else None,
        )


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    """Left-pad token lists → (ids [B, W], mask [B, W])."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, p in enumerate(prompts):
        if p:
            ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[b, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def _diag(rows: int, cols: int, offset: int, device) -> Tensor:
    """Bool [rows, cols] with True at (i, offset + i)."""
    d = torch.zeros(rows, cols, dtype=torch.bool, device=device)
    d[torch.arange(rows), offset + torch.arange(rows)] = True
    return d


class KVSampler:
    """Hand-written Llama-style forward with a static KV cache (its own weight copy)."""

    capabilities = frozenset({"behav_logp", "topk", "behav_attn_stat"})
    row_rng = True
    """Accepts :class:`RowNoise` as its generator (``rollout.rng=row``)."""

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
        self.act = torch.nn.functional.silu
        rot = model.model.rotary_emb
        self.inv_freq = rot.inv_freq.detach().clone().float()
        self.rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.version = 0
        self.w: dict[str, Tensor] = {}
        self.load_weights(model.state_dict(), 0)

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        """Copy ``state`` (a full or partial policy state dict) into the engine's own weights."""
        for k, v in state.items():
            key = k[len("model."):] if k.startswith("model.") else k
            self.w[key] = v.detach().to(self.device).clone()
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["embed_tokens.weight"]  # tied embeddings
        self.version = version

    def state(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.w.items()}

    # -- the forward -----------------------------------------------------------------
    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * weight

    def _rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        freqs = pos.float()[..., None] * self.inv_freq.to(pos.device)  # [B, S, D/2]
        emb = torch.cat([freqs, freqs], -1)
        return (emb.cos() * self.rope_scale).to(self.dtype)[:, None], (emb.sin() * self.rope_scale).to(self.dtype)[:, None]

    @staticmethod
    def _rot(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x.shape[-1] // 2
        rotated = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rotated * sin

    def forward(self, ids: Tensor, pos: Tensor, cache: list[list[Tensor]], start: int, key_mask: Tensor,
                want_attn: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """Logits of the last position for ``ids [B, S]`` written at cache slots [start, start+S).

        key_mask [B, start+S]: 1 for real keys (padding excluded). Returns (logits [B, V],
        attention concentration [B] of the last query, averaged over layers, or None).
        """
        w = self.w
        B, S = ids.shape
        x = w["embed_tokens.weight"][ids]
        cos, sin = self._rope(pos)
        end = start + S
        causal = torch.ones(S, end, dtype=torch.bool, device=ids.device).tril(start)
        allowed = causal[None, None] & key_mask[:, None, None, :end].bool()  # [B, 1, S, end]
        # A query on left padding has no real key; let it see itself so no row is all −inf
        # (a NaN there would poison the cache through 0·NaN in later attention products).
        allowed = allowed | _diag(S, end, start, ids.device)[None, None]
        bias = torch.zeros(allowed.shape, dtype=self.dtype, device=ids.device).masked_fill(~allowed, float("-inf"))
        conc = []
        rep = self.n_heads // self.n_kv
        for i in range(self.n_layers):
            p = f"layers.{i}."
            h = self._rms(x, w[p + "input_layernorm.weight"])
            q = torch.nn.functional.linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = torch.nn.functional.linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = torch.nn.functional.linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = self._rot(q.view(B, S, self.n_heads, self.head_dim).transpose(1, 2), cos, sin)
            k = self._rot(k.view(B, S, self.n_kv, self.head_dim).transpose(1, 2), cos, sin)
            cache[i][0][:, :, start:end] = k
            cache[i][1][:, :, start:end] = v.view(B, S, self.n_kv, self.head_dim).transpose(1, 2)
            kk, vv = cache[i][0][:, :, :end], cache[i][1][:, :, :end]
            if rep > 1:
                kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
            scores = (q @ kk.transpose(-1, -2)) / math.sqrt(self.head_dim) + bias
            attn = torch.softmax(scores.float(), -1).to(self.dtype)
            if want_attn:
                a = attn[:, :, -1].float().clamp(min=1e-12)
                n_keys = key_mask[:, :end].sum(-1).float().clamp(min=2)
                conc.append(-(a * a.log()).sum(-1).mean(1) / n_keys.log())
            o = (attn @ vv).transpose(1, 2).reshape(B, S, -1)
            x = x + torch.nn.functional.linear(o, w[p + "self_attn.o_proj.weight"])
            h = self._rms(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.linear(h, w[p + "mlp.gate_proj.weight"])
            u = torch.nn.functional.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + torch.nn.functional.linear(self.act(g) * u, w[p + "mlp.down_proj.weight"])
        x = self._rms(x[:, -1], w["norm.weight"])
        logits = torch.nn.functional.linear(x, w["lm_head.weight"])
        return logits, (torch.stack(conc).mean(0) if want_attn else None)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        """Sample continuations of ``prompts`` (lists of ids). ``limits``: per-sample token caps
        (default ``params.max_new_tokens``)."""
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        track = _StopTracker(len(prompts), params, self.tok, limits)
        ids, mask = left_pad(prompts, self.tok.pad_token_id or 0, self.device)
        B, W = ids.shape
        n_new = max(limits) if limits else 0
        total = W + n_new
        cache = [[torch.zeros(B, self.n_kv, total, self.head_dim, dtype=self.dtype, device=self.device)
                  for _ in range(2)] for _ in range(self.n_layers)]
        key_mask = torch.cat([mask, torch.ones(B, n_new, dtype=torch.long, device=self.device)], 1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, attn = self.forward(ids, pos, cache, 0, key_mask, want_attn)
        next_pos = pos[:, -1] + 1
        for i in range(n_new):
            tok, lp, tlp, logp_all = sample_step(logits, params, generator)
            track.add(tok, lp, tlp, logp_all, attn)
            if all(track.done) or i == n_new - 1:
                break
            logits, attn = self.forward(tok[:, None], next_pos[:, None], cache, W + i, key_mask, want_attn)
            next_pos = next_pos + 1
        return track.output(want_attn)


class HFGenerateEngine:
    """The general fallback: HF ``generate`` on the engine's own copy of the model."""

    capabilities = frozenset({"behav_logp", "topk"})

    def __init__(self, model, tokenizer) -> None:
        self.model = copy.deepcopy(model).eval()
        self.tok = tokenizer
        self.device = next(model.parameters()).device
        self.version = 0

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        self.model.load_state_dict(state, strict=False)
        self.version = version

    def state(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        if want_attn:
            raise ValueError("HF generate cannot return attention statistics; use rollout.engine=kv")
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        track = _StopTracker(len(prompts), params, self.tok, limits)
        ids, mask = left_pad(prompts, self.tok.pad_token_id or 0, self.device)
        n_new = max(limits)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item()) if generator is not None else 0
        gc = copy.deepcopy(self.model.generation_config)
        gc.update(max_new_tokens=n_new, do_sample=params.temperature > 0, temperature=params.temperature or 1.0,
                  top_p=params.top_p, top_k=params.top_k, pad_token_id=self.tok.pad_token_id,
                  eos_token_id=list(params.stop_ids) or None, return_dict_in_generate=True, output_logits=True)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        gen = out.sequences[:, ids.shape[1]:]
        for i, raw in enumerate(out.logits):
            scaled = raw.float() / (params.temperature or 1.0)
            logp_all = torch.log_softmax(scaled, -1)
            tok = gen[:, i]
            lp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
            trunc = torch.log_softmax(truncate_logits(scaled, params.top_p, params.top_k), -1) \
                if params.temperature else logp_all
            track.add(tok, lp, trunc.gather(-1, tok[:, None]).squeeze(-1), logp_all, None)
        return track.output(False)


def make_engine(kind: str, model, tokenizer, rollout=None):
    """``kv`` / ``hf`` / ``s3r`` / ``vllm`` / ``auto`` (kv for supported architectures, else hf)."""
    if kind == "vllm":
        from suite.vllm_engine import VLLMEngine  # imports vllm itself; BadInput when it or a GPU is missing

        return VLLMEngine(model, tokenizer, rollout)
    if kind == "s3r":
        from suite.speculative import S3RSampler

        kw = dict(gamma=rollout.s3r_gamma, sink=rollout.s3r_sink, window=rollout.s3r_window) if rollout else {}
        return S3RSampler(model, tokenizer, **kw)
    if kind == "kv" or (kind == "auto" and getattr(model.config, "model_type", None) in KV_ARCHITECTURES):
        return KVSampler(model, tokenizer)
    return HFGenerateEngine(model, tokenizer)
