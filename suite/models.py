"""Model and tokenizer loading: the embedded ``tiny`` model and any Hugging Face model.

``tiny`` is a Llama-style causal LM built from a config (≈0.5M parameters, hidden 128,
3 layers, 4 heads, context 1024) with a character-level tokenizer made with ``tokenizers``
(printable ASCII + newline; no download). The pinned real models (``smollm2-135m``;
``suite/pinned_models.py``) load from the folder ``rlsuite models fetch NAME`` made, their
weights' sha256 checked on every load. Any other name is treated as a Hugging Face id or a
local path and loaded with ``from_pretrained`` (offline when ``HF_HUB_OFFLINE=1``).

Outside packages add models through the ``rlsuite.models`` entry-point group by registering
a :class:`ModelEntry` in ``MODELS``.
"""

from __future__ import annotations

import copy
import os
import string
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import Registry

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: ``load(cfg) → (model, tokenizer)``; ``embedded``: built from
    scratch (gets the task's warm start)."""

    name: str
    summary: str
    version: str
    load: Callable[[ModelConfig], tuple[Any, Any]]
    embedded: bool = False


MODELS: Registry[ModelEntry] = Registry("model", "rlsuite.models")

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = list(string.printable[:95]) + ["\n"]  # digits, letters, punctuation, space, newline


def char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` (BPE with no merges = one token per char)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", padding_side="left")


def tiny_config(vocab_size: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                       max_position_embeddings=1024, rope_theta=10000.0, tie_word_embeddings=True,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _load_tiny(cfg: ModelConfig):
    from transformers import LlamaForCausalLM

    tok = char_tokenizer()
    mcfg = tiny_config(len(tok))
    mcfg._attn_implementation = cfg.attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the same initial weights for every run and seed
        model = LlamaForCausalLM(mcfg)
    return model.to(DTYPES[cfg.dtype]), tok


MODELS.register("tiny", ModelEntry("tiny", "Llama-style 0.5M-parameter model with a character "
                                   "tokenizer, built from a config (no download)", "1", _load_tiny,
                                   embedded=True))


def _load_pinned(name: str):
    def load(cfg: ModelConfig):
        from rlsuite.suite import pinned_models

        return load_pretrained(str(pinned_models.verified_dir(pinned_models.get(name))), cfg)
    return load


def _register_pinned() -> None:
    from rlsuite.suite.pinned_models import PINNED

    for pm in PINNED.values():
        MODELS.register(pm.name, ModelEntry(pm.name, pm.summary, "1", _load_pinned(pm.name)))


_register_pinned()


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


def load_pretrained(name: str, cfg: ModelConfig):
    """``from_pretrained`` of a local path or hub id; ``BadInput`` if it cannot be loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_available(name)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per load, in every run's log
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[cfg.dtype],
                                                     attn_implementation=cfg.attn_implementation)
    except (OSError, ValueError) as e:
        raise BadInput(f"model '{name}' could not be loaded ({str(e).splitlines()[0]}); give a local "
                       f"path, a Hugging Face id reachable from here, or one of: {', '.join(MODELS.names())}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


def load_model(cfg: ModelConfig) -> tuple[Any, Any, bool]:
    """Return (model, tokenizer, embedded) for ``cfg.name``."""
    if cfg.name in MODELS:
        entry = MODELS.get(cfg.name)
        model, tok = entry.load(cfg)
        return model, tok, entry.embedded
    if os.path.isdir(cfg.name) or _looks_like_hub_id(cfg.name):
        model, tok = load_pretrained(cfg.name, cfg)
        return model, tok, False
    MODELS.canonical(cfg.name)  # raises UnknownName with the valid names
    raise AssertionError  # pragma: no cover


_TRUE = ("1", "on", "yes", "true")


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set (as huggingface_hub reads them)."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return True  # cannot tell: let from_pretrained decide
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id: from_pretrained gives the message
        return True


def check_model_available(name: str) -> None:
    """Before loading: offline (``HF_HUB_OFFLINE=1`` / ``TRANSFORMERS_OFFLINE=1``), a hub id that
    is neither a local folder nor in the local Hugging Face cache is refused at once (BadInput;
    ``from_pretrained`` would first spend most of a minute on retries); a pinned model that is not
    fetched yet is refused naming ``rlsuite models fetch``. A machine check, not part
    of resolution: a spec naming a hub id still resolves offline (dry runs, login nodes)."""
    from rlsuite.suite.pinned_models import PINNED, fetch_command, is_fetched

    if name in PINNED and not is_fetched(PINNED[name]):
        raise BadInput(f"model '{name}' is not fetched yet; fetch it once with: {fetch_command(name)}  "
                       f"(runs and SLURM jobs never download)")
    if name in MODELS or os.path.isdir(name) or not _looks_like_hub_id(name):
        return
    if hub_offline() and not in_hub_cache(name):
        raise BadInput(f"model '{name}' is not a registered model, not a local folder and not in the Hugging "
                       f"Face cache, and offline mode (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE) forbids downloading "
                       f"it; give one of: {', '.join(MODELS.names())}, a local folder saved with save_pretrained, "
                       f"or a hub id already in the cache")


def check_model_name(name: str) -> None:
    """Validate a model name without loading it (exit-2 errors before anything is written)."""
    if name in MODELS or os.path.isdir(name) or _looks_like_hub_id(name):
        return
    if os.path.exists(name):
        raise BadInput(f"model path '{name}' is not a directory holding a saved model")
    MODELS.canonical(name)


def non_embedding_params(model: nn.Module) -> int:
    """P of the FLOPs formulas: every parameter except the input embedding table, plus the
    unembedding matmul (counted even when tied to the embedding, since it does work)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    emb = model.get_input_embeddings().weight
    total -= emb.numel()
    out = model.get_output_embeddings()
    if out is not None and out.weight is emb:
        total += emb.numel()
    return total


class ValueHead(nn.Module):
    """A value head on hidden states ``[B, T, H] → [B, T]``: linear, or a small MLP
    (``H → H/2 → 1``, tanh); ``detach`` stops value gradients from reaching the trunk."""

    def __init__(self, hidden: int, mlp: bool = False, detach: bool = False) -> None:
        super().__init__()
        self.detach = detach
        self.proj = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.Tanh(), nn.Linear(hidden // 2, 1)) if mlp \
            else nn.Linear(hidden, 1)
        last = self.proj[-1] if mlp else self.proj
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.detach() if self.detach else h
        return self.proj(h.to(next(self.proj.parameters()).dtype)).squeeze(-1)


CRITIC_KINDS = ("head", "mlp_head", "mlp_head_detached", "separate")


class Critic(nn.Module):
    """Critic for algorithms that need values.

    ``head``: a linear :class:`ValueHead` on the actor's trunk (the actor forward returns hidden
    states; gradients of the value loss reach the trunk); ``mlp_head``: a small MLP head on the
    trunk; ``mlp_head_detached``: the same on detached hidden states (the trunk learns from the
    policy loss only); ``separate``: its own copy of the initial policy's transformer with a
    linear head (a second model: its FLOPs are counted).
    """

    def __init__(self, policy: nn.Module, mode: str) -> None:
        super().__init__()
        if mode not in CRITIC_KINDS:
            raise ValueError(f"unknown critic kind '{mode}'; valid: {', '.join(CRITIC_KINDS)}")
        self.mode = mode
        self.head = ValueHead(policy.config.hidden_size, mlp=mode.startswith("mlp"), detach=mode.endswith("detached"))
        self.trunk = copy.deepcopy(policy.get_decoder()) if mode == "separate" else None

    def forward_separate(self, tokens: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """Values ``[B, T]`` aligned like log-probs: ``V[b, t]`` = value of the state before
        token t (computed from the hidden state at t − 1); 0 at t = 0."""
        pos = (attn_mask.cumsum(-1) - 1).clamp(min=0)
        h = self.trunk(input_ids=tokens, attention_mask=attn_mask, position_ids=pos).last_hidden_state
        return shift_right(self.head(h))

    def n_params(self) -> int:
        if self.trunk is None:
            return 0
        return sum(p.numel() for p in self.trunk.parameters()) - self.trunk.get_input_embeddings().weight.numel()


def shift_right(x: torch.Tensor) -> torch.Tensor:
    """Align per-position predictions with the tokens they predict: ``out[:, t] = x[:, t−1]``."""
    return torch.nn.functional.pad(x[:, :-1], (1, 0))
