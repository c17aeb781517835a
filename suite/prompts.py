"""Seeds of the run's random draws, and prompts as token ids (the chat template when configured)."""

from __future__ import annotations

import hashlib
from typing import Any

from rlsuite.suite.errors import BadInput


def seed_for(*parts: Any) -> int:
    """A 63-bit seed from (seed, stream, step, index, ...): every draw has its own generator."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 1


def encode_prompt(task, example, tokenizer, chat_template: str) -> tuple[list[int], str]:
    """Token ids and display text of the task's prompt (chat template when configured)."""
    return encode_text(task.prompt(example), tokenizer, chat_template)


def encode_text(p, tokenizer, chat_template: str) -> tuple[list[int], str]:
    """Token ids and display text of a prompt (text or chat messages)."""
    has_tpl = bool(getattr(tokenizer, "chat_template", None))
    use_chat = chat_template == "on" or (chat_template == "auto" and has_tpl)
    if use_chat:
        if not has_tpl:
            raise BadInput("model.chat_template=on but the tokenizer has no chat template")
        msgs = p if isinstance(p, list) else [{"role": "user", "content": p}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return tokenizer.encode(text, add_special_tokens=False), text
    if isinstance(p, list):
        p = "\n".join(m["content"] for m in p)
    return tokenizer.encode(p), p
