"""The token ids that end a completion: the tokenizer's EOS plus the model's generation-config EOS
ids (a chat model often ends its turn with a token its base model never used, e.g. ``<|im_end|>``
vs ``<|endoftext|>``), in a fixed order with duplicates dropped."""

from __future__ import annotations


def stop_ids(tokenizer, model=None) -> tuple[int, ...]:
    """``(tokenizer.eos_token_id, *model.generation_config.eos_token_id)``, unique, ``None`` dropped."""
    ids: list[int] = []
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None) if model is not None else None
    for i in [tokenizer.eos_token_id, *(gen if isinstance(gen, (list, tuple)) else [gen])]:
        if i is not None and int(i) not in ids:
            ids.append(int(i))
    return tuple(ids)
