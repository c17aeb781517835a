"""GSPO: the sequence ratio s_i = exp(mean_t log r_it), the sequence-level clip and
``seq-mean-token-mean`` worked by hand (value, gradient, clipped-token fraction; the same numbers
from ``gspo_token`` when Â is per sequence), and the defaults ε = 3e-4 / 4e-4 with the sequence
clip fraction."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, grad_of_agg, make_batch, t


# ========================================================================================
# gspo / gspo_token — s_i = exp(mean_t log r_it), sequence-level clip; seq-mean-token-mean

GSPO_MASK = [[0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 0]]
GSPO_LOGR = [[0, 0.3, -0.1, 0.1], [0, 0.2, 0.4, 0], [0, 0.2, 0.4, 0]]   # per-token log r
GSPO_ADV = [1.0, 1.0, -1.0]
E1, E3 = math.exp(0.1), math.exp(0.3)     # 1.1051709, 1.3498588


def _gspo_batch():
    old = t([[0, -1.0, -2.0, -0.5], [0, -0.7, -1.1, 0], [0, -0.9, -1.3, 0]])
    batch = make_batch(GSPO_MASK, [0, 0, 0], [1.0, 1.0, 0.0], old_logp=old,
                       adv=t(GSPO_ADV)[:, None] * t(GSPO_MASK))
    return batch, old + t(GSPO_LOGR)


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_sequence_ratio_and_clip_by_hand(name):
    # ε_l = ε_r = 0.2 for readable numbers (clip range [0.8, 1.2])
    a = algo(name, clip_eps_low=0.2, clip_eps_high=0.2)
    assert a.aggregation == "seq-mean-token-mean"
    # row 0: s = exp((0.3 − 0.1 + 0.1)/3) = e^0.1 = 1.105171, Â = 1 → inside → ℓ = −1.105171 on all
    #        3 tokens (its first token alone has r = e^0.3 = 1.35 which a token clip would clip)
    # row 1: s = exp((0.2 + 0.4)/2) = e^0.3 = 1.349859, Â = 1 → clipped → ℓ = −1.2 on both tokens
    # row 2: same s, Â = −1 → max(1.349859, 1.2) → ℓ = 1.349859 on both tokens
    batch, logp = _gspo_batch()
    loss, m, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, -E1, -E1, -E1], [0, -1.2, -1.2, 0], [0, E3, E3, 0]]))
    # J = (−1.105171 − 1.2 + 1.349859)/3 = −0.318437
    agg = aggregate(loss, batch.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx(-0.318437, abs=1e-6)
    # ∂J/∂logp_it = (1/N)·(−Â_i·s_i/|y_i|) unless clipped:
    #   row 0: −e^0.1/9 = −0.122797;  row 1: 0 (clipped);  row 2: +e^0.3/6 = 0.224976
    torch.testing.assert_close(grad, t([[0, -E1 / 9, -E1 / 9, -E1 / 9], [0, 0, 0, 0], [0, E3 / 6, E3 / 6, 0]]))
    # clipped-token fraction: the 2 tokens of row 1 out of 7
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 7)


def test_gspo_defaults_and_sequence_clip_fraction():
    a = algo("gspo")
    assert (a.cfg.clip_eps_low, a.cfg.clip_eps_high, a.cfg.kl_coef) == (3e-4, 4e-4, 0.0)
    # with [1 − 3e-4, 1 + 4e-4]: row 0 (s = e^0.1, Â > 0) and row 1 (e^0.3, Â > 0) are clipped,
    # row 2 (Â < 0, s > 1) is not: tokens 5/7, sequences 2/3
    batch, logp = _gspo_batch()
    loss, m = a.loss(Forward(logp=logp), batch, CTX)
    assert m["stats/clip_frac"].item() == pytest.approx(5 / 7)
    assert m["algo/gspo/seq_clip_frac"].item() == pytest.approx(2 / 3)
    torch.testing.assert_close(loss[0], t([0, -1.0004, -1.0004, -1.0004]))
