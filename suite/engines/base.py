"""The rollout engine contract: one :class:`RolloutEngine` protocol and the shared output types.

Every engine *owns its own copy of the weights* (``load_weights(state, version)``), so the
trainer decides when the behaviour policy μ catches up with the trained policy (the
staleness setting) and μ's log-probs are never confused with π_old's.

``generate(prompts, params, generator, want_attn, limits)`` takes token-id lists (one per
sample) and returns, per sample, the generated ids, μ's log-prob of each (log-softmax of
logits / temperature, *untruncated*), the log-prob under the truncated (top-p / top-k)
distribution actually sampled from, whether it stopped, and optionally top-K log-probs and
the attention concentration of each generated token. Randomness comes only from ``generator``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

KV_ARCHITECTURES = ("llama", "mistral", "qwen2")
"""The architectures the hand-written KV forward (kv, native, s3r engines) supports."""



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



@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer, the rollout loop and the evaluator use of an engine."""

    capabilities: frozenset[str]
    """The per-token records it can produce besides ``behav_logp`` (``topk``, ``behav_attn_stat``)."""
    version: int
    """The policy version (updates) of the weights it samples with."""

    def load_weights(self, state: dict[str, Tensor], version: int) -> None: ...

    def state(self) -> dict[str, Tensor]: ...

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator=None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput: ...

    def stats(self) -> dict[str, float]:
        """The engine's own rollout metrics (named ``rollout/...``) since :meth:`reset_stats`."""
        ...

    def reset_stats(self) -> None: ...


class NoStats:
    """``stats``/``reset_stats`` of an engine without statistics of its own."""

    def stats(self) -> dict[str, float]:
        return {}

    def reset_stats(self) -> None:
        pass


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

    def done_mask(self) -> Tensor:
        return torch.tensor(self.done, dtype=torch.bool)

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
            topk_logp=[torch.stack(x) if x else torch.zeros(0, self.params.topk)
                       for x in self.topk_lp] if topk else None,
            attn_stat=self.attn if want_attn else None,
        )


class _TensorTracker:
    """:class:`_StopTracker`'s bookkeeping for stop ids and length caps (no stop strings) with
    tensor ops per token; results become lists once, in :meth:`output`. Same outputs."""

    def __init__(self, n: int, params: SamplingParams, limits: Sequence[int], device) -> None:
        self.params = params
        self.limits = torch.tensor(list(limits), dtype=torch.long, device=device)
        self.done = self.limits <= 0
        self.count = torch.zeros(n, dtype=torch.long, device=device)  # tokens recorded per sample
        self.eos = torch.zeros(n, dtype=torch.bool, device=device)
        self.stop = torch.tensor(sorted(set(params.stop_ids)), dtype=torch.long, device=device) \
            if params.stop_ids else None
        self.toks: list[Tensor] = []
        self.lps: list[Tensor] = []
        self.tlps: list[Tensor] = []
        self.attn: list[Tensor] = []
        self.topk_ids: list[Tensor] = []
        self.topk_lp: list[Tensor] = []

    def add(self, tok: Tensor, lp: Tensor, tlp: Tensor, logp_all: Tensor, attn: Optional[Tensor]) -> None:
        live = ~self.done
        self.toks.append(tok)
        self.lps.append(lp)
        self.tlps.append(tlp)
        if attn is not None:
            self.attn.append(attn)
        if self.params.topk:
            tv, ti = torch.topk(logp_all, self.params.topk, -1)
            self.topk_ids.append(ti)
            self.topk_lp.append(tv.float())
        self.count += live
        ended = self.count >= self.limits
        if self.stop is not None:
            hit = torch.isin(tok, self.stop) & live
            self.eos |= hit
            ended |= hit
        self.done = self.done | ended

    def done_mask(self) -> Tensor:
        return self.done

    def output(self, want_attn: bool) -> GenOutput:
        return self.assemble(self.params, self.count, self.eos, self.toks, self.lps, self.tlps,
                             self.attn if want_attn else None, self.topk_ids, self.topk_lp)

    @staticmethod
    def assemble(params: SamplingParams, count: Tensor, eos: Tensor, toks, lps, tlps, attn=None, topk_ids=(),
                 topk_lp=()) -> GenOutput:
        """The :class:`GenOutput` of a token loop: ``count [B]`` tokens recorded per row, ``eos
        [B]`` rows stopped by a stop id; ``toks``, ``lps``, ``tlps`` (and ``attn``, the statistic
        when wanted) per step, as lists of ``[B]`` tensors or as ``[B, steps]`` tensors (the
        native engine's C++ loop); ``topk_ids`` / ``topk_lp`` lists of ``[B, K]`` per step."""
        n = count.shape[0]
        lengths = count.tolist()
        reason = ["eos" if e else "length" for e in eos.tolist()]

        def rows(xs) -> list[list]:
            if not len(xs):
                return [[] for _ in range(n)]
            full = xs if isinstance(xs, Tensor) else torch.stack(xs, 1)
            return [r[:k] for r, k in zip(full.tolist(), lengths)]

        def per_row(xs: Sequence[Tensor], dtype) -> list[Tensor]:
            if not xs:
                return [torch.zeros(0, params.topk, dtype=dtype) for _ in range(n)]
            full = torch.stack(list(xs), 1).cpu()  # [B, steps, K]
            return [full[b, :k].clone() for b, k in enumerate(lengths)]

        topk = bool(params.topk)
        return GenOutput(
            ids=rows(toks), logp=rows(lps), trunc_logp=rows(tlps),
            stopped=[r != "length" for r in reason], stop_reason=reason,
            topk_ids=per_row(topk_ids, torch.long) if topk else None,
            topk_logp=per_row(topk_lp, torch.float) if topk else None,
            attn_stat=rows(attn) if attn is not None else None,
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

