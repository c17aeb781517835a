"""S3R: self-sparse speculative rollouts (a rollout-engine option, ``rollout.engine=s3r``).

The policy drafts γ tokens with *sparse* attention (each draft query attends only to a budget
of KV positions: the first ``sink`` tokens of its sequence plus the most recent ``window``
ones, itself included), then one *dense* forward over the newest committed token and the γ
drafts (γ + 1 positions, one call) verifies them
with the standard speculative-sampling rule (Leviathan et al. 2023; Chen et al. 2023): draft
token ``d ~ q`` is accepted with probability ``min(1, p(d)/q(d))``; at the first rejection the
next token is drawn from the residual ``norm(max(p − q, 0))``, and if all γ are accepted a
bonus token is drawn from the dense distribution after the last draft. Every emitted token is
therefore distributed exactly as dense sampling (same weights, same temperature, same top-p /
top-k truncation applied to both ``p`` and ``q``), and the recorded μ log-probs are the
*dense* model's (``log_softmax(logits / T)``, untruncated), so a rollout record means the same
thing as one from :class:`rlsuite.suite.engines.kv.KVSampler`. No IS correction is needed.

Pure functions (:func:`speculative_accept`, :func:`residual_distribution`,
:func:`exact_one_step_distribution`) state the rule on single distributions; they are what the
toy exactness test checks. :class:`S3RSampler` is a ``KVSampler`` that reuses its weights,
RMSNorm / RoPE helpers and prefill, and adds a forward over several tokens with *per-sample*
cache slots (samples accept different numbers of drafts, so each keeps its own write pointer;
rejected slots are simply overwritten next round: the static cache never needs copying).

Knobs: ``gamma`` (draft length), ``sink`` and ``window`` (the sparse budget, ``sink + window``
keys per draft query), ``residual`` (``False`` = the negative control: on rejection sample
from ``p`` instead of the residual; the output is then ``min(p, q) + (1 − Σ min(p, q)) · p``,
which over-samples the tokens the draft over-proposes, i.e. it is *not* exact),
``share_prefill`` (run the prefill once per distinct prompt, e.g. once per GRPO group, and copy
its cache rows; exact). After each ``generate`` the attribute ``last_stats`` holds the
acceptance rate, mean accepted drafts per block, tokens emitted per verify pass and forward
counts; ``total_stats`` accumulates them until ``reset_stats()``.

Speed: the draft costs the same weight reads and matmul FLOPs as a dense decode step; only its
attention is cheaper (O(sink + window) instead of O(context)). A speed-up therefore needs
decoding whose cost is dominated by attention over a long KV cache (long contexts, large
batches, memory-bound accelerators); see ``benchmarks/s3r.py``.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.engines.base import GenOutput, SamplingParams, _StopTracker, left_pad
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.sampling import truncate_logits
from rlsuite.suite.engine_traits import TRAITS

# ----------------------------------------------------------------------------------------
# The rule on single distributions.


def speculative_accept(p_target: Tensor, q_draft: Tensor, token: int, u: float) -> bool:
    """Accept draft ``token`` (drawn from ``q_draft``) iff ``u < p(token) / q(token)``, u ~ U[0, 1).

    Written as ``u · q < p`` (no division; a token with p = 0 is never accepted)."""
    return bool(float(u) * float(q_draft[token]) < float(p_target[token]))


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """``norm(max(p − q, 0))`` (over the last dim); ``p`` itself where p ≤ q everywhere (then a
    rejection has probability 0 and the residual is never used)."""
    r = (p - q).clamp(min=0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp(min=torch.finfo(r.dtype).tiny), p)


def exact_one_step_distribution(p: Tensor, q: Tensor, residual: bool = True) -> Tensor:
    """The exact distribution of the token one speculative step emits: draft ``d ~ q``, accept
    with ``min(1, p/q)``, else resample from the residual (or from ``p`` when ``residual`` is
    False, the biased negative control):

    ``q · min(1, p/q) + (1 − Σ min(p, q)) · residual``  (= ``p`` when ``residual``)."""
    accepted = torch.minimum(p, q)  # q · min(1, p/q), with 0/0 := 0
    reject = (1 - accepted.sum(-1, keepdim=True)).clamp(min=0)
    return accepted + reject * (residual_distribution(p, q) if residual else p)


def _gumbel_pick(logw: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """Sample one index per row of ``logw [..., V]`` (unnormalised log-weights, −inf allowed)
    by Gumbel-max; noise from ``generator`` on the CPU, as ``suite.engines.sampling.sample_step``."""
    u = torch.rand(logw.shape, generator=generator, device="cpu").to(logw.device)
    return (logw - torch.log(-torch.log(u.clamp_(1e-20, 1.0)))).argmax(-1)


# ----------------------------------------------------------------------------------------
# The engine.

_COUNTS = ("rounds", "proposed", "accepted", "draft_forwards", "verify_forwards")


class S3RSampler(KVSampler):
    """Self-sparse speculative sampler: same weights for draft (sparse attention) and target
    (dense attention); output distribution identical to :class:`KVSampler`'s."""

    capabilities = KVSampler.capabilities
    traits = TRAITS["s3r"]  # its draft/verify draws are batch noise (rollout.rng=row is refused)

    def __init__(self, model, tokenizer, gamma: int = 4, sink: int = 4, window: int = 64,
                 residual: bool = True, share_prefill: bool = True) -> None:
        if gamma < 0 or sink < 0 or window < 1:
            raise ValueError(f"S3R needs gamma ≥ 0, sink ≥ 0, window ≥ 1 (got {gamma}, {sink}, {window})")
        super().__init__(model, tokenizer)
        self.gamma, self.sink, self.window, self.residual = gamma, sink, window, residual
        self.share_prefill = share_prefill
        self.last_stats: dict[str, float] = {}
        self._totals = dict.fromkeys(_COUNTS, 0)

    @property
    def total_stats(self) -> dict[str, float]:
        """The statistics of every ``generate`` since the last :meth:`reset_stats` (e.g. one
        rollout step, which may call ``generate`` once per turn)."""
        return self._finish(self._totals)

    def reset_stats(self) -> None:
        self._totals = dict.fromkeys(_COUNTS, 0)

    def stats(self) -> dict[str, float]:
        """The rollout metrics of :attr:`total_stats` (``rollout/s3r_*``)."""
        return {f"rollout/s3r_{k}": float(v) for k, v in self.total_stats.items()
                if k in ("acceptance_rate", "mean_accepted_length", "tokens_per_verify")}

    # -- a forward over S tokens with per-sample cache slots ---------------------------------
    def forward_tokens(self, ids: Tensor, pos: Tensor, cache: list[list[Tensor]], slot0: Tensor, pad: Tensor,
                       mode: str = "dense", want_attn: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """Logits ``[B, S, V]`` of every position of ``ids [B, S]``, written at cache slots
        ``slot0[b] + s``.

        The cache layout is the one ``KVSampler.generate`` builds: sample b's real tokens
        occupy slots ``pad[b] .. slot0[b] − 1`` contiguously (left padding before them), so a
        key's position is ``slot − pad[b]``. ``mode``: ``dense`` (all real keys up to the
        query), ``sparse`` (S = 1 only: the first ``sink`` and last ``window`` positions,
        gathered, so attention costs O(sink + window)), or ``sparse_mask`` (the same keys
        selected by a mask over the whole cache: the reference for ``sparse``). Returns
        (logits, attention concentration ``[B, S]`` averaged over layers, or None).
        """
        if mode not in ("dense", "sparse", "sparse_mask"):
            raise ValueError(f"unknown attention mode {mode!r}")
        w = self.w
        B, S = ids.shape
        dev = ids.device
        x = w["embed_tokens.weight"][ids]
        cos, sin = self._rope(pos)
        slots = slot0[:, None] + torch.arange(S, device=dev)  # [B, S]
        T = cache[0][0].shape[2]
        if mode == "sparse":
            if S != 1:
                raise ValueError("the gathered sparse forward drafts one token at a time (S = 1)")
            q_slot = slots[:, 0]
            sink_idx = pad[:, None] + torch.arange(self.sink, device=dev)  # [B, sink]
            win_idx = q_slot[:, None] - self.window + 1 + torch.arange(self.window, device=dev)  # [B, window]
            # a sink inside the window would be counted twice; past the query it does not exist
            sink_ok = (sink_idx <= q_slot[:, None]) & (sink_idx < q_slot[:, None] - self.window + 1)
            win_ok = win_idx >= pad[:, None]
            idx = torch.cat([sink_idx, win_idx], 1).clamp(0, T - 1)  # [B, K]
            ok = torch.cat([sink_ok, win_ok], 1)
            ok[:, -1] = True  # the query itself (also a left-padding query with no real key)
            allowed = ok[:, None, None, :]  # [B, 1, 1, K]
            rows = torch.arange(B, device=dev)[:, None]
        else:
            end = int(slots.max()) + 1
            key = torch.arange(end, device=dev)[None, None, :]  # [1, 1, end]
            qs = slots[:, :, None]  # [B, S, 1]
            allowed = (key >= pad[:, None, None]) & (key <= qs)
            if mode == "sparse_mask":
                kpos, qpos = key - pad[:, None, None], qs - pad[:, None, None]
                allowed = allowed & ((kpos < self.sink) | (kpos > qpos - self.window))
            allowed = (allowed | (key == qs))[:, None]  # [B, 1, S, end]
        bias = torch.zeros(allowed.shape, dtype=self.dtype, device=dev).masked_fill(~allowed, float("-inf")) \
            if want_attn else None
        widx = slots[:, None, :, None].expand(B, self.n_kv, S, self.head_dim)
        rep = self.n_heads // self.n_kv
        conc = []
        for i in range(self.n_layers):
            p = f"layers.{i}."
            h = self._rms(x, w[p + "input_layernorm.weight"])
            q = torch.nn.functional.linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = torch.nn.functional.linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = torch.nn.functional.linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = self._rot(q.view(B, S, self.n_heads, self.head_dim).transpose(1, 2), cos, sin)
            k = self._rot(k.view(B, S, self.n_kv, self.head_dim).transpose(1, 2), cos, sin)
            v = v.view(B, S, self.n_kv, self.head_dim).transpose(1, 2)
            cache[i][0].scatter_(2, widx, k)
            cache[i][1].scatter_(2, widx, v)
            if mode == "sparse":
                kk, vv = cache[i][0][rows, :, idx].transpose(1, 2), cache[i][1][rows, :, idx].transpose(1, 2)
            else:
                kk, vv = cache[i][0][:, :, :end], cache[i][1][:, :, :end]
            if rep > 1:
                kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
            if want_attn:  # explicit weights (as KVSampler.forward), for the concentration statistic
                scores = (q @ kk.transpose(-1, -2)) / math.sqrt(self.head_dim) + bias
                attn = torch.softmax(scores.float(), -1).to(self.dtype)
                a = attn.float().clamp(min=1e-12)  # [B, H, S, keys]
                n_keys = allowed[:, 0].sum(-1).float().clamp(min=2)  # [B, S]
                conc.append(-(a * a.log()).sum(-1).mean(1) / n_keys.log())
                o = attn @ vv
            else:  # fused kernel; every row has at least its own key, so no row is empty
                o = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=allowed)
            o = o.transpose(1, 2).reshape(B, S, -1)
            x = x + torch.nn.functional.linear(o, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
            h = self._rms(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.linear(h, w[p + "mlp.gate_proj.weight"], w.get(p + "mlp.gate_proj.bias"))
            u = torch.nn.functional.linear(h, w[p + "mlp.up_proj.weight"], w.get(p + "mlp.up_proj.bias"))
            x = x + torch.nn.functional.linear(self.act(g) * u, w[p + "mlp.down_proj.weight"],
                                               w.get(p + "mlp.down_proj.bias"))
        x = self._rms(x, w["norm.weight"])
        logits = torch.nn.functional.linear(x, w["lm_head.weight"])
        return logits, (torch.stack(conc).mean(0) if want_attn else None)

    # -- distributions -------------------------------------------------------------------
    @staticmethod
    def _dists(logits: Tensor, params: SamplingParams) -> tuple[Tensor, Tensor]:
        """(μ log-probs = log_softmax(logits/T) untruncated, the sampled distribution's
        log-probs: truncated by top-p / top-k; at T = 0 a one-hot on the argmax, so the same
        acceptance rule reduces to "accept iff the draft is the dense argmax")."""
        shape = logits.shape
        flat = logits.reshape(-1, shape[-1]).float()
        if params.temperature == 0:
            logp_all = torch.log_softmax(flat, -1)
            onehot = torch.full_like(flat, float("-inf")).scatter_(-1, flat.argmax(-1, keepdim=True), 0.0)
            return logp_all.view(shape), onehot.view(shape)
        scaled = flat / params.temperature
        logp_all = torch.log_softmax(scaled, -1)
        trunc = torch.log_softmax(truncate_logits(scaled, params.top_p, params.top_k), -1)
        return logp_all.view(shape), trunc.view(shape)

    # -- generation ----------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        """Same contract as :meth:`KVSampler.generate` (ids, dense μ log-probs, truncated
        log-probs, stops, top-K, attention concentration of the dense pass)."""
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        stats = dict.fromkeys(_COUNTS, 0)
        if not prompts or any(len(p) == 0 for p in prompts):
            # no last prompt token to draft from: plain dense sampling (the same distribution)
            out = super().generate(prompts, params, generator, want_attn, limits)
            self._record(stats)
            return out
        track = _StopTracker(len(prompts), params, self.tok, limits)
        ids, mask = left_pad(prompts, self.tok.pad_token_id or 0, self.device)
        B, W = ids.shape
        n_new = max(limits)
        self._check_window(W + n_new)
        dev = self.device
        cache = [[torch.zeros(B, self.n_kv, W + n_new + self.gamma, self.head_dim, dtype=self.dtype, device=dev)
                  for _ in range(2)] for _ in range(self.n_layers)]
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        pad = W - mask.sum(-1)  # [B] first real slot
        if W > 1:  # dense prefill of all but the last prompt token (it opens the first draft)
            self._prefill(ids, pos, mask, cache)
        last = ids[:, -1]  # the newest token, not yet in the cache
        ptr = torch.full((B,), W - 1, dtype=torch.long, device=dev)  # its slot
        last_pos = pos[:, -1]
        cols = torch.arange(self.gamma + 1, device=dev)
        while not all(track.done):
            active = [not d for d in track.done]
            room = max(lim - len(x) for lim, x, a in zip(track.limits, track.ids, active) if a)
            g = max(0, min(self.gamma, room - 1))  # drafts past every sample's cap are wasted
            drafts, q_logp = [], []
            tok = last
            for j in range(g):  # draft: sparse attention, one token at a time
                lg, _ = self.forward_tokens(tok[:, None], (last_pos + j)[:, None], cache, ptr + j, pad, "sparse")
                _, ql = self._dists(lg[:, 0], params)
                tok = _gumbel_pick(ql, generator)
                drafts.append(tok)
                q_logp.append(ql)
            seq = torch.stack([last] + drafts, 1)  # [B, g+1]
            lg, conc = self.forward_tokens(seq, last_pos[:, None] + cols[: g + 1], cache, ptr, pad, "dense",
                                           want_attn)  # verify: dense, all g+1 positions at once
            logp_all, p_logp = self._dists(lg, params)  # [B, g+1, V]
            p = p_logp.exp()
            if g:
                D = torch.stack(drafts, 1)  # [B, g]
                Q = torch.stack(q_logp, 1).exp()  # [B, g, V]
                pd = p[:, :g].gather(-1, D[..., None])[..., 0]
                qd = Q.gather(-1, D[..., None])[..., 0]
                u = torch.rand((B, g), generator=generator, device="cpu").to(dev)
                acc = u * qd < pd
                k = acc.long().cumprod(1).sum(1)  # [B] accepted drafts before the first rejection
                Qk = torch.cat([Q, torch.zeros_like(Q[:, :1])], 1)[torch.arange(B, device=dev), k]
            else:
                D = torch.zeros((B, 0), dtype=torch.long, device=dev)
                k = torch.zeros(B, dtype=torch.long, device=dev)
                Qk = torch.zeros_like(p[:, 0])
            Pk = p[torch.arange(B, device=dev), k]  # [B, V] dense distribution at the first unaccepted slot
            rejected = (k < g)[:, None]
            if self.residual:
                wgt = torch.where(rejected, residual_distribution(Pk, Qk), Pk)
            else:
                wgt = Pk  # negative control: biased
            final = _gumbel_pick(wgt.log(), generator)
            E = torch.cat([D, final[:, None]], 1)
            E[torch.arange(B, device=dev), k] = final  # emitted: D[:k], then final
            lp = logp_all.gather(-1, E[..., None])[..., 0]
            tlp = lp if params.temperature == 0 else p_logp.gather(-1, E[..., None])[..., 0]
            k_l = k.tolist()
            for j in range(g + 1):
                live = [a and j <= k_l[b] for b, a in enumerate(active)]
                self._add_masked(track, live, E[:, j], lp[:, j], tlp[:, j], logp_all[:, j],
                                 conc[:, j] if conc is not None else None)
            n_act = sum(active)
            stats["rounds"] += n_act
            stats["proposed"] += g * n_act
            stats["accepted"] += sum(kb for kb, a in zip(k_l, active) if a)
            stats["draft_forwards"] += g
            stats["verify_forwards"] += 1
            # advance samples still running; a finished one keeps its (in-range) slot and is ignored
            adv = torch.tensor([0 if d else kb + 1 for d, kb in zip(track.done, k_l)], dtype=torch.long, device=dev)
            ptr, last_pos, last = ptr + adv, last_pos + adv, final
        self._record(stats)
        return track.output(want_attn)

    def _record(self, stats: dict) -> None:
        self.last_stats = self._finish(stats)
        for k in _COUNTS:
            self._totals[k] += stats[k]

    def _prefill(self, ids: Tensor, pos: Tensor, mask: Tensor, cache: list[list[Tensor]]) -> None:
        """Dense forward of ``ids[:, :-1]`` into cache slots [0, W−1). With ``share_prefill``,
        identical prompts (a GRPO group) are run once and their cache rows copied."""
        if not self.share_prefill:
            super().forward(ids[:, :-1], pos[:, :-1], cache, 0, mask)
            return
        uniq, inv = torch.unique(ids, dim=0, return_inverse=True)
        if uniq.shape[0] == ids.shape[0]:
            super().forward(ids[:, :-1], pos[:, :-1], cache, 0, mask)
            return
        first = torch.full((uniq.shape[0],), ids.shape[0], dtype=torch.long, device=ids.device)
        first.scatter_reduce_(0, inv, torch.arange(ids.shape[0], device=ids.device), "amin")
        W = ids.shape[1]
        small = [[torch.zeros(len(first), *c.shape[1:], dtype=self.dtype, device=ids.device) for c in layer]
                 for layer in cache]
        super().forward(ids[first, :-1], pos[first, :-1], small, 0, mask[first])
        for layer, slayer in zip(cache, small):
            for c, sc in zip(layer, slayer):
                c[:, :, : W - 1] = sc[inv, :, : W - 1]

    @staticmethod
    def _add_masked(track: _StopTracker, live: list[bool], *args) -> None:
        """``track.add`` for the samples in ``live`` only (the others emit nothing this column)."""
        saved = list(track.done)
        for b, on in enumerate(live):
            if not on:
                track.done[b] = True
        track.add(*args)
        for b, on in enumerate(live):
            if not on:
                track.done[b] = saved[b]

    @staticmethod
    def _finish(s: dict) -> dict[str, float]:
        """Counts → rates. ``rounds``: (sample, verify pass) pairs; ``acceptance_rate``:
        accepted / proposed drafts; ``mean_accepted_length``: accepted drafts per round;
        ``tokens_per_verify``: tokens emitted per round (accepted + the resampled / bonus one,
        before stop / cap truncation); ``draft_forwards`` / ``verify_forwards``: batched calls."""
        r = max(s["rounds"], 1)
        return {**s, "acceptance_rate": s["accepted"] / s["proposed"] if s["proposed"] else float("nan"),
                "mean_accepted_length": s["accepted"] / r, "tokens_per_verify": (s["accepted"] + s["rounds"]) / r}
