"""``chain``: the embedded reasoning task — iterate a modular addition in a written scratchpad.

Example: prompt ``"07^13x05:"`` (start at 07, apply "⊕ 13" five times, where ⊕ adds digit by
digit modulo 10 with no carries); a correct completion writes every step, then the answer::

    01:07^13=10 02:10^13=23 03:23^13=36 04:36^13=49 05:49^13=52 #52

followed by EOS. The reward is binary: 1 when the integer after the completion's final ``#``
is the value after ``k`` steps, else 0 (a completion that does not end in ``#<integer>``
scores 0). The scratchpad is not graded; it is how a small model gets there: each step copies
the previous value and the step, then adds them digit by digit, so a per-step accuracy ``p``
gives about ``p^k`` on a ``k``-step problem, and the response length (12 tokens a step: 40–148
tokens with EOS at the default ``min_steps..max_steps`` of 3..12) is part of what must be right:
a response that stops early, skips or repeats a step, or runs past ``k`` is wrong.
``format_weight`` (default 0, off; below 1) adds a separate, documented format component: that
weight for a completion whose text is a well-formed trace (``ii:vv^ss=vv … #vv``, any count),
right or wrong, so the total reward is ``correct + format_weight · well_formed``. Every grade
also carries the two as named reward components, raw and whatever ``format_weight`` is
(``Grade.components``: ``correct`` 1/0 and ``format`` 1/0), for multi-reward estimators such as
GDPO's ``reward_keys``; the reward itself is unchanged by them.

Difficulty: ``min_steps``/``max_steps`` (the number of steps ``k``), ``carry`` (ordinary addition
modulo ``modulus``, prompt ``07+13x05:``: carries make each step much harder) and ``modulus`` (the
value range; 100 keeps every value two digits, written zero-padded). Problems are every
``(start, step, k)`` with ``start`` in ``0..modulus-1``, ``step`` in ``1..modulus-1`` and ``k`` in
``min_steps..max_steps``, in a fixed hash order (so the first ``eval.max_prompts`` of a split mix
every ``k``); ``val`` and ``test`` are disjoint hash-selected slices of the prompt text and
``train`` is the rest, so the splits are disjoint by construction and the same on every machine.

With the embedded ``tiny`` model the task provides a supervised warm start on generated traces
(teacher-forced ``prompt trace EOS``) that stops once accuracy at temperature 1 on 200 held-out
train problems reaches ``warm_target`` (30%); the base built at the default configuration is
committed (``tasks/bases/chain__tiny.*``: 420 SFT steps, 33.5% at temperature 1 at the stop,
greedy 46.0% on val and test), so every machine starts RL from the same bytes. Measured from it
(``benchmarks/effects/effects.md``, AMD EPYC, 5 seeds): GRPO at the preset's budget moves greedy
test accuracy by +0.0 to +6.0 points — a weak signal at this budget.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Optional

from rlsuite.tasks.base import Grade, Task, TaskConfig, direction_hint, generated_splits, register

_ANSWER = re.compile(r"#(\d+)\s*$")
_TRACE = re.compile(r"^(?:\d+:\d+[+^]\d+=\d+ )+#\d+\s*$")


@dataclass(frozen=True)
class Chain:
    start: int
    step: int
    k: int
    modulus: int = 100
    carry: bool = False

    @property
    def width(self) -> int:
        return len(str(self.modulus - 1))

    @property
    def text(self) -> str:
        w = self.width
        return f"{self.start:0{w}d}{'+' if self.carry else '^'}{self.step:0{w}d}x{self.k:02d}:"

    def add(self, x: int) -> int:
        """One step: ``x + step`` modulo ``modulus`` (``carry``), else digit by digit modulo 10
        (no carries: 47 ⊕ 38 = 75)."""
        if self.carry:
            return (x + self.step) % self.modulus
        out, place, a, b = 0, 1, x, self.step
        for _ in range(self.width):
            out += ((a % 10 + b % 10) % 10) * place
            a, b, place = a // 10, b // 10, place * 10
        return out % self.modulus

    def values(self) -> list[int]:
        vals, x = [], self.start
        for _ in range(self.k):
            x = self.add(x)
            vals.append(x)
        return vals

    @property
    def answer(self) -> int:
        return self.values()[-1]

    @property
    def trace(self) -> str:
        """The reference scratchpad and answer (the warm start's supervised target)."""
        w = self.width
        op = "+" if self.carry else "^"
        prev = [self.start, *self.values()[:-1]]
        return "".join(f"{i:02d}:{x:0{w}d}{op}{self.step:0{w}d}={v:0{w}d} "
                       for i, (x, v) in enumerate(zip(prev, self.values()), 1)) + f"#{self.answer:0{w}d}"


@dataclass(frozen=True, kw_only=True)
class ChainConfig(TaskConfig):
    ranges = {"min_steps": "[1, inf)", "max_steps": "[1, inf)", "modulus": "[2, inf)",
              "val_fraction": "(0, 0.5)", "format_weight": "[0, 1)", "warm_target": "(0, 1)",
              "warm_max_steps": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    min_steps: int = 3
    """Fewest additions in a problem (the difficulty knob's lower end)."""
    max_steps: int = 12
    """Most additions in a problem (the difficulty knob's upper end; responses grow 12 tokens a
    step)."""
    modulus: int = 100
    """Values are taken modulo this (100: two-digit values, written zero-padded)."""
    carry: bool = False
    """``False``: a step adds digit by digit modulo 10 with no carries (47 ⊕ 38 = 75), so every
    output digit depends on one digit of the previous value and one of the prompt's step;
    ``True``: ordinary addition modulo ``modulus`` (carries make each step much harder for a
    small model)."""
    val_fraction: float = 0.01
    """Hash-selected share of all problems held out as val (test takes the same share)."""
    format_weight: float = 0.0
    """Weight of the separate format component (a well-formed trace, correct or not); 0 keeps
    the reward binary exact-answer. Below 1, so a correct response always scores ≥ 1 and a wrong
    one < 1 (what ``len/correct_mean`` and ``len/wrong_mean`` split on)."""
    warm_target: float = 0.3
    """Warm start stops once accuracy at temperature 1 (one seeded sample a problem) on 200
    held-out train problems, checked every 20 SFT steps, reaches this, so RL starts at a pass rate
    of about this with headroom; the committed base (tasks/bases/) is the one built at the default."""
    warm_max_steps: int = 4000
    """Upper bound on warm-start SFT steps."""

    def __post_init__(self) -> None:
        if self.min_steps < 1 or self.max_steps < self.min_steps:
            raise ValueError(f"need 1 ≤ min_steps ≤ max_steps, got min_steps={self.min_steps}, "
                             f"max_steps={self.max_steps}")
        if self.modulus < 2:
            raise ValueError(f"modulus must be ≥ 2, got {self.modulus}")
        if not 0 < self.val_fraction < 0.5:
            raise ValueError(f"val_fraction must be in (0, 0.5), got {self.val_fraction}")
        if not 0 <= self.format_weight < 1:
            raise ValueError(f"format_weight must be in [0, 1) (a wrong answer must score below a right one), "
                             f"got {self.format_weight}")


@register
class ChainTask(Task):
    name = "chain"
    summary = ("Embedded multi-step reasoning: iterate a digit-wise modular addition in a written "
               "scratchpad (40–148 tokens), binary exact-answer reward (CPU-sized).")
    version = "1"
    reward_components = ("correct", "format")
    Config = ChainConfig
    cfg: ChainConfig
    inert = dict.fromkeys(("warm_target", "warm_max_steps"),
                          "acts only in warm_start (the supervised warm start of models built from "
                          "scratch): it changes the starting weights, not the task's data, prompts or grades")
    presets = {
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 152, "temperature": 1.0},
            "optim": {"lr": 1e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 6400},
            "eval": {"max_prompts": 200, "every": 0.25},
        },
        "hf": {"rollout": {"max_new_tokens": 160}, "budget": {"samples": 6400}},
    }

    def splits(self) -> dict[str, list[Chain]]:
        if getattr(self, "_splits", None) is None:
            c = self.cfg
            probs = [Chain(s, d, k, c.modulus, c.carry) for k in range(c.min_steps, c.max_steps + 1)
                     for s in range(c.modulus) for d in range(1, c.modulus)]
            # a fixed order mixing every k (evals read the first eval.max_prompts of a split)
            probs.sort(key=lambda p: hashlib.sha256(p.text.encode()).digest())
            self._splits = generated_splits(probs, c.val_fraction)
        return self._splits

    def prompt(self, example: Chain) -> str:
        return example.text

    def gold(self, example: Chain) -> str:
        return str(example.answer)

    @staticmethod
    def reference_completion(example: Chain) -> str:
        """The full correct response (the warm start's target)."""
        return example.trace

    def grade(self, example: Chain, completion: str) -> Grade:
        m = _ANSWER.search(completion)
        parsed = str(int(m.group(1))) if m else None
        ok = parsed is not None and int(parsed) == example.answer
        well_formed = float(bool(_TRACE.match(completion.strip())))
        reward = float(ok)
        if self.cfg.format_weight:
            reward += self.cfg.format_weight * well_formed
        return Grade(reward=reward, correct=ok, parsed=parsed, components={"correct": float(ok), "format": well_formed})

    @staticmethod
    def first_wrong_step(example: Chain, completion: str) -> Optional[int]:
        """1-based index of the first scratchpad step that is missing or wrong (``None``: all
        ``k`` steps right)."""
        got = re.findall(r"(\d+):\d+[+^]\d+=(\d+)", completion)
        for i, v in enumerate(example.values(), 1):
            if i > len(got) or int(got[i - 1][0]) != i or int(got[i - 1][1]) != v:
                return i
        return None

    def feedback(self, example: Chain, completion: str, grade: Grade, detail: str = "full") -> str:
        """``"Step 3 is wrong."``, ``"No final answer: end with #<number>."``, or the direction of a
        wrong final answer; never the gold answer."""
        if detail == "binary" or grade.correct:
            return super().feedback(example, completion, grade, detail)
        if grade.parsed is None:
            return "No final answer: end with #<number>."
        bad = self.first_wrong_step(example, completion)
        where = f" Step {bad} is wrong." if bad is not None else ""
        return f"{grade.parsed} is wrong.{where}{direction_hint(grade.parsed, str(example.answer))}"

    # -- warm start ----------------------------------------------------------------------
    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """Teacher-forced SFT on ``prompt trace EOS`` of train problems until held-out accuracy at
        temperature 1 ≥ warm_target (checked every 20 steps; :func:`rlsuite.tasks.warm.answer_sft_warm_start`)."""
        from rlsuite.tasks.warm import answer_sft_warm_start

        max_new = 12 * self.cfg.max_steps + 8  # the longest trace (12 tokens a step, "#vv") + EOS
        return answer_sft_warm_start(self, model, tokenizer, seed, max_new_tokens=max_new, check_every=20,
                                     target=lambda p: p.trace, check_temperature=1.0)
