"""``math``: competition mathematics — train on MATH, evaluate on MATH-500.

MATH: Hendrycks et al. 2021, "Measuring Mathematical Problem Solving With the MATH
Dataset", arXiv 2103.03874. MATH-500: the 500 held-out test problems of Lightman et al.
2023, "Let's Verify Step by Step", arXiv 2305.20050 (openai/prm800k). Training on MATH
*train* does not contaminate MATH-500 (which comes from MATH test); training on MATH test
would.

Data: train = the 7 subject configs of ``EleutherAI/hendrycks_math`` (split ``train``,
7,500 problems); test = ``HuggingFaceH4/MATH-500`` (split ``test``); val = a fixed
hash-selected slice of train. Or local JSONL through ``task.data_path``: a folder with
``train*.jsonl`` and ``test*.jsonl`` (e.g. ``$RLSUITE_DATA/math/``), or one file (val and test
carved from it by hash). Rows keep the datasets' fields: ``problem`` and ``solution``, plus
``answer`` in MATH-500.

Gold: ``answer`` when the row has it, else the last ``\\boxed{}`` of ``solution``
(brace-matched, nested braces kept; a local train row without one is a BadInput naming
file:line; Hugging Face rows without one are dropped and counted in ``dropped_no_boxed``).
Prediction: the last ``\\boxed{}`` of the completion (None without one: reward 0, and it does
not vote in maj@k). Grading: math-verify, gold first, on the two boxed expressions, in a
spawn process pool with timeouts (:mod:`rlsuite.tasks.math_grading`; a pool that cannot start raises
GraderError, an item it cannot grade is a grade error, ``Grade.error``). ``parsed`` is the boxed text
with spacing and ``\\left``/``\\right``/``\\dfrac`` variants canonicalised, so maj@k groups
identical answers written slightly differently.

Example prompt: ``Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.
...\\nPlease reason step by step, and put your final answer within \\boxed{}.`` (the Qwen2.5-Math
instruction), sent through the model's chat template when it has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Grade, Task, TaskConfig, carve_splits, read_jsonl, register
from rlsuite.tasks.math_grading import MathVerifyPool, last_boxed
from rlsuite.tasks.rowlines import line_of

TRAIN_ID = "EleutherAI/hendrycks_math"
TEST_ID = "HuggingFaceH4/MATH-500"
SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
            "prealgebra", "precalculus")

_SPACING = re.compile(r"\\[,;:! ]|\\left|\\right|\s+")


def gold_answer(example: dict) -> Optional[str]:
    """``answer`` if present, else the last ``\\boxed{}`` of ``solution`` (None if neither)."""
    if isinstance(example.get("answer"), str) and example["answer"].strip():
        return example["answer"].strip()
    return last_boxed(example.get("solution", ""))


def canonical(ans: str) -> str:
    """A light canonical form for maj@k votes (not for correctness: that is math-verify's)."""
    s = _SPACING.sub("", ans).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return s.rstrip(".").replace("^\\circ", "").replace("^{\\circ}", "")


@dataclass(frozen=True, kw_only=True)
class MathConfig(TaskConfig):
    ranges = {"val_fraction": "(0, 0.5)", "grader_workers": "[1, inf)", "grade_timeout_s": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    data_path: Optional[str] = None
    """Local JSONL file or folder (train*/test*.jsonl); None = the Hugging Face datasets."""
    val_fraction: float = 0.05
    """Hash-selected share of train held out as val."""
    instruction: str = "Please reason step by step, and put your final answer within \\boxed{}."
    """Appended to the problem on a new line."""
    grader_workers: int = 1
    """Processes in the math-verify pool."""
    grade_timeout_s: int = 5
    """Per-call math-verify timeout."""

    def __post_init__(self) -> None:
        if not 0 < self.val_fraction < 0.5:
            raise ValueError(f"val_fraction must be in (0, 0.5), got {self.val_fraction}")
        if self.grader_workers < 1 or self.grade_timeout_s < 1:
            raise ValueError("grader_workers and grade_timeout_s must be ≥ 1")


@register
class Math(Task):
    name = "math"
    summary = "MATH train → MATH-500 test; math-verify on the last \\boxed{} (gold = answer or boxed solution)."
    version = "1"
    citation = ("Hendrycks et al. 2021, Measuring Mathematical Problem Solving With the MATH Dataset, "
                "arXiv:2103.03874; MATH-500 from Lightman et al. 2023, arXiv:2305.20050")
    Config = MathConfig
    cfg: MathConfig
    inert = {"grader_workers": "processes of the math-verify pool: the same verdicts, computed in parallel",
             "grade_timeout_s": "a per-call time limit: it changes a verdict only for an input math-verify takes "
                                "longer than the limit on, which no fixed probe does reliably on every machine"}
    presets = {
        # tiny model: mechanics only (it cannot solve MATH)
        "embedded": {"rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 64},
                     "optim": {"lr": 3e-4}, "budget": {"samples": 64}, "eval": {"max_prompts": 16}},
        # Dr. GRPO (sail-sg/understand-r1-zero examples/qwen2.5-math-1.5b.sh): 128 prompts × 8 samples,
        # 3,000 new tokens, T = 1, lr 1e-6
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 128, "max_new_tokens": 3000, "temperature": 1.0},
               "optim": {"lr": 1e-6}, "budget": {"samples": 131072}, "eval": {"max_prompts": 500}},
    }

    def __init__(self, cfg: MathConfig) -> None:
        super().__init__(cfg)
        self._splits: Optional[dict[str, list[dict]]] = None
        self.dropped_no_boxed = 0
        self._pool = MathVerifyPool(cfg.grader_workers, cfg.grade_timeout_s)

    def splits(self) -> dict[str, list[dict]]:
        if self._splits is None:
            train, test = self._load()
            self._splits = carve_splits(train, test, "problem", self.cfg.val_fraction)
        return self._splits

    def _load(self) -> tuple[list[dict], Optional[list[dict]]]:
        path = self.cfg.data_path
        if path is None:
            return self._load_hf()
        p = Path(path)
        if p.is_dir():
            trains, tests = sorted(p.glob("train*.jsonl")), sorted(p.glob("test*.jsonl"))
            if not trains or not tests:
                raise BadInput(f"math: folder {p} needs train*.jsonl and test*.jsonl files")
            return [r for f in trains for r in read_math(f)], [r for f in tests for r in read_math(f)]
        if not p.exists():
            raise BadInput(f"math: task.data_path {p} does not exist")
        return read_math(p), None

    def _load_hf(self) -> tuple[list[dict], list[dict]]:
        try:
            from datasets import load_dataset

            train = [dict(r) for s in SUBJECTS for r in load_dataset(TRAIN_ID, s, split="train")]
            test = [dict(r) for r in load_dataset(TEST_ID, split="test")]
        except Exception as e:  # noqa: BLE001 - offline or missing: one clear message
            raise BadInput(f"math: cannot load '{TRAIN_ID}' / '{TEST_ID}' ({type(e).__name__}); set "
                           f"task.data_path to a local folder with train*.jsonl and test*.jsonl "
                           f"(e.g. $RLSUITE_DATA/math)") from None
        kept = [r for r in train if gold_answer(r) is not None]
        self.dropped_no_boxed = len(train) - len(kept)
        return kept, test

    def prompt(self, example: dict) -> Any:
        return f"{example['problem']}\n{self.cfg.instruction}"

    def gold(self, example: dict) -> str:
        return gold_answer(example) or ""

    def reference_completion(self, example: dict) -> str:
        """A completion that must grade correct (used by the contract tests)."""
        return f"The final answer is $\\boxed{{{self.gold(example)}}}$."

    def feedback(self, example: dict, completion: str, grade: Grade, detail: str = "full") -> str:
        """Whether a boxed final answer was found and whether it is equivalent to the reference."""
        if detail == "binary" or grade.correct:
            return super().feedback(example, completion, grade, detail)
        box = last_boxed(completion)
        if box is None:
            return "No final answer found: put your final answer in \\boxed{}."
        return f"Your final answer {box} is not equivalent to the correct answer."

    def grade(self, example: dict, completion: str) -> Grade:
        return self.grade_batch([example], [completion])[0]

    def grade_batch(self, examples: Sequence[dict], completions: Sequence[str]) -> list[Grade]:
        preds = [last_boxed(c) for c in completions]
        todo = [i for i, p in enumerate(preds) if p is not None and p.strip()]
        verdicts = self._pool.verify_each([f"\\boxed{{{self.gold(examples[i])}}}" for i in todo],
                                          [f"\\boxed{{{preds[i]}}}" for i in todo])
        ok = dict(zip(todo, verdicts))
        out = []
        for i, p in enumerate(preds):
            if i not in ok:
                out.append(Grade(reward=0.0, correct=False, parsed=None))
            elif ok[i][1] is not None:  # the grader could not grade it: a grade error, not a wrong answer
                out.append(Grade.errored(ok[i][1]))
            else:
                out.append(Grade(reward=float(ok[i][0]), correct=ok[i][0], parsed=canonical(p)))
        return out

    def close(self) -> None:
        self._pool.close()


def read_math(path: Path) -> list[dict]:
    """MATH / MATH-500 rows (``problem``, ``solution``); a row whose gold cannot be found (no
    ``answer`` and no ``\\boxed{}`` in ``solution``) is a BadInput naming file:line."""
    rows = read_jsonl(path, ("problem", "solution"))
    for i, r in enumerate(rows):
        if not isinstance(r["problem"], str) or not isinstance(r["solution"], str):
            raise BadInput(f"{path}:{line_of(path, i)}: 'problem' and 'solution' must be strings")
        if gold_answer(r) is None:
            raise BadInput(f"{path}:{line_of(path, i)}: no 'answer' field and no \\boxed{{}} in 'solution'")
    return rows

