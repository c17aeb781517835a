"""The policy forward used for training and scoring passes (any HF causal LM).

``policy_forward`` returns, on request, ``logp [B, T]`` (always), ``entropy [B, T]``,
``hidden [B, T, H]``, ``attn_stat [B, T]``, critic-head ``values [B, T]``, the behaviour's top-K
log-probs ``topk_logp [B, T, K]`` and ``sum_pi_sq [B, T]`` (Σ_v π(v)² over the vocabulary). Everything is
aligned with the tokens (see :mod:`rlsuite.suite.types`): position t holds the prediction of
``tokens[:, t]`` made from the prefix, i.e. the model's output at t − 1; position 0 is 0.

Backend capabilities: :data:`HF_CAPABILITIES`, plus ``attn_stat`` when the model runs with
``attn_implementation="eager"`` (other kernels do not return attention weights).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch
from torch import Tensor

from rlsuite.suite.fast_forward import distribution_stats, fast_forward, unsupported
from rlsuite.suite.types import Forward

HF_CAPABILITIES = frozenset({"logp", "entropy", "hidden", "values", "topk", "sum_pi_sq"})


def capabilities(model) -> frozenset[str]:
    impl = getattr(model.config, "_attn_implementation", None)
    return HF_CAPABILITIES | ({"attn_stat"} if impl == "eager" else frozenset())


def position_ids(attn_mask: Tensor) -> Tensor:
    """Positions that skip left padding: ``cumsum(mask) − 1`` (clamped at 0). [B, T] → [B, T]."""
    return (attn_mask.long().cumsum(-1) - 1).clamp(min=0)


def _shift(x: Tensor) -> Tensor:
    """Move predictions one step right so they align with the tokens they predict."""
    pad = [0, 0] * (x.dim() - 2) + [1, 0]
    return torch.nn.functional.pad(x[:, :-1], pad)


def attention_concentration(attn: Tensor, key_mask: Tensor) -> Tensor:
    """Normalised attention entropy per query, averaged over heads: ``H(a)/log(#keys)`` ∈ [0, 1].

    Shapes: attn [B, heads, Tq, Tk], key_mask [B, Tk] (the causal mask is already in ``attn``)
    → [B, Tq]. Low values mean concentrated attention.
    """
    p = attn.float().clamp(min=1e-12)
    ent = -(p * p.log()).sum(-1).mean(1)  # [B, Tq]
    n_keys = key_mask.long().cumsum(-1)[:, -attn.shape[2]:].float()  # real keys visible to each query
    return ent / n_keys.clamp(min=2).log()


def policy_forward(model, tokens: Tensor, attn_mask: Tensor, temperature: float,
                   want: frozenset[str] = frozenset(), value_head: Optional[torch.nn.Module] = None,
                   topk_ids: Optional[Tensor] = None, prompt_width: int = 0, compiled: bool = False,
                   logits_from: int = 0) -> Forward:
    """One forward of ``model`` on full sequences.

    Args: tokens, attn_mask [B, T]; temperature: logits are divided by it (the sampling
    distribution); want: subset of {"entropy", "hidden", "attn_stat", "values", "topk", "sum_pi_sq"};
    value_head: the critic head applied to the last hidden state when "values" is wanted;
    prompt_width > 0 (``train.share_prefix``) or ``compiled`` (``train.compile``): the
    functional forward of :mod:`rlsuite.suite.fast_forward` where it serves the call, else the HF one;
    logits_from: the first position whose log-prob (entropy, top-K log-probs) is computed; the
    earlier positions hold 0 (the trainer passes the prompt width, where the loss mask starts).
    On the HF forward the LM head still runs over every position (so a loss on the positions
    computed has bit for bit the gradients of the whole-sequence call: the head's weight gradient
    sums the same rows, zeros included) and the log-softmax, entropy and gathers over
    ``logits_from..T−1`` only; the fast forward also runs the head there only.
    Returns: :class:`rlsuite.suite.types.Forward` with the requested fields.
    """
    if (prompt_width or compiled) and unsupported(model, want, tokens.shape[1]) is None:
        return fast_forward(model, tokens, attn_mask, temperature, want, prompt_width, compiled, topk_ids,
                            logits_from=logits_from)
    need_hidden = "hidden" in want or "values" in want
    T = tokens.shape[1]
    s = min(max(int(logits_from), 1), T)  # position 0 is never predicted
    out = model(input_ids=tokens, attention_mask=attn_mask, position_ids=position_ids(attn_mask),
                output_hidden_states=need_hidden, output_attentions="attn_stat" in want, use_cache=False)
    # the predictions of positions s..T-1 ([B, T-s, V]), statistics as the functional forward's
    logp, dist, topk = distribution_stats(out.logits[:, s - 1:-1], tokens[:, s:], temperature, want,
                                           topk_ids[:, s:] if "topk" in want and topk_ids is not None else None)
    pad = torch.nn.functional.pad
    hidden = out.hidden_states[-1] if need_hidden else None
    values = _shift(value_head(hidden)) if "values" in want and value_head is not None else None
    attn_stat = None
    if "attn_stat" in want:
        with torch.no_grad():
            stats = torch.stack([attention_concentration(a, attn_mask) for a in out.attentions]).mean(0)
        attn_stat = _shift(stats)
    return Forward(logp=pad(logp, (s, 0)), **{k: pad(v, (s, 0)) for k, v in dist.items()},
                   hidden=hidden if "hidden" in want else None, attn_stat=attn_stat, values=values,
                   topk_logp=pad(topk, (0, 0, s, 0)) if topk is not None else None)


def forward_options(train, prompt_width: int) -> dict[str, Any]:
    """:func:`policy_forward`'s lever arguments for a batch whose responses start at
    ``prompt_width``: ``train.share_prefix`` (the resolved setting) and ``train.compile``, and
    ``logits_from``: log-probs from the response on (the loss mask is 0 on the prompt; the
    default forward's results are bit for bit those of the whole sequence)."""
    return {"prompt_width": prompt_width if train.share_prefix else 0, "compiled": train.compile,
            "logits_from": prompt_width}


def precision(train, device: torch.device):
    """The training and scoring forwards' precision context (``train.autocast``)."""
    if train.autocast == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
