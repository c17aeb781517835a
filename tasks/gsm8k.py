"""``gsm8k``: grade-school math word problems (Cobbe et al. 2021, arXiv 2110.14168).

Data: ``load_dataset("openai/gsm8k", "main")`` (train 7,473 / test 1,319) or local JSONL
through ``task.data_path`` — a file (train; val and test are carved from it) or a folder
with ``train*.jsonl`` and ``test*.jsonl`` (e.g. ``$RLSUITE_DATA/gsm8k/``). Rows keep the
dataset's fields ``question`` and ``answer``. Val is a fixed hash-selected slice of train.

Gold: the text after ``####`` with commas removed (``#### 1,000`` → ``1000``). Prediction:
the last ``\\boxed{}`` of the completion, else its last number. Grading: math-verify with
the gold first, in a spawn process pool (timeouts work outside the main thread); numbers
compare numerically (18 = 18.0). Optional format reward: ``format_reward`` is added for a
completion whose answer is in ``\\boxed{}``, and the reward is capped at 1.

Prompt: ``Question: Janet’s ducks lay 16 eggs ... ?\\n<instruction>\\nAnswer:``, one text for
every model: a chat model gets it as its user turn (through its chat template), a base model
(no chat template, or ``model.chat_template=off``) as raw text. ``task.instruction=""`` gives the
plain ``Question: ...\\nAnswer:``, which is what the embedded preset sets: the character-level
``tiny`` model cannot follow an instruction and has a 1,024-character context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Grade, Task, TaskConfig, carve_splits, direction_hint, read_jsonl, register
from rlsuite.tasks.math_grading import MathVerifyPool, last_boxed, last_number
from rlsuite.tasks.rowlines import line_of

HF_ID = "openai/gsm8k"


def gold_answer(answer: str) -> str:
    """``"... #### 1,000"`` → ``"1000"``."""
    return answer.split("####")[-1].strip().replace(",", "")


def read_gsm8k(path: Path) -> list[dict]:
    """GSM8K rows: string ``question`` and ``answer``, the answer ending in ``#### <final answer>``.
    A row without that gold line is a BadInput naming the file and its lines (the gold would
    silently be the whole solution text)."""
    rows = read_jsonl(path, ("question", "answer"), {"question": str, "answer": str})
    bad = [i for i, r in enumerate(rows) if "####" not in r["answer"] or not gold_answer(r["answer"])]
    if bad:
        lines = ", ".join(str(line_of(path, i)) for i in bad[:10]) + (", …" if len(bad) > 10 else "")
        raise BadInput(f"{path}: {len(bad)} row(s) have an 'answer' without a '#### <final answer>' line "
                       f"(line(s) {lines}); GSM8K golds are the text after ####")
    return rows


def extract_prediction(completion: str) -> Optional[str]:
    """The last ``\\boxed{}`` content, else the last number, else None."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed.replace("{,}", "").replace(",", "").strip()
    return last_number(completion)


@dataclass(frozen=True, kw_only=True)
class GSM8KConfig(TaskConfig):
    ranges = {"val_fraction": "(0, 0.5)", "format_reward": "[0, 1]", "grader_workers": "[1, inf)",
              "grade_timeout_s": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    data_path: Optional[str] = None
    """Local JSONL file or folder (train*/test*.jsonl); None = the Hugging Face dataset."""
    val_fraction: float = 0.05
    """Hash-selected share of train held out as val."""
    instruction: str = "Solve the problem step by step and put the final answer in \\boxed{}."
    """Line between the question and ``Answer:`` in every prompt (the user turn of chat models,
    the raw text of base models); "" = none."""
    format_reward: float = 0.0
    """Bonus for a boxed final answer (0 = pure correctness)."""
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
class GSM8K(Task):
    name = "gsm8k"
    summary = "GSM8K word problems; math-verify on the #### gold (boxed or last-number prediction)."
    version = "2"  # 2: a single data file carves test before val (tasks.base.carve_splits, as math)
    citation = "Cobbe et al. 2021, Training Verifiers to Solve Math Word Problems, arXiv:2110.14168"
    Config = GSM8KConfig
    cfg: GSM8KConfig
    inert = {"grader_workers": "processes of the math-verify pool: the same verdicts, computed in parallel",
             "grade_timeout_s": "a per-call time limit: it changes a verdict only for an input math-verify takes "
                                "longer than the limit on, which no fixed probe does reliably on every machine"}
    presets = {
        # tiny model: mechanics only, on the plain prompt (it cannot follow an instruction)
        "embedded": {"task": {"instruction": ""},
                     "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 64},
                     "optim": {"lr": 3e-4}, "budget": {"samples": 64}, "eval": {"max_prompts": 16}},
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 64, "max_new_tokens": 512, "temperature": 1.0},
               "optim": {"lr": 1e-6}, "budget": {"samples": 65536}, "eval": {"max_prompts": 500}},
    }

    def __init__(self, cfg: GSM8KConfig) -> None:
        super().__init__(cfg)
        self._splits: Optional[dict[str, list[dict]]] = None
        self._pool = MathVerifyPool(cfg.grader_workers, cfg.grade_timeout_s)

    def splits(self) -> dict[str, list[dict]]:
        if self._splits is None:
            train, test = self._load()
            self._splits = carve_splits(train, test, "question", self.cfg.val_fraction)
        return self._splits

    def _load(self) -> tuple[list[dict], Optional[list[dict]]]:
        path = self.cfg.data_path
        if path is None:
            try:
                from datasets import load_dataset

                ds = load_dataset(HF_ID, "main")
            except Exception as e:  # noqa: BLE001 - offline or missing: one clear message
                raise BadInput(f"gsm8k: cannot load '{HF_ID}' ({type(e).__name__}); set task.data_path to a "
                               f"local JSONL file or folder (e.g. $RLSUITE_DATA/gsm8k)") from None
            return [dict(r) for r in ds["train"]], [dict(r) for r in ds["test"]]
        p = Path(path)
        if p.is_dir():
            trains, tests = sorted(p.glob("train*.jsonl")), sorted(p.glob("test*.jsonl"))
            if not trains or not tests:
                raise BadInput(f"gsm8k: folder {p} needs train*.jsonl and test*.jsonl files")
            return [r for f in trains for r in read_gsm8k(f)], [r for f in tests for r in read_gsm8k(f)]
        if not p.exists():
            raise BadInput(f"gsm8k: task.data_path {p} does not exist")
        return read_gsm8k(p), None

    def prompt(self, example: dict) -> Any:
        instruction = f"{self.cfg.instruction}\n" if self.cfg.instruction else ""
        return f"Question: {example['question']}\n{instruction}Answer:"

    def gold(self, example: dict) -> str:
        return gold_answer(example["answer"])

    def grade(self, example: dict, completion: str) -> Grade:
        return self.grade_batch([example], [completion])[0]

    def grade_batch(self, examples: Sequence[dict], completions: Sequence[str]) -> list[Grade]:
        preds = [extract_prediction(c) for c in completions]
        todo = [i for i, p in enumerate(preds) if p is not None]
        ok = dict(zip(todo, self._pool.verify_each([self.gold(examples[i]) for i in todo],
                                                   [completions[i] if last_boxed(completions[i]) else preds[i]
                                                    for i in todo])))
        out = []
        for i, c in enumerate(completions):
            correct, error = ok.get(i, (False, None))
            if error is not None:  # the grader could not grade it: a grade error, not a wrong answer
                out.append(Grade.errored(error))
                continue
            bonus = self.cfg.format_reward if last_boxed(c) is not None else 0.0
            out.append(Grade(reward=min(1.0, float(correct) + bonus), correct=correct, parsed=preds[i]))
        return out

    def feedback(self, example: dict, completion: str, grade: Grade, detail: str = "full") -> str:
        """Whether a final answer was found, whether it is right (and too high or too low), and
        the format (a boxed final answer)."""
        if detail == "binary" or grade.correct:
            return super().feedback(example, completion, grade, detail)
        if grade.parsed is None:
            return "No final answer found: end your solution with the answer in \\boxed{}."
        fmt = "" if last_boxed(completion) is not None else " Put the final answer in \\boxed{}."
        return f"Your final answer {grade.parsed} is incorrect.{direction_hint(grade.parsed, self.gold(example))}{fmt}"

    def close(self) -> None:
        self._pool.close()
