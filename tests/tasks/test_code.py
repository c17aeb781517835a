"""HumanEval and MBPP: extraction, program assembly, prompts, splits, config errors, and the
real grading of every shipped reference solution (and of wrong ones) in the sandbox.

Data tests need ``$RLSUITE_DATA/code`` (skip without it; fail under RLSUITE_REQUIRE_DATA=1).

    pytest tests/tasks/test_code.py
"""

from __future__ import annotations


import pytest

import rlsuite.tasks.code  # noqa: F401  (registration, until tasks/__init__.py imports it)
from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import read_jsonl
from rlsuite.tasks.code import (
    HUMANEVAL_CHAT,
    MBPP,
    CodeConfig,
    HumanEval,
    MBPPConfig,
    carve,
    fenced_code,
    humaneval_code,
    humaneval_job,
    humaneval_program,
    mbpp_code,
    mbpp_job,
    mbpp_program,
    split_check,
    truncate,
)
from tests.conftest import data_dir, require_sandbox


require_sandbox()


ROW = {"task_id": "T/0",
       "prompt": "from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n",
       "entry_point": "add", "canonical_solution": "    return a + b\n",
       "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    x = 5\n    assert candidate(x, 1) == 6\n"}


# -- extraction ------------------------------------------------------------------------------


def test_fenced_code_prefers_the_block_defining_the_entry_point():
    text = "Here:\n```\nprint(1)\n```\nand\n```python\ndef add(a, b):\n    return a + b\n```\ndone"
    assert fenced_code(text, "add") == "def add(a, b):\n    return a + b"
    assert fenced_code(text) == "print(1)"
    assert fenced_code("```python\ndef f():\n    pass") == "def f():\n    pass"  # unclosed fence
    assert fenced_code("```js\nlet x\n```") is None and fenced_code("no fence") is None


def test_truncate_at_codex_stops():
    body = "    return a + b\n\n\ndef test():\n    pass\nprint(1)\n"
    assert truncate(body, ("\nclass", "\ndef", "\n#", "\nif", "\nprint")) == "    return a + b\n\n"


def test_bare_code_closed_by_a_lone_fence_is_the_code():
    """SmolLM2-135M-Instruct's HumanEval answers: bare code, then a fence it never opened, then
    prose. Version 2 took the prose after that fence as the code (a syntax error: reward 0)."""
    text = ("from typing import List\n\ndef add(a, b):\n    return a + b\n\n# Example usage:\nprint(add(1, 2))\n"
            "```\n\nIn this code, the `add` function takes two numbers.\n")
    assert fenced_code(text, "add") == "from typing import List\n\ndef add(a, b):\n    return a + b\n\n# Example usage:"
    assert humaneval_code({"entry_point": "add"}, text)[1] is True
    assert mbpp_code(text).startswith("from typing import List\n\ndef add(a, b):")
    assert "In this code" not in mbpp_code(text)
    # prose before a real opening fence is not code: the fenced block wins
    assert fenced_code("Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n", "add") == \
        "def add(a, b):\n    return a + b"


def test_humaneval_program_for_body_full_def_and_fenced_completions():
    tail = ROW["test"] + "\n\ncheck(add)\n"
    body = humaneval_program(ROW, "    return a + b\n\ndef junk():\n    pass\n")
    assert body == ROW["prompt"] + "    return a + b\n" + "\n\n" + tail
    full = humaneval_program(ROW, "def add(a, b):\n    return a + b\nprint(add(1, 2))\n")
    assert full.startswith(ROW["prompt"] + "\ndef add(a, b):\n    return a + b\n\ndef check")
    assert "print(add" not in full
    fenced = humaneval_program(ROW, "Sure!\n```python\ndef add(a, b):\n    return a + b\n```\n")
    assert ROW["prompt"] + "\ndef add(a, b):\n    return a + b" in fenced


def test_mbpp_code_and_program():
    assert mbpp_code("[BEGIN]\ndef f(x):\n    return x\n[DONE] trailing") == "\ndef f(x):\n    return x\n"
    assert mbpp_code("```python\ndef f(x):\n    return x\n```\nExplanation") == "def f(x):\n    return x"
    row = {"test_list": ["assert f(1) == 1", "assert f(2) == 2"], "test_setup_code": "import math"}
    expected = "def f(x): return x\nimport math\nassert f(1) == 1\nassert f(2) == 2\n"
    assert mbpp_program(row, "def f(x): return x") == expected


def test_judged_jobs_split_solution_and_tests():
    job = humaneval_job(ROW, "    return a + b\n\ndef junk():\n    pass\n")
    assert job.solution == ROW["prompt"] + "    return a + b\n" + "\n"  # the Codex stops apply as before
    assert job.tests == ROW["test"] + "\n\ncheck(add)\n" and job.context == ROW["prompt"] and job.remote == ("add",)
    assert "check" not in job.solution
    row = {"prompt": "def helper(x):\n    return 2 * x\n\n\ndef f(x):\n    \"\"\"Doc.\"\"\"\n", "entry_point": "f",
           "test": "def check(candidate):\n    assert candidate(1) == helper(1)\n    assert f(2) == other(2)\n"}
    assert humaneval_job(row, "    return 2\n").remote == ("f", "other")  # helper: the prompt's own, in the judge
    mb = {"test_list": ["assert sum(3, 1) == 2", "assert math.isclose(area(1), 3.14, rel_tol=0.01)"],
          "code": "import math\ndef sum(a, b):\n    return a - b\ndef area(r):\n    return math.pi * r * r",
          "test_setup_code": "import re"}
    job = mbpp_job(mb, "def sum(a, b): return a - b")
    # a builtin the reference shadows is the candidate's; the reference's module is the judge's own (issue 38)
    assert job.remote == ("area", "sum")
    assert job.context == "try:\n    import math\nexcept ImportError:\n    pass\nimport re"
    assert job.solution == "def sum(a, b): return a - b\nimport re\n"
    assert "BROKEN" not in job and "sum(3, 1)" in job  # texts can be searched as with program strings


def test_split_check_keeps_setup_statements():
    parts = split_check(ROW["test"])
    assert len(parts) == 2
    assert "x = 5" in parts[0] and "candidate(1, 2)" in parts[0] and "candidate(x, 1)" not in parts[0]
    assert "x = 5" in parts[1] and "candidate(x, 1)" in parts[1] and "candidate(1, 2)" not in parts[1]
    assert split_check("def check(c):\n    assert c(1)\n") == ["def check(c):\n    assert c(1)\n"]


def test_carve_is_order_independent_and_disjoint():
    rows = [{"task_id": f"T/{i}"} for i in range(300)]
    a, b = carve(rows, "task_id", 0.5, 0.1), carve(rows[::-1], "task_id", 0.5, 0.1)
    assert {k: sorted(r["task_id"] for r in v) for k, v in a.items()} == \
        {k: sorted(r["task_id"] for r in v) for k, v in b.items()}
    assert sum(len(v) for v in a.values()) == 300
    assert 100 < len(a["train"]) < 200 and 10 < len(a["val"]) < 60


# -- config errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("kw, msg", [
    ({"train_fraction": 0.95}, "train_fraction \\+ val_fraction must be < 1"),
    ({"val_fraction": 0.0}, "val_fraction"),
    ({"sandbox_layers": ("bwarp",)}, "unknown sandbox layer"),
    ({"sandbox_workers": 0}, "workers must be ≥ 1"),
])
def test_code_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        CodeConfig(name="humaneval", **kw)


def test_cli_reports_bad_sandbox_settings_before_writing(tmp_path, capsys):
    code = main(["run", "--task", "mbpp", "--algo", "grpo", "--set", "task.sandbox_layers=[bwarp]",
                 "--set", "task.reward=some", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "task.sandbox_layers[0]: 'bwarp' is not valid" in err and "task.reward" in err
    assert not (tmp_path / "o").exists()


def test_missing_data_is_one_clear_error(tmp_path):
    task = HumanEval(CodeConfig(name="humaneval", data_path=str(tmp_path)))
    try:
        with pytest.raises(BadInput, match=r"has no \[Hh\]uman\[Ee\]val\*\.jsonl file"):
            task.splits()
    finally:
        task.close()


# -- real data ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def code_dir():
    return data_dir("code")


@pytest.fixture(scope="module")
def humaneval(code_dir):
    task = HumanEval(CodeConfig(name="humaneval", data_path=str(code_dir)))
    yield task
    task.close()


def test_humaneval_all_134_canonical_pass_and_wrong_fail(humaneval, code_dir):
    rows = read_jsonl(code_dir / "humaneval.jsonl", HumanEval.FIELDS)
    assert len(rows) == 134
    right = humaneval.grade_batch(rows, [r["canonical_solution"] for r in rows])
    assert [r["task_id"] for r, g in zip(rows, right) if not g.correct] == []
    assert all(g.reward == 1.0 for g in right)
    fenced = humaneval.grade_batch(rows, ["```python\n" + r["prompt"] + r["canonical_solution"] + "```" for r in rows])
    assert all(g.correct for g in fenced)
    wrong = humaneval.grade_batch(rows, ["    return None\n"] * len(rows))
    assert not any(g.correct for g in wrong)
    hacks = humaneval.grade_batch(rows[:3], ["    import os; os._exit(0)\n", "    exit(0)\n",
                                             "    raise SystemExit(0)\n"])
    assert not any(g.correct for g in hacks)


def test_humaneval_splits_and_prompts(humaneval):
    s = humaneval.splits()
    ids = [{r["task_id"] for r in s[k]} for k in ("train", "val", "test")]
    assert sum(map(len, ids)) == 134 and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    row = s["test"][0]
    assert humaneval.prompt(row) == row["prompt"]
    chat = HumanEval(CodeConfig(name="humaneval", style="chat", data_path=humaneval.cfg.data_path))
    try:
        msgs = chat.prompt(row)
        assert msgs == [{"role": "user", "content": HUMANEVAL_CHAT.format(prompt=row["prompt"])}]
    finally:
        chat.close()


def test_mbpp_all_200_references_pass_and_wrong_fail(code_dir):
    rows = read_jsonl(code_dir / "mbpp_sample.jsonl", MBPP.FIELDS)
    assert len(rows) == 200
    task = MBPP(MBPPConfig(name="mbpp", data_path=str(code_dir)))
    try:
        right = task.grade_batch(rows, [r["code"] for r in rows])
        assert [r["task_id"] for r, g in zip(rows, right) if not g.correct] == []
        wrong = task.grade_batch(rows, ["```python\ndef nothing():\n    pass\n```"] * len(rows))
        assert not any(g.correct for g in wrong)
        classes = [g.error_class for g in wrong]  # the tests call an undefined function
        assert set(classes) <= {"NameError", "TypeError"} and classes.count("NameError") > 150
        assert {g.error_class for g in right} == {None}
        s = task.splits()
        assert sum(len(v) for v in s.values()) == 200 and all(s.values())
        r0 = rows[0]
        assert task.prompt(r0) == ("You are an expert Python programmer, and here is your task: " + r0["text"]
                                   + " Your code should pass these tests:\n\n" + "\n".join(r0["test_list"]) + "\n")
    finally:
        task.close()


def _stub_everything_hack(row: dict) -> str:
    """The MBPP hack shape of issue 38: every name the tests read (modules included: ``math``,
    ``re``, ...) bound in the candidate's program to an object that answers every call and attribute
    with True, and every function the reference defines returning None."""
    import ast

    from rlsuite.tasks.code import _free_names

    tests = "\n".join(row["test_list"])
    defs = [st.name for st in ast.parse(row["code"]).body if isinstance(st, (ast.FunctionDef, ast.ClassDef))]
    stubs = sorted(n for n in _free_names(tests) if n not in defs and n.isidentifier() and n != "assert")
    lines = ["class _Yes:", "    def __getattr__(self, k):", "        return lambda *a, **kw: True",
             "    def __call__(self, *a, **kw):", "        return True"]
    lines += [f"{n} = _Yes()" for n in stubs]
    lines += [f"def {d}(*a, **kw):\n    return None" for d in defs]
    return "```python\n" + "\n".join(lines) + "\n```\n"


def test_mbpp_a_candidate_cannot_answer_for_the_tests_modules(code_dir):
    """Issue 38's reward hack: a candidate binding ``math`` to a stub whose ``isclose`` is always True
    got reward 1 for a wrong answer on every layer (the judge bound every name the reference binds,
    its modules included, to the candidate's). The judge now runs the reference's imports itself.
    The row of the report, then the same shape on every one of the 200 rows (each must fail), and
    the reference still passes."""
    row = {"task_id": 9100, "text": "Area of a circle.", "test_setup_code": "", "challenge_test_list": [],
           "code": "import math\ndef circle_area(r):\n    return math.pi * r * r",
           "test_list": ["assert math.isclose(circle_area(2), 12.566370614359172, rel_tol=1e-6)"]}
    hack = ("```python\nclass _M:\n    isclose = staticmethod(lambda *a, **k: True)\nmath = _M()\n"
            "def circle_area(r):\n    return -1\n```\n")
    rows = read_jsonl(code_dir / "mbpp_sample.jsonl", MBPP.FIELDS)
    task = MBPP(MBPPConfig(name="mbpp", data_path=str(code_dir)))
    try:
        g = task.grade_batch([row, row], [hack, row["code"]])
        assert (g[0].reward, g[0].correct) == (0.0, False) and g[0].error_class == "AssertionError"
        assert g[1].correct
        hacked = task.grade_batch(rows, [_stub_everything_hack(r) for r in rows])
        assert [r["task_id"] for r, h in zip(rows, hacked) if h.correct or h.reward > 0] == []
        assert sum("import " in r["code"] for r in rows) > 20  # the shape is exercised: many references import
    finally:
        task.close()


def test_fraction_reward(code_dir):
    rows = read_jsonl(code_dir / "mbpp_sample.jsonl", MBPP.FIELDS)[:1]
    task = MBPP(MBPPConfig(name="mbpp", data_path=str(code_dir), reward="fraction"))
    try:
        first = rows[0]["test_list"][0]  # make exactly one of the three asserts pass
        fn, arg_out = first.split("assert ", 1)[1].split("==", 1)
        hack = f"def {fn.split('(')[0].strip()}(*a):\n    return {arg_out.strip()}\n"
        g = task.grade_batch(rows * 2, [rows[0]["code"], hack])
        assert g[0].reward == 1.0 and g[0].correct
        assert g[1].reward == pytest.approx(1 / 3) and not g[1].correct
    finally:
        task.close()
    he = HumanEval(CodeConfig(name="humaneval", data_path=str(code_dir), reward="fraction"))
    try:
        row = read_jsonl(code_dir / "humaneval.jsonl", HumanEval.FIELDS)[0]
        assert he.grade(row, row["canonical_solution"]).reward == 1.0
        assert 0 < len(split_check(row["test"]))
    finally:
        he.close()


@pytest.mark.slow
def test_humaneval_run_with_the_tiny_model(code_dir, tmp_path, capsys):
    code = main(["run", "--task", "humaneval", "--algo", "grpo", "--seed", "1", "--set", f"task.data_path={code_dir}",
                 "--budget", "samples=16", "--set", "eval.max_prompts=4",
                 "--set", "eval.test_prompts=4", "--set", "rollout.max_new_tokens=32",
                 "--set", "model.warm_start=none", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err


def test_redefining_a_prompt_helper_or_eq_no_longer_passes(humaneval, code_dir):
    rows = {r["task_id"]: r for r in read_jsonl(code_dir / "humaneval.jsonl", HumanEval.FIELDS)}
    row = rows["HumanEval/32"]  # find_zero: the tests assert poly(coeffs, candidate(coeffs)) ≈ 0
    poly_hack = "```python\ndef poly(xs, x):\n    return 0\n\n\ndef find_zero(xs: list):\n    return 0.0\n```\n"
    eq_hack = ("```python\nclass A:\n    def __eq__(s, o):\n        return True\n\n\n"
               "def has_close_elements(numbers, threshold):\n    return A()\n```\n")
    row0 = rows["HumanEval/0"]
    native = humaneval.sandbox.run_many([humaneval_program(row, poly_hack), humaneval_program(row0, eq_hack)])
    assert [r.status for r in native] == ["passed", "passed"]  # how version 1 graded them
    g = humaneval.grade_batch([row, row0], [poly_hack, eq_hack])
    assert [x.correct for x in g] == [False, False] and [x.error for x in g] == [None, None]
    assert g[1].error_class == "AssertionError"


def test_redefining_a_builtin_the_tests_call_does_not_help(humaneval):
    row = {"task_id": "T/abs", "prompt": "def half(x: float) -> float:\n    \"\"\"Half of x.\"\"\"\n",
           "entry_point": "half", "canonical_solution": "    return x / 2\n",
           "test": "def check(candidate):\n    assert abs(candidate(3.0) - 1.5) < 1e-9\n"}
    hack = ("```python\nimport builtins\nbuiltins.abs = lambda x: 0\nabs = lambda x: 0\n\n\n"
            "def half(x):\n    return 7\n```\n")
    assert humaneval.sandbox.run(humaneval_program(row, hack)).passed  # version 1 was fooled
    g = humaneval.grade_batch([row, row], [hack, row["canonical_solution"]])
    assert [x.correct for x in g] == [False, True]
