"""``code_toy``: the embedded code task — write a one-line Python function from examples.

Example prompt ``"f(0)=3,f(4)=7,f(9)=12\\nf=lambda x:"``; a correct completion ``"x+3"``
(or ``"3+x"``, any expression that behaves the same) followed by EOS. The completion's
first line is run in :mod:`rlsuite.tasks.sandbox` as::

    f=lambda x:<completion>
    assert f(0)==3
    ...                       # the 3 shown examples and 3 hidden ones

and the reward is 1 when every assert passes (the hidden inputs, from −5..15, rule out a
lookup table of the shown ones), else 0. So, unlike ``arith``, the reward comes from
*executing* model-written code, with everything that implies (syntax errors, exceptions,
hostile output) handled by the sandbox.

Functions come from templates with small constants (``x+c``, ``x-c``, ``c-x``, ``x*c``,
``x//c``, ``x%c``, ``x*x+c``, ``max(x,c)``, ``min(x,c)``, ``abs(x-c)``, ``x*c+d``); shown
inputs are three distinct values in 0..9. Problems are generated from a fixed seed, so every
machine sees the same splits: ``val`` and ``test`` are disjoint hash-selected slices (of the
prompt text) and ``train`` is the rest.

With the embedded ``tiny`` model the task provides a supervised warm start (teacher-forced
canonical expressions on train problems) that stops once greedy accuracy on held-out train
problems reaches ``warm_target`` (0.3: ~900 SFT steps, built once and cached), leaving
headroom for RL. The preset's budget, 12,800 samples (100 GRPO steps of 16 prompts × 8), is
sized to the sandbox's measured rate (``benchmarks/sandbox/sandbox.md``: ~200–470 programs/s
warm with 2 workers): grading is at most 128 programs per step (identical programs run once,
through the grading cache), a fraction of the policy's own step time; a run takes about
90 CPU-seconds. ``benchmarks/tasks_code/tasks_code.md``: GRPO lifts greedy val accuracy from
0.32 to 0.35–0.41 over 3 seeds (test 0.29 → 0.30–0.34). Trials on seed 0 (val after 100
steps): lr 3e-4 → 0.41, 6e-4 → 0.29, 1e-3 → 0.22; G 16 × 8 prompts → 0.30; 25,600 samples
→ 0.405 (no better than 12,800).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence


from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Grade, Task, TaskConfig, generated_splits, register
from rlsuite.tasks.code import SANDBOX_INERT, code_feedback
from rlsuite.tasks.sandbox import Layer, Sandbox, SandboxConfig, SandboxUnavailable

# (template, constants for c, constants for d)
TEMPLATES: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("x+{c}", tuple(range(1, 10)), ()),
    ("x-{c}", tuple(range(1, 10)), ()),
    ("{c}-x", tuple(range(1, 10)), ()),
    ("x*{c}", tuple(range(2, 10)), ()),
    ("x//{c}", tuple(range(2, 6)), ()),
    ("x%{c}", tuple(range(2, 8)), ()),
    ("x*x+{c}", tuple(range(0, 10)), ()),
    ("max(x,{c})", tuple(range(1, 9)), ()),
    ("min(x,{c})", tuple(range(1, 9)), ()),
    ("abs(x-{c})", tuple(range(1, 9)), ()),
    ("x*{c}+{d}", tuple(range(2, 6)), tuple(range(1, 10))),
)
HIDDEN_INPUTS = tuple(range(-5, 16))


@dataclass(frozen=True)
class Problem:
    expr: str
    shown: tuple[tuple[int, int], ...]
    hidden: tuple[tuple[int, int], ...]

    @property
    def text(self) -> str:
        return ",".join(f"f({x})={y}" for x, y in self.shown) + "\nf=lambda x:"

    @property
    def answer(self) -> str:
        """The canonical expression (one of many correct ones)."""
        return self.expr

    def program(self, expr: str) -> str:
        asserts = "".join(f"assert f({x})=={y}\n" for x, y in self.shown + self.hidden)
        return f"f=lambda x:{expr}\n{asserts}"


def generate(n: int, seed: int = 1234) -> list[Problem]:
    """``n`` distinct problems from a fixed seed (deterministic on every machine)."""
    rng = random.Random(seed)
    funcs = [t.format(c=c, d=d) for t, cs, ds in TEMPLATES for c in cs for d in (ds or (0,))]
    compiled = {e: eval("lambda x:" + e) for e in funcs}  # noqa: S307 - our own templates, not model output
    seen, out = set(), []
    while len(out) < n:
        expr = funcs[rng.randrange(len(funcs))]
        f = compiled[expr]
        xs = rng.sample(range(10), 3)
        hid = rng.sample([h for h in HIDDEN_INPUTS if h not in xs], 3)
        p = Problem(expr, tuple((x, f(x)) for x in xs), tuple((x, f(x)) for x in hid))
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    return out


@dataclass(frozen=True, kw_only=True)
class CodeToyConfig(TaskConfig):
    ranges = {"n_problems": "[1000, inf)", "val_fraction": "(0, 0.2)", "warm_target": "(0, 1)",
              "warm_max_steps": "[1, inf)", "timeout_s": "(0, inf)", "cache_size": "[0, inf)",
              "sandbox_workers": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    n_problems: int = 20000
    """Problems generated (from a fixed seed) before the split."""
    val_fraction: float = 0.01
    """Hash-selected share held out as val (test takes the same share)."""
    warm_target: float = 0.3
    """Warm start stops once greedy accuracy on held-out train problems reaches this."""
    warm_max_steps: int = 3000
    """Upper bound on warm-start SFT steps."""
    timeout_s: float = 2.0
    """Wall-clock limit per program."""
    cache_size: int = 65536
    """Graded programs remembered (identical program text → the same result)."""
    sandbox_layers: tuple[Layer, ...] = ("auto",)
    """Sandbox layers (see :class:`rlsuite.tasks.sandbox.SandboxConfig.layers`)."""
    sandbox_python: Optional[str] = None
    """Interpreter for the programs (see ``SandboxConfig.python``)."""
    sandbox_workers: int = 2
    """Programs run at once."""
    sandbox_allow_unisolated: bool = False
    """Run with resource limits only when no layer can hide the user's files (opt-in)."""

    def __post_init__(self) -> None:
        if self.n_problems < 1000:
            raise ValueError(f"n_problems must be ≥ 1000, got {self.n_problems}")
        if not 0 < self.val_fraction < 0.2:
            raise ValueError(f"val_fraction must be in (0, 0.2), got {self.val_fraction}")
        if not 0 < self.warm_target < 1:
            raise ValueError(f"warm_target must be in (0, 1), got {self.warm_target}")
        self.sandbox_config()

    def sandbox_config(self) -> SandboxConfig:
        return SandboxConfig(layers=self.sandbox_layers, python=self.sandbox_python, workers=self.sandbox_workers,
                             timeout_s=self.timeout_s, memory_mb=256, allow_unisolated=self.sandbox_allow_unisolated)


@register
class CodeToy(Task):
    name = "code_toy"
    summary = "Embedded one-line Python functions from examples, graded by running asserts in the sandbox."
    version = "1"
    Config = CodeToyConfig
    cfg: CodeToyConfig
    inert = {**{k: v for k, v in SANDBOX_INERT.items() if k != "sandbox_warm"},
             **dict.fromkeys(("warm_target", "warm_max_steps"),
                             "acts only in warm_start (the supervised warm start of models built from "
                             "scratch): it changes the starting weights, not the task's data, prompts or grades")}
    presets = {
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 12, "temperature": 1.0},
            "optim": {"lr": 3e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 12800},
            "eval": {"max_prompts": 200, "every": 0.25},
        },
        "hf": {"rollout": {"max_new_tokens": 24}, "budget": {"samples": 12800}},
    }

    def __init__(self, cfg: CodeToyConfig) -> None:
        super().__init__(cfg)
        try:
            self.sandbox = Sandbox(cfg.sandbox_config())
        except SandboxUnavailable as e:
            raise BadInput(f"code_toy: {e}") from None
        self._splits: Optional[dict[str, list[Problem]]] = None
        self._cache: OrderedDict[str, tuple[bool, Optional[str]]] = OrderedDict()

    def splits(self) -> dict[str, list[Problem]]:
        if self._splits is None:
            c = self.cfg
            probs = generate(c.n_problems)
            self._splits = generated_splits(probs, c.val_fraction)
        return self._splits

    def prompt(self, example: Problem) -> str:
        return example.text

    def gold(self, example: Problem) -> str:
        return example.answer

    @staticmethod
    def expression(completion: str) -> str:
        return completion.split("\n", 1)[0].strip()

    def grade(self, example: Problem, completion: str) -> Grade:
        return self.grade_batch([example], [completion])[0]

    def feedback(self, example: Problem, completion: str, grade: Grade, detail: str = "full") -> str:
        return code_feedback(grade, detail)

    def grade_batch(self, examples: Sequence[Problem], completions: Sequence[str]) -> list[Grade]:
        exprs = [self.expression(c) for c in completions]
        progs = [e.program(x) if x else None for e, x in zip(examples, exprs)]
        todo = list(dict.fromkeys(p for p in progs if p is not None and p not in self._cache))
        fresh = {p: r for p, r in zip(todo, self.sandbox.run_many(todo, self.cfg.timeout_s))} if todo else {}
        out = []
        for p, x in zip(progs, exprs):
            ok, err = (False, "no_code") if p is None else \
                ((fresh[p].passed, fresh[p].error_class) if p in fresh else self._cache[p])
            if p in self._cache:
                self._cache.move_to_end(p)
            if p in fresh and fresh[p].status == "sandbox_error":  # the sandbox failed, not the program
                out.append(Grade.errored(f"the sandbox could not run the program ({fresh[p].output.strip()[-300:]})",
                                         error_class="sandbox_error"))
                continue
            out.append(Grade(reward=float(ok), correct=ok, parsed=x or None, error_class=err))
        self._cache.update((p, (r.passed, r.error_class)) for p, r in fresh.items() if r.status != "sandbox_error")
        while len(self._cache) > self.cfg.cache_size:
            self._cache.popitem(last=False)
        return out

    def close(self) -> None:
        self.sandbox.close()

    # -- warm start ----------------------------------------------------------------------
    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """Teacher-forced SFT on train problems until held-out greedy accuracy ≥ warm_target
        (checked every 100 steps; :func:`rlsuite.tasks.warm.answer_sft_warm_start`)."""
        from rlsuite.tasks.warm import answer_sft_warm_start

        return answer_sft_warm_start(self, model, tokenizer, seed, max_new_tokens=12, check_every=100)
