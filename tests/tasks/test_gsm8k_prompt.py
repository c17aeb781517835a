"""GSM8K's ``instruction`` reaches the model: in the user turn of a chat model's prompt and in
a base model's raw text; ``instruction=""`` (the embedded preset) keeps the plain prompt.

Needs no data (the examples are written here) and starts no grading pool.
"""

from __future__ import annotations

from rlsuite.suite.spec import resolve
from rlsuite.suite.prompts import encode_text
from rlsuite.tasks.gsm8k import GSM8K, GSM8KConfig

EX = {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "answer": "3 + 4 = 7\n#### 7"}
INSTRUCTION = GSM8KConfig().instruction


class ChatTokenizer:
    """The part of a Hugging Face tokenizer that ``encode_text`` uses, with a chat template."""

    chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"

    def __init__(self) -> None:
        self.seen: list[list[dict]] = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.seen.append(messages)
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]


class BaseTokenizer(ChatTokenizer):
    chat_template = None


def test_instruction_is_in_the_chat_user_turn():
    tok = ChatTokenizer()
    _, text = encode_text(GSM8K(GSM8KConfig(name="gsm8k")).prompt(EX), tok, "auto")
    (user,) = tok.seen[-1]
    assert user["role"] == "user" and user["content"] == f"Question: {EX['question']}\n{INSTRUCTION}\nAnswer:"
    assert "\\boxed{}" in text


def test_base_models_get_the_instruction_in_the_raw_text():
    task = GSM8K(GSM8KConfig(name="gsm8k"))
    for tok, mode in ((BaseTokenizer(), "auto"), (ChatTokenizer(), "off")):
        _, text = encode_text(task.prompt(EX), tok, mode)
        assert text == f"Question: {EX['question']}\n{INSTRUCTION}\nAnswer:" and not tok.seen


def test_empty_instruction_is_the_plain_prompt_and_the_embedded_preset_uses_it():
    plain = f"Question: {EX['question']}\nAnswer:"
    assert GSM8K(GSM8KConfig(name="gsm8k", instruction="")).prompt(EX) == plain
    tiny = resolve("gsm8k", "grpo", "tiny", 0)
    assert tiny.task.instruction == "" and GSM8K(tiny.task).prompt(EX) == plain
    hf = resolve("gsm8k", "grpo", "org/some-model", 0)
    assert hf.task.instruction == INSTRUCTION
    custom = resolve("gsm8k", "grpo", "tiny", 0, sets=[("task.instruction", "Box it.")])
    assert GSM8K(custom.task).prompt(EX) == f"Question: {EX['question']}\nBox it.\nAnswer:"
