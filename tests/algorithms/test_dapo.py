"""DAPO: clip-higher worked by hand (ε 0.2 / 0.28: per-token loss, token-mean, clip fractions, mean
generation probability), the overlong reward shaping, the dynamic-sampling filter of all-equal
groups, and overlong filtering of truncated rows."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, LN, algo, group, make_batch, t


# ========================================================================================
# dapo — clip-higher, overlong shaping, dynamic-sampling filter, overlong filtering

def test_dapo_clip_higher_asymmetric():
    a = algo("dapo")
    assert (a.cfg.clip_eps_low, a.cfg.clip_eps_high) == (0.2, 0.28) and a.aggregation == "token-mean"
    # clip range [0.8, 1.28]:
    # (Â = 1, r = 1.25) → −1.25 (inside: GRPO's symmetric 0.2 would clip it to −1.2)
    # (Â = 1, r = 1.4)  → max(−1.4, −1.28) = −1.28
    # (Â = −1, r = 0.75) → max(0.75, 0.8) = 0.8
    # (Â = −1, r = 0.85) → 0.85
    # (Â = −1, r = 1.4)  → max(1.4, 1.28) = 1.4 (upper clip never binds for Â < 0)
    # token-mean: (−1.25 − 1.28 + 0.8 + 0.85 + 1.4)/5 = 0.52/5 = 0.104
    ratio = [[1, 1.25, 1.4, 1], [1, 0.75, 0.85, 1.4]]
    mask = [[0, 1, 1, 0], [0, 1, 1, 1]]
    old = t([[0, LN(0.4), LN(0.5), 0], [0, LN(0.8), LN(0.2), LN(0.5)]])
    logp = old + torch.log(t(ratio)) * t(mask)
    batch = make_batch(mask, [0, 0], [1.0, 0.0], old_logp=old, adv=t([[0, 1, 1, 0], [0, -1, -1, -1]]))
    loss, m = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.25, -1.28, 0], [0, 0.8, 0.85, 1.4]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(0.104)
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 5)
    assert m["stats/clip_frac_high"].item() == pytest.approx(1 / 5)
    assert m["stats/clip_frac_low"].item() == pytest.approx(1 / 5)
    # mean generation probability π_θ: (0.5, 0.7, 0.6, 0.17, 0.7)/5 = 2.67/5 = 0.534
    assert float(m["algo/dapo/gen_prob_mean"]) == pytest.approx(0.534)


def test_dapo_overlong_penalty_values():
    # max_new_tokens = L_max = 10, buffer 0.2 → L_cache = 2, L_exp = 8
    # |y| = 5 → 0;  8 (= L_exp) → 0;  9 → (8 − 9)/2 = −0.5;  10 (= L_max) → (8 − 10)/2 = −1
    ctx = dataclasses.replace(CTX, max_new_tokens=10, group_size=4)
    a = algo("dapo")
    r = a.rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.5, 0.0, 0.0]))
    # penalty factor 0.5 halves it: 9 → −0.25, 10 → −0.5
    r = algo("dapo", overlong_penalty=0.5).rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.75, 0.5, 0.0]))
    # no shaping under overlong = filter / none
    for mode in ("filter", "none"):
        r = algo("dapo", overlong=mode).rewards(group([1.0, 1.0, 1.0, 0.0], lengths=[8, 9, 10, 5]), ctx)
        torch.testing.assert_close(r.float(), torch.tensor([1.0, 1.0, 1.0, 0.0]))


def test_dapo_filter_drops_all_equal_groups():
    a = algo("dapo")
    # group 5: scores (1, 1, 1) → dropped even though the shaped rewards differ (the filter reads
    # the accuracy); group 2: (1, 0, 1) → kept
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    batch = make_batch([[0, 1]] * 6, [5, 5, 5, 2, 2, 2], [1.0, 0.5, 0.0, 1.0, 0.0, 1.0], scores=scores)
    keep = a.filter(batch, CTX)
    assert keep.tolist() == [False, False, False, True, True, True]
    # all-zero group dropped as well
    batch = make_batch([[0, 1]] * 4, [0, 0, 1, 1], [0.0, 0.0, 1.0, 0.0], scores=torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert a.filter(batch, CTX).tolist() == [False, False, True, True]
    assert algo("dapo", dynamic_sampling=False).filter(batch, CTX) is None


def test_dapo_overlong_filter_masks_truncated_rows():
    a = algo("dapo", overlong="filter")
    # R = (1, 0, 0), GRPO z-score (2/√3, −1/√3, −1/√3); sample 1 truncated → its row leaves the loss
    mask = [[0, 1, 1], [0, 1, 1], [0, 1, 0]]
    batch = make_batch(mask, [0, 0, 0], [1.0, 0.0, 0.0], truncated=[False, True, False])
    out = a.advantages(batch, CTX)
    torch.testing.assert_close(out.loss_mask, t([[0, 1, 1], [0, 0, 0], [0, 1, 0]]))
    r3 = math.sqrt(3)
    torch.testing.assert_close(out.adv, t([[0, 2 / r3, 2 / r3], [0, 0, 0], [0, -1 / r3, 0]]), rtol=1e-5, atol=1e-5)
    assert out.metrics["algo/dapo/overlong_frac"] == pytest.approx(1 / 3)
    # shaping mode keeps the batch's mask
    assert algo("dapo").advantages(batch, CTX).loss_mask is None
