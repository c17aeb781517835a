"""Sampling one token: top-p/top-k truncation, the batch or row-invariant noise, one step."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.engines.base import SamplingParams


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
    scaled = logits.float()
    if params.temperature != 1.0:  # x / 1 == x exactly: skip the op
        scaled = scaled / params.temperature
    logp_all = torch.log_softmax(scaled, -1)
    truncated = params.top_p < 1.0 or bool(params.top_k and params.top_k < scaled.shape[-1])
    # without truncation the sampled distribution is μ's (the same log_softmax of the same input)
    trunc_logp = torch.log_softmax(truncate_logits(scaled, params.top_p, params.top_k), -1) if truncated else logp_all
    # Gumbel-max on the truncated distribution, noise from the run's generator only.
    if isinstance(generator, RowNoise):  # row-invariant noise (rollout.rng=row)
        tok = (trunc_logp.double() + generator.gumbel(trunc_logp.shape[-1], trunc_logp.device)).argmax(-1)
    else:
        u = torch.rand(trunc_logp.shape, generator=generator, device="cpu").to(trunc_logp.device)
        tok = (trunc_logp - u.clamp_(1e-20, 1.0).log_().neg_().log_()).argmax(-1)  # −log(−log u), in place
    lp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
    return tok, lp, (trunc_logp.gather(-1, tok[:, None]).squeeze(-1) if truncated else lp), logp_all

