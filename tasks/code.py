"""``humaneval`` and ``mbpp``: Python program synthesis, graded by running tests in the sandbox.

HumanEval (Chen et al. 2021, arXiv 2107.03374; ``load_dataset("openai/openai_humaneval")``,
164 rows, split ``test`` only) and MBPP (Austin et al. 2021, arXiv 2108.07732;
``load_dataset("google-research-datasets/mbpp", "full")``: train 374 / validation 90 /
test 500 / prompt 10), or local JSONL through ``task.data_path`` (a file, or a folder holding
``humaneval*.jsonl`` / ``mbpp*.jsonl``, e.g. ``$RLSUITE_DATA/code``). Rows keep the datasets'
own fields.

Grading (openai/human-eval ``execution.py`` and the MBPP paper): each completion is graded
by a *judged job* (:class:`rlsuite.tasks.sandbox.Judged`) in :mod:`rlsuite.tasks.sandbox` with a per-job
timeout (3 s, as human-eval), batched over the sandbox's worker pool: the candidate's solution
runs in one sandboxed process, the trusted tests in another (the judge), which calls the
candidate's functions through proxies; arguments and results cross as JSON of builtin types
(tuple/list/set/dict/bool/int/float/None/str kept apart), so every ``==``, tolerance and
``check`` runs on builtin values in the judge, never through the candidate's ``__eq__``, and
the candidate's process never holds the tests or the pass token (version 2; version 1 ran
the tests in the program's own process, where an ``__eq__`` that always answers True, a
``sys.settrace`` hook or a walk up the stack to the pass token got reward 1). The job passes
when the tests run to their end. A job that fails or times out is a wrong answer; one the
*sandbox* could not run (status ``sandbox_error``: its worker died or hung twice, or the
sandbox setup failed) makes the grade a grade error (``Grade.error``), and a sandbox that
cannot start raises ``SandboxError``. Not supported (none in the sample data's 134 + 200 rows):
tests that pass a function to the candidate or check that it mutated an argument in place.

* HumanEval: the candidate's process runs ``prompt + completion``; the judge runs the prompt
  (so helpers the tests call, e.g. ``poly``, are the dataset's, not a redefinition), then
  ``test + "\\n" + f"check({entry_point})"`` with the entry point bound to the candidate's
  function (:func:`humaneval_program` is the same program as one text, the version-1 way).
  A completion is the function *body* continuing the prompt, cut at the Codex stop
  sequences (``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``). When the
  completion instead holds the full ``def entry_point`` (chat models: the first fenced
  block that defines it, else the first Python block), the program is
  ``prompt + "\\n" + code + ...``: the prompt's stub (signature + docstring, itself a valid
  function) keeps its imports and helper functions, and the completion's ``def`` replaces it.
* MBPP: the candidate's process runs ``code + "\\n" + test_setup_code``, the judge
  the reference solution's top-level imports (its own modules: a test's ``math.isclose`` is never
  the candidate's ``math``; :func:`reference_imports`), ``test_setup_code`` and the asserts of
  ``test_list``, with the other names the reference solution defines (its functions under test)
  and any other name neither that context nor the builtins provide bound to the candidate's,
  where ``code`` is the first fenced Python block of the completion, else the completion cut at
  ``[DONE]`` or a closing fence.

Reward: ``all`` = 1 if every test passes (the standard metric), ``fraction`` = the share of
tests that pass, each test run as its own program (MBPP: each assert of ``test_list``;
HumanEval: each assert-bearing statement of ``check``'s body, with the other statements
kept). ``correct`` is always "all tests pass".

Splits (deviation, documented): HumanEval has only a test split, so train and val are carved
from it by a hash of ``task_id`` (``train_fraction``, ``val_fraction``; test = the rest, ~40%
by default, so ``test`` scores are on that subset, not on all 164). MBPP from the hub uses its
official splits (the 10-row ``prompt`` split is unused); local MBPP rows go to the official
split of their ``task_id`` (11–510 test, 511–600 validation, 601–974 train) and, where that
leaves train or val empty (the 200-row sample is all test), train/val are carved from the
rest by hash as for HumanEval.

Prompts: HumanEval ``complete`` = the prompt itself (continue the body); ``chat`` = an
instruction with the prompt in a fenced block (answer: the full function in a fenced block).
MBPP: "You are an expert Python programmer, and here is your task: {text} Your code should
pass these tests:\\n\\n{tests}" (plus a newline in ``complete`` style).
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Grade, Task, TaskConfig, hash_split, read_jsonl, register
from rlsuite.tasks.sandbox import Judged, Layer, Sandbox, SandboxConfig, SandboxUnavailable

HUMANEVAL_ID = "openai/openai_humaneval"
MBPP_ID = "google-research-datasets/mbpp"
CODEX_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
HUMANEVAL_CHAT = ("Complete the following Python function. Reply with the complete function, including the "
                  "signature, in a ```python code block.\n\n```python\n{prompt}```")
MBPP_TEMPLATE = ("You are an expert Python programmer, and here is your task: {text} "
                 "Your code should pass these tests:\n\n{tests}")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|\Z)", re.S)
_PY_LANGS = ("", "python", "py", "python3", "Python")


# ---------------------------------------------------------------------------------------
# extraction and program assembly


_DEF = re.compile(r"^(?:async\s+)?def\s+\w+\s*\(", re.M)


def fenced_code(completion: str, entry_point: Optional[str] = None) -> Optional[str]:
    """The first fenced Python block that defines ``entry_point`` (when given), else the
    first fenced Python block; an unclosed final fence runs to the end. None if no fence.

    A chat model often starts with bare code and then *closes* a fence it never opened
    (``def f(...): ...\n```\n\nIn this code, ...``): when the text before the first fence
    defines ``entry_point`` (or, without one, any function), that text is the first block and
    the fence after it a closing one — not the opening of a "block" of prose."""
    first = completion.find("```")
    if first > 0:
        lead = completion[:first]
        if defines(lead, entry_point) if entry_point is not None else _DEF.search(lead):
            return truncate(lead, ("\nif __name__", "\nprint(", "\nassert "))  # as a bare function
    blocks = [m.group(2) for m in _FENCE.finditer(completion) if m.group(1) in _PY_LANGS]
    if not blocks:
        return None
    if entry_point is not None:
        for b in blocks:
            if defines(b, entry_point):
                return b
    return blocks[0]


def defines(code: str, name: str) -> bool:
    """Whether ``code`` has a top-level ``def name(``."""
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def truncate(text: str, stops: Sequence[str]) -> str:
    """``text`` cut at the earliest of ``stops``."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def humaneval_code(row: dict, completion: str) -> tuple[str, bool]:
    """(code, is_full_def): the completion's code and whether it defines the entry point."""
    entry = row["entry_point"]
    code = fenced_code(completion, entry)
    if code is None:
        if defines(completion, entry):  # a bare full function: keep helpers, drop example runs
            code = truncate(completion, ("\nif __name__", "\nprint(", "\nassert ", "\n```"))
        else:
            return truncate(completion, CODEX_STOPS), False
    return code, defines(code, entry)


def humaneval_program(row: dict, completion: str, test: Optional[str] = None) -> str:
    """The program that grades ``completion`` (``test`` overrides the row's test code)."""
    code, full = humaneval_code(row, completion)
    solution = row["prompt"] + ("\n" + code if full else code)
    return f"{solution}\n\n{row['test'] if test is None else test}\n\ncheck({row['entry_point']})\n"


def mbpp_code(completion: str) -> str:
    code = fenced_code(completion)
    if code is None:
        code = truncate(completion.replace("[BEGIN]", ""), ("[DONE]", "\n```", "```"))
    return code


def mbpp_program(row: dict, completion: str, tests: Optional[Sequence[str]] = None) -> str:
    tests = row["test_list"] if tests is None else tests
    return f"{mbpp_code(completion)}\n{row.get('test_setup_code') or ''}\n" + "\n".join(tests) + "\n"


def _parse(code: str) -> Optional[ast.Module]:
    with warnings.catch_warnings():  # e.g. invalid escape sequences in MBPP reference code
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except SyntaxError:
            return None


def _top_level_names(code: str) -> set[str]:
    """Names ``code`` binds at module level (defs, classes, assignments, imports)."""
    tree = _parse(code)
    if tree is None:
        return set()
    out: set[str] = set()
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(st.name)
            continue
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in n.names if a.name != "*")
    return out


def _free_names(code: str) -> set[str]:
    """Names ``code`` reads and binds nowhere (conservatively: a name bound in any scope is out)."""
    tree = _parse(code)
    if tree is None:
        return set()
    loads, binds = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else binds).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(n.name)
        elif isinstance(n, ast.arg):
            binds.add(n.arg)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            binds.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            binds.add(n.name)
    return loads - binds


@functools.lru_cache(maxsize=4096)
def reference_imports(reference: str) -> str:
    """The reference solution's top-level imports, as code the judge runs itself (trusted): a
    module the tests read (``math.isclose``) is the judge's own, never the candidate's. A
    ``from m import name`` is kept only where the reference also defines a function (then the
    functions under test are its ``def`` s; else the imported name may be the one under test and
    crosses as before). Imports that fail in the judge's interpreter are left out."""
    tree = _parse(reference)
    if tree is None:
        return ""
    defines = any(isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for st in tree.body)
    lines = []
    for st in tree.body:
        if isinstance(st, ast.Import) or (isinstance(st, ast.ImportFrom) and defines and st.level == 0
                                          and all(a.name != "*" for a in st.names)):
            lines.append(f"try:\n    {ast.unparse(st)}\nexcept ImportError:\n    pass")
    return "\n".join(lines) + ("\n" if lines else "")


@functools.lru_cache(maxsize=4096)
def remote_names(tests: str, context: str = "", reference: str = "", first: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names a judge binds to the candidate's objects (see :class:`rlsuite.tasks.sandbox.Judged`):
    ``first``, then each name the tests read without binding that the ``reference`` solution
    binds at top level (even a builtin's name it shadows, e.g. an MBPP ``sum``), or that
    neither the trusted ``context`` nor the builtins provide."""
    ref, ctx = _top_level_names(reference) - _top_level_names(context), _top_level_names(context)
    rest = sorted(n for n in _free_names(tests) if n not in first
                  and (n in ref or (n not in ctx and not hasattr(builtins, n))))
    return tuple(first) + tuple(rest)


@functools.lru_cache(maxsize=1024)
def prompt_context(prompt: str) -> str:
    """The prompt as code the judge can run: itself (HumanEval's end in a docstring, a valid
    body), else with a ``pass`` body added, else nothing (then its helpers are the candidate's)."""
    for code in (prompt, prompt.rstrip("\n") + "\n    pass\n"):
        if _parse(code) is not None:
            return code
    return ""


def humaneval_job(row: dict, completion: str, test: Optional[str] = None) -> Judged:
    """The judged job that grades ``completion``: the candidate's process runs the prompt and
    the completion (as :func:`humaneval_program` assembles them, without the tests); the judge
    runs the prompt (its helpers, e.g. ``poly``, are the trusted ones), then the test code and
    ``check(entry_point)``, with the entry point bound to the candidate's function."""
    code, full = humaneval_code(row, completion)
    solution = row["prompt"] + ("\n" + code if full else code)
    entry = row["entry_point"]
    tests = f"{row['test'] if test is None else test}\n\ncheck({entry})\n"
    context = prompt_context(row["prompt"])
    return Judged(solution=solution + "\n", tests=tests, context=context,
                  remote=remote_names(tests, context, "", (entry,)))


def mbpp_job(row: dict, completion: str, tests: Optional[Sequence[str]] = None) -> Judged:
    """The judged job for MBPP: the candidate's process runs the code and ``test_setup_code``
    (as in :func:`mbpp_program`, whose names the code may use); the judge runs the setup code
    and the asserts, with the names the reference ``code`` defines bound to the candidate's."""
    tests = row["test_list"] if tests is None else tests
    setup = row.get("test_setup_code") or ""
    body = "\n".join(tests) + "\n"
    reference = row.get("code") or ""
    # the judge's own context: the reference's imports (a module the tests read is never the
    # candidate's: a candidate binding `math` to a stub must not answer `math.isclose`), then the setup
    context = reference_imports(reference) + setup
    return Judged(solution=f"{mbpp_code(completion)}\n{setup}\n", tests=body, context=context,
                  remote=remote_names(setup + "\n" + body, context, reference))


def split_check(test: str) -> list[str]:
    """HumanEval test code split into one variant per assert-bearing statement of ``check``
    (the other statements of its body kept, in order). Falls back to ``[test]``."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return [test]
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return [test]
    fn = checks[0]
    body = list(fn.body)
    asserting = [i for i, st in enumerate(body) if any(isinstance(n, ast.Assert) for n in ast.walk(st))]
    if len(asserting) < 2:
        return [test]
    variants = []
    for keep in asserting:
        fn.body = [st for i, st in enumerate(body) if i not in asserting or i == keep]
        variants.append(ast.unparse(tree))
    fn.body = body
    return variants


# ---------------------------------------------------------------------------------------
# config and the shared task machinery


@dataclass(frozen=True, kw_only=True)
class CodeConfig(TaskConfig):
    ranges = {"train_fraction": "[0, 1)", "val_fraction": "(0, 0.5)", "timeout_s": "(0, inf)",
              "cache_size": "[0, inf)", "sandbox_workers": "[1, inf)", "sandbox_memory_mb": "[64, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    data_path: Optional[str] = None
    """Local JSONL file or folder (``humaneval*.jsonl`` / ``mbpp*.jsonl``); None = the hub."""
    reward: Literal["all", "fraction"] = "all"
    """``all``: 1 when every test passes; ``fraction``: share of tests passed (one run per test)."""
    style: Literal["complete", "chat"] = "complete"
    """Prompt style: continue the code, or an instruction answered with a fenced full solution."""
    train_fraction: float = 0.5
    """Hash-selected share carved as train where the data has no train split."""
    val_fraction: float = 0.1
    """Hash-selected share carved as val where the data has no validation split."""
    timeout_s: float = 3.0
    """Wall-clock limit per test program (human-eval uses 3 s)."""
    cache_size: int = 4096
    """Graded programs remembered (identical program text → the same result)."""
    sandbox_layers: tuple[Layer, ...] = ("auto",)
    """Sandbox layers (see :class:`rlsuite.tasks.sandbox.SandboxConfig.layers`)."""
    sandbox_python: Optional[str] = None
    """Interpreter for the programs (see ``SandboxConfig.python``)."""
    sandbox_workers: int = 2
    """Programs run at once."""
    sandbox_memory_mb: int = 1024
    """Address-space limit per program, MiB."""
    sandbox_warm: bool = True
    """Fork programs from a warm interpreter per worker (see ``SandboxConfig.warm``)."""
    sandbox_allow_unisolated: bool = False
    """Run with resource limits only when no layer can hide the user's files (opt-in)."""

    def __post_init__(self) -> None:
        if not 0 <= self.train_fraction < 1 or not 0 < self.val_fraction < 0.5:
            raise ValueError(f"train_fraction must be in [0, 1) and val_fraction in (0, 0.5), got "
                             f"{self.train_fraction}, {self.val_fraction}")
        if self.train_fraction + self.val_fraction >= 1:
            raise ValueError("train_fraction + val_fraction must be < 1 (the rest is test)")
        if self.timeout_s <= 0 or self.cache_size < 0:
            raise ValueError("timeout_s must be > 0 and cache_size ≥ 0")
        self.sandbox_config()  # sandbox field errors surface here, at spec validation

    def sandbox_config(self) -> SandboxConfig:
        return SandboxConfig(layers=self.sandbox_layers, python=self.sandbox_python, workers=self.sandbox_workers,
                             timeout_s=self.timeout_s, memory_mb=self.sandbox_memory_mb, warm=self.sandbox_warm,
                             allow_unisolated=self.sandbox_allow_unisolated)


def carve(rows: list[dict], key: str, train_fraction: float, val_fraction: float) -> dict[str, list[dict]]:
    """Hash-split rows by ``row[key]``: val = u < val_fraction, train = the next
    ``train_fraction``, test = the rest (u uniform from a hash: order-independent)."""
    out: dict[str, list[dict]] = {"train": [], "val": [], "test": []}
    for r in rows:
        k = str(r[key])
        if hash_split(k, val_fraction, "code-split"):
            out["val"].append(r)
        elif hash_split(k, val_fraction + train_fraction, "code-split"):
            out["train"].append(r)
        else:
            out["test"].append(r)
    return out


_FAILURES = {
    "no_code": "No code found in your response.",
    "SyntaxError": "Your code does not parse (SyntaxError).",
    "IndentationError": "Your code does not parse (IndentationError).",
    "AssertionError": "Your code runs but returns wrong results on the tests.",
    "timeout": "Your code timed out (an infinite loop, or far too slow).",
    "output_limit": "Your code printed far too much output.",
    "crashed": "Your code crashed the interpreter (killed by a signal or out of memory).",
    "failed": "Your code did not complete the tests (it exited early).",
}


def code_feedback(grade: Grade, detail: str = "full") -> str:
    """Verifier feedback for program-graded tasks from the grade's error class (exception type
    or failure status) and, for partial credit, the share of tests passed."""
    if grade.correct:
        return "Your code passes all the tests."
    if detail == "binary":
        return "Your code fails the tests."
    cls = grade.error_class or "failed"
    msg = _FAILURES.get(cls, f"Your code raised {cls} when tested.")
    if 0 < grade.reward < 1:
        msg += f" It passes {grade.reward:.0%} of the tests."
    return msg


SANDBOX_INERT = {
    "cache_size": "memoises results by program text: the same grades, with fewer sandbox runs",
    "sandbox_layers": "how programs are isolated (which layers are available depends on the machine): the same "
                      "grades by design (tests/tasks/test_sandbox.py)",
    "sandbox_python": "the interpreter that runs the programs: any Python 3 grades them the same",
    "sandbox_workers": "programs run at once: the same grades, in parallel",
    "sandbox_warm": "fork programs from a warm interpreter or start each cold: the same grades by design "
                    "(tests/tasks/test_sandbox.py)",
    "sandbox_allow_unisolated": "read only where no isolating layer can start; where one can, the sandbox is "
                                "the same either way",
}
"""Sandbox settings that change how programs run, not their results (``inert`` of code tasks)."""


class CodeTask(Task):
    """Shared grading: programs per completion, a result cache, the sandbox pool."""

    inert = SANDBOX_INERT

    cfg: CodeConfig
    reward_range = (0.0, 1.0)
    Config = CodeConfig
    hf_id: str = ""
    file_glob: str = ""
    FIELD_TYPES: dict = {}
    """Types of the local JSONL rows' fields (checked on load: file:line on a mismatch)."""

    def __init__(self, cfg: CodeConfig) -> None:
        super().__init__(cfg)
        try:
            self.sandbox = Sandbox(cfg.sandbox_config())
        except SandboxUnavailable as e:
            raise BadInput(f"{self.name}: {e}") from None
        self._splits: Optional[dict[str, list[dict]]] = None
        self._cache: OrderedDict[str, tuple[str, Optional[str]]] = OrderedDict()
        self.sandbox_errors: dict[str, str] = {}

    def programs(self, example: dict, completion: str) -> list[str]:
        """The test programs for one completion (one, or one per test for ``fraction``)."""
        raise NotImplementedError

    def extracted(self, example: dict, completion: str) -> str:
        raise NotImplementedError

    def run_programs(self, progs: Sequence[str]) -> list[tuple[str, Optional[str]]]:
        """``(status, error_class)`` of each of ``progs`` (cached by program text; each distinct
        program runs once; see :attr:`rlsuite.tasks.sandbox.RunResult.error_class`). A ``sandbox_error``
        (the sandbox, not the program, failed) is never cached; its message is kept in
        ``sandbox_errors`` (program → message) until the next call."""
        todo = list(dict.fromkeys(p for p in progs if p not in self._cache))
        results = dict(zip(todo, self.sandbox.run_many(todo, self.cfg.timeout_s))) if todo else {}
        fresh = {p: (r.status, r.error_class) for p, r in results.items()}
        self.sandbox_errors = {p: r.output.strip()[-300:] for p, r in results.items() if r.status == "sandbox_error"}
        out = [fresh[p] if p in fresh else self._cache[p] for p in progs]
        for p in progs:
            if p in self._cache:
                self._cache.move_to_end(p)
        if self.cfg.cache_size:
            self._cache.update((p, r) for p, r in fresh.items() if r[0] != "sandbox_error")
            while len(self._cache) > self.cfg.cache_size:
                self._cache.popitem(last=False)
        return out

    def grade(self, example: dict, completion: str) -> Grade:
        return self.grade_batch([example], [completion])[0]

    def feedback(self, example: dict, completion: str, grade: Grade, detail: str = "full") -> str:
        return code_feedback(grade, detail)

    def grade_batch(self, examples: Sequence[dict], completions: Sequence[str]) -> list[Grade]:
        per = [self.programs(e, c) for e, c in zip(examples, completions)]
        flat = self.run_programs([p for ps in per for p in ps])
        out, k = [], 0
        for e, c, ps in zip(examples, completions, per):
            res = flat[k:k + len(ps)]
            k += len(ps)
            broken = [p for p, (st, _) in zip(ps, res) if st == "sandbox_error"]
            if broken:  # the sandbox failed on a test program: a grade error, not a failing program
                why = self.sandbox_errors.get(broken[0]) or "no detail"
                out.append(Grade.errored(f"the sandbox could not run {len(broken)} of {len(ps)} test program(s) "
                                         f"({why})", error_class="sandbox_error"))
                continue
            passed = [st == "passed" for st, _ in res]
            frac = sum(passed) / len(passed)
            reward = frac if self.cfg.reward == "fraction" else float(all(passed))
            code = self.extracted(e, c).strip()
            # error class: the first failing program's exception type ("no_code" when nothing was extracted)
            err = None if all(passed) else (next(ec for st, ec in res if st != "passed") if code else "no_code")
            out.append(Grade(reward=reward, correct=all(passed), parsed=code or None, error_class=err))
        return out

    def _local_rows(self, required: Sequence[str]) -> list[dict]:
        p = Path(self.cfg.data_path)
        if p.is_dir():
            files = sorted(p.glob(self.file_glob))
            if not files:
                raise BadInput(f"{self.name}: folder {p} has no {self.file_glob} file")
            return [r for f in files for r in read_jsonl(f, required, self.FIELD_TYPES)]
        if not p.exists():
            raise BadInput(f"{self.name}: task.data_path {p} does not exist")
        return read_jsonl(p, required, self.FIELD_TYPES)

    def _hub(self, *args: str):
        try:
            from datasets import load_dataset

            return load_dataset(self.hf_id, *args)
        except Exception as e:  # noqa: BLE001 - offline or missing: one clear message
            raise BadInput(f"{self.name}: cannot load '{self.hf_id}' ({type(e).__name__}); set task.data_path to "
                           f"a local JSONL file or folder (e.g. $RLSUITE_DATA/code)") from None

    def close(self) -> None:
        self.sandbox.close()


_PRESETS = {
    "embedded": {"rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 128},
                 "optim": {"lr": 3e-4}, "budget": {"samples": 64}, "eval": {"max_prompts": 16}},
    "hf": {"rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 512, "temperature": 1.0},
           "optim": {"lr": 1e-6}, "budget": {"samples": 16384}, "eval": {"max_prompts": 0}},
}


@register
class HumanEval(CodeTask):
    name = "humaneval"
    summary = "HumanEval: complete a Python function; reward = its tests pass in the sandbox."
    version = "3"  # 2: judged jobs (the tests run outside the candidate's process); 3: bare code closed by a lone fence
    citation = "Chen et al. 2021, Evaluating Large Language Models Trained on Code, arXiv:2107.03374"
    presets = _PRESETS
    hf_id = HUMANEVAL_ID
    file_glob = "[Hh]uman[Ee]val*.jsonl"
    FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
    FIELD_TYPES = {"task_id": (str, int), "prompt": str, "canonical_solution": str, "test": str, "entry_point": str}

    def splits(self) -> dict[str, list[dict]]:
        if self._splits is None:
            rows = self._local_rows(self.FIELDS) if self.cfg.data_path else [dict(r) for r in self._hub()["test"]]
            self._splits = carve(rows, "task_id", self.cfg.train_fraction, self.cfg.val_fraction)
        return self._splits

    def prompt(self, example: dict) -> Any:
        if self.cfg.style == "chat":
            return [{"role": "user", "content": HUMANEVAL_CHAT.format(prompt=example["prompt"])}]
        return example["prompt"]

    def gold(self, example: dict) -> str:
        return example["canonical_solution"]

    def extracted(self, example: dict, completion: str) -> str:
        return humaneval_code(example, completion)[0]

    def programs(self, example: dict, completion: str) -> list[Judged]:
        if self.cfg.reward == "fraction":
            return [humaneval_job(example, completion, t) for t in split_check(example["test"])]
        return [humaneval_job(example, completion)]


@dataclass(frozen=True, kw_only=True)
class MBPPConfig(CodeConfig):
    timeout_s: float = 10.0
    """Wall-clock limit per test program (the reference of task 123 takes 3.6 s on a 2-core VM)."""


@register
class MBPP(CodeTask):
    name = "mbpp"
    summary = "MBPP: write a Python function from a description and 3 asserts; reward = the asserts pass."
    version = "3"  # 2: judged jobs; 3: bare code closed by a lone fence is the code (tasks.code.fenced_code)
    citation = "Austin et al. 2021, Program Synthesis with Large Language Models, arXiv:2108.07732"
    presets = _PRESETS
    Config = MBPPConfig
    hf_id = MBPP_ID
    file_glob = "mbpp*.jsonl"
    FIELDS = ("task_id", "text", "code", "test_list")
    FIELD_TYPES = {"task_id": int, "text": str, "code": str, "test_list": list}

    def splits(self) -> dict[str, list[dict]]:
        if self._splits is None:
            if self.cfg.data_path is None:
                ds = self._hub("full")
                s = {"train": [dict(r) for r in ds["train"]], "val": [dict(r) for r in ds["validation"]],
                     "test": [dict(r) for r in ds["test"]]}
            else:
                s = {"train": [], "val": [], "test": []}
                for r in self._local_rows(self.FIELDS):
                    t = int(r["task_id"])
                    if 11 <= t <= 510:
                        s["test"].append(r)
                    elif 511 <= t <= 600:
                        s["val"].append(r)
                    elif t >= 601:
                        s["train"].append(r)
                if not s["train"] or not s["val"]:  # e.g. the 200-row test sample: carve by hash
                    pool = s["train"] + s["val"] + s["test"]
                    s = carve(pool, "task_id", self.cfg.train_fraction, self.cfg.val_fraction)
            self._splits = s
        return self._splits

    def prompt(self, example: dict) -> Any:
        text = MBPP_TEMPLATE.format(text=example["text"], tests="\n".join(example["test_list"]))
        if self.cfg.style == "chat":
            return [{"role": "user", "content": text}]
        return text + "\n"

    def gold(self, example: dict) -> str:
        return example["code"]

    def extracted(self, example: dict, completion: str) -> str:
        return mbpp_code(completion)

    def programs(self, example: dict, completion: str) -> list[Judged]:
        if self.cfg.reward == "fraction":
            return [mbpp_job(example, completion, [t]) for t in example["test_list"]]
        return [mbpp_job(example, completion)]
