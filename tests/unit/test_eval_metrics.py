"""pass@k and maj@k (reports/METRICS.md §2)."""

from __future__ import annotations

import math

import pytest

from rlsuite.suite.evaluate import maj_at_k, pass_at_k


def _comb_pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n−c, k)/C(n, k) with exact integers (math.comb(a, k) = 0 when a < k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_at_k_matches_combinatorial_formula():
    checked = 0
    for n in range(1, 21):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_comb_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("n,c,k,expected", [
    (10, 3, 1, 0.3),                 # pass@1 = c/n
    (5, 2, 2, 1 - 3 / 10),           # 1 − C(3,2)/C(5,2) = 1 − 3/10 = 0.7
    (4, 1, 2, 1 - 3 / 6),            # 1 − C(3,2)/C(4,2) = 0.5
    (100, 0, 10, 0.0),               # nothing correct
    (6, 6, 3, 1.0),                  # everything correct
    (200, 10, 50, 1 - math.comb(190, 50) / math.comb(200, 50)),  # large n (stable product)
])
def test_pass_at_k_examples(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_pass_at_k_raises_for_k_above_n():
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


@pytest.mark.parametrize("n,c,k", [(5, 3, 3), (5, 5, 1), (8, 4, 5), (2, 1, 2)])
def test_pass_at_k_is_one_when_fewer_wrong_than_k(n, c, k):
    assert n - c < k
    assert pass_at_k(n, c, k) == 1.0


def test_pass_at_k_increases_with_k():
    vals = [pass_at_k(16, 3, k) for k in range(1, 17)]
    assert all(a < b for a, b in zip(vals, vals[1:14]))   # strictly increasing until it hits 1
    assert vals[-1] == 1.0


# ----------------------------------------------------------------------------------------
# maj@k


def test_maj_at_k_majority_correct():
    # votes a:2, b:1, c:1 → 'a' (correct)
    assert maj_at_k(["a", "b", "a", "c"], [True, False, True, False], 4) == 1.0


def test_maj_at_k_majority_wrong():
    # votes b:3, a:1 → 'b' (wrong)
    assert maj_at_k(["a", "b", "b", "b"], [True, False, False, False], 4) == 0.0


def test_maj_at_k_tie_goes_to_first_seen():
    # b:2, a:2 → b seen first (wrong) → 0;  reversed order → a first (right) → 1
    assert maj_at_k(["b", "a", "a", "b"], [False, True, True, False], 4) == 0.0
    assert maj_at_k(["a", "b", "b", "a"], [True, False, False, True], 4) == 1.0


def test_maj_at_k_none_does_not_vote():
    # None×3 would win if it voted; without it, a:1, b:1 tie → 'a' first (correct) → 1
    assert maj_at_k([None, None, None, "a", "b"], [False, False, False, True, False], 5) == 1.0
    # all None → no vote → 0
    assert maj_at_k([None, None], [False, False], 2) == 0.0


def test_maj_at_k_averages_disjoint_chunks():
    # n = 7, k = 2 → ⌊7/2⌋ = 3 chunks; the 7th sample is unused.
    # chunk 0: a, a → a (correct) = 1; chunk 1: b, c tie → b (wrong) = 0; chunk 2: c, c → c (correct) = 1
    parsed = ["a", "a", "b", "c", "c", "c", "z"]
    correct = [True, True, False, True, True, True, True]
    assert maj_at_k(parsed, correct, 2) == pytest.approx(2 / 3)


def test_maj_at_1_is_accuracy_over_samples():
    # k = 1: each sample its own chunk; None counts as 0 → 2/4
    assert maj_at_k(["a", None, "b", "c"], [True, False, False, True], 1) == pytest.approx(0.5)


def test_maj_at_k_needs_k_samples():
    with pytest.raises(ValueError):
        maj_at_k(["a"], [True], 2)
