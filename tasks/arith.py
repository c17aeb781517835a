"""``arith``: the embedded verifiable task (two-operand integer arithmetic, exact-match reward).

Example: prompt ``"47+38="``, a correct completion ``"85"`` followed by EOS; reward 1 if the
leading integer of the completion equals the result, else 0.

Problems are generated from a fixed seed, so every machine sees the same splits: ``test``
and ``val`` are disjoint hash-selected slices of all problems; ``train`` is the rest. With
the embedded ``tiny`` model the task provides a short supervised warm start (teacher-forced
answers on train problems) that stops once greedy accuracy on a held-out slice of train
reaches ``warm_target``, so RL starts from partial competence with headroom. The base built
at the default configuration is committed (``tasks/bases/arith__tiny.*``; about 44% greedy
test accuracy), so every machine starts RL from the same bytes (see :mod:`rlsuite.suite.warmstart`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Optional


from rlsuite.tasks.base import Grade, Task, TaskConfig, direction_hint, generated_splits, register

_INT = re.compile(r"^\s*(-?\d+)")
_LAST_INT = re.compile(r"-?\d+")
_OP_WORDS = {"+": "+", "-": "-", "*": "×"}


@dataclass(frozen=True)
class Problem:
    a: int
    b: int
    op: str

    @property
    def text(self) -> str:
        return f"{self.a}{self.op}{self.b}="

    @property
    def answer(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b}[self.op]


@dataclass(frozen=True, kw_only=True)
class ArithConfig(TaskConfig):
    ranges = {"max_operand": "[1, 999]", "val_fraction": "(0, 0.5)", "warm_target": "(0, 1)",
              "warm_max_steps": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    max_operand: int = 99
    """Operands are drawn from 0..max_operand (at most 999: the task enumerates every pair once to split
    them, 10⁶ problems an operator; 1e12 hung)."""
    ops: str = "+-"
    """Operators used (subset of '+-*')."""
    val_fraction: float = 0.02
    """Hash-selected share of all problems held out as val (test takes the same share)."""
    warm_target: float = 0.3
    """Warm start stops once greedy accuracy on 200 held-out train problems (checked every 20
    SFT steps) reaches this; the committed base (tasks/bases/) is the one built at the default."""
    warm_max_steps: int = 3000
    """Upper bound on warm-start SFT steps."""
    style: Literal["bare", "question"] = "bare"
    """``bare``: the prompt ``47+38=``, graded on the completion's leading integer (the embedded
    model's format); ``question``: ``What is 47 + 38? Reply with only the number.`` (the user turn
    of a chat model), graded on the completion's last integer, since a chat model answers
    ``47 + 38 = 85``. Same problems and splits in both."""

    def __post_init__(self) -> None:
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"ops must be a non-empty subset of '+-*', got {self.ops!r}")
        if self.max_operand < 1:
            raise ValueError(f"max_operand must be ≥ 1, got {self.max_operand}")
        if not 0 < self.val_fraction < 0.5:
            raise ValueError(f"val_fraction must be in (0, 0.5), got {self.val_fraction}")


@register
class Arith(Task):
    name = "arith"
    summary = "Embedded two-operand integer arithmetic with exact-match reward (CPU-sized)."
    version = "2"
    Config = ArithConfig
    cfg: ArithConfig
    inert = dict.fromkeys(("warm_target", "warm_max_steps"),
                          "acts only in warm_start (the supervised warm start of models built from "
                          "scratch): it changes the starting weights, not the task's data, prompts or grades")
    presets = {
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 6, "temperature": 1.0},
            "optim": {"lr": 1e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 25600},
            "eval": {"max_prompts": 200, "every": 0.25},
        },
        "hf": {"task": {"style": "question"}, "rollout": {"max_new_tokens": 16}, "budget": {"samples": 25600}},
    }

    def splits(self) -> dict[str, list[Problem]]:
        c = self.cfg
        probs = [] if getattr(self, "_splits", None) else [Problem(a, b, op) for op in c.ops
                                                           for a in range(c.max_operand + 1)
                                                           for b in range(c.max_operand + 1)]
        if getattr(self, "_splits", None) is None:
            self._splits = generated_splits(probs, c.val_fraction)
        return self._splits

    def prompt(self, example: Problem) -> str:
        if self.cfg.style == "question":
            return f"What is {example.a} {_OP_WORDS[example.op]} {example.b}? Reply with only the number."
        return example.text

    def gold(self, example: Problem) -> str:
        return str(example.answer)

    def grade(self, example: Problem, completion: str) -> Grade:
        if self.cfg.style == "question":
            found = _LAST_INT.findall(completion.replace(",", ""))
            parsed = found[-1] if found else None
        else:
            m = _INT.match(completion)
            parsed = m.group(1) if m else None
        ok = parsed is not None and int(parsed) == example.answer
        return Grade(reward=float(ok), correct=ok, parsed=parsed)

    def feedback(self, example: Problem, completion: str, grade: Grade, detail: str = "full") -> str:
        """Short enough for the embedded model: ``"84 is wrong. It is too low."``; format
        violations: no leading integer, text after the number."""
        if detail == "binary":
            return super().feedback(example, completion, grade, detail)
        if grade.parsed is None:
            return "No number found. Answer with the number only."
        verdict = "correct." if grade.correct else f"wrong.{direction_hint(grade.parsed, str(example.answer))}"
        extra = " Answer with the number only." if completion.strip() != grade.parsed else ""
        return f"{grade.parsed} is {verdict}{extra}"

    # -- warm start ----------------------------------------------------------------------
    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """Teacher-forced SFT on train problems until held-out greedy accuracy ≥ warm_target
        (checked every 20 steps; :func:`rlsuite.tasks.warm.answer_sft_warm_start`)."""
        from rlsuite.tasks.warm import answer_sft_warm_start

        return answer_sft_warm_start(self, model, tokenizer, seed, max_new_tokens=6, check_every=20)
