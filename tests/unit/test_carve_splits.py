"""One split rule for every data task (tasks.base.carve_splits): with a single file, test is
carved before val, so a row that both hashes select lands in test for gsm8k and math alike."""

from __future__ import annotations

from rlsuite.tasks.base import carve_splits, hash_split
from rlsuite.tasks.gsm8k import GSM8K, GSM8KConfig
from rlsuite.tasks.math import Math, MathConfig


def _both(fraction: float) -> str:
    return next(k for k in (f"q{i}" for i in range(100_000))
                if hash_split(k, fraction) and hash_split(k, fraction, "test"))


def test_a_row_selected_for_val_and_test_lands_in_test():
    f = 0.3
    key = _both(f)
    rows = [{"q": key}] + [{"q": f"other{i}"} for i in range(50)]
    sp = carve_splits(rows, None, "q", f)
    assert {"q": key} in sp["test"] and {"q": key} not in sp["val"] and {"q": key} not in sp["train"]
    assert sorted(r["q"] for s in sp.values() for r in s) == sorted(r["q"] for r in rows)  # a partition
    given = carve_splits(rows, [{"q": "t"}], "q", f)  # with a test file nothing is carved for test
    assert given["test"] == [{"q": "t"}] and {"q": key} in given["val"]


def test_gsm8k_and_math_put_the_same_row_in_the_same_split(tmp_path, monkeypatch):
    f = 0.3
    key = _both(f)
    g = tmp_path / "gsm8k.jsonl"
    g.write_text("".join(f'{{"question": "{q}", "answer": "x\\n#### 1"}}\n' for q in [key, "a", "b", "c"]))
    m = tmp_path / "math.jsonl"
    m.write_text("".join(f'{{"problem": "{q}", "solution": "\\\\boxed{{1}}"}}\n' for q in [key, "a", "b", "c"]))
    gs = GSM8K(GSM8KConfig(name="gsm8k", data_path=str(g), val_fraction=f)).splits()
    ms = Math(MathConfig(name="math", data_path=str(m), val_fraction=f)).splits()
    assert [r["question"] for r in gs["test"]].count(key) == 1
    assert [r["problem"] for r in ms["test"]].count(key) == 1
