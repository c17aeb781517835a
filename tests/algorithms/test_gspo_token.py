"""GSPO-token (``gspo_token``, GSPO's Eq. 13): the per-token ratio s_it = sg[s_i]·π_θ(y_it)/sg[π_θ(y_it)]
with s_i = exp(mean_t log r_it), clipped per token, so that each token can carry its own advantage.
Worked by hand with token-level advantages, where it departs from GSPO (which takes the sequence
mean of Â_it): the per-token loss, the ``seq-mean-token-mean`` value, the gradient (only through a
token's own log π, none on a clipped token) and the ratio statistics. With one advantage per
sequence it gives GSPO's numbers (``test_gspo.py`` runs its example on both entries).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from tests.algorithms.hand import CTX, algo, grad_of_agg, make_batch, t

# 2 responses of 2 tokens after one prompt column; ε_low = ε_high = 0.2 (clip range [0.8, 1.2]).
#   row 0: log r = (0.2, 0.4) → s_0 = exp((0.2 + 0.4)/2) = e^0.3 = 1.349859 on both tokens; Â = (+1, −1)
#   row 1: log r = (0.1, −0.1) → s_1 = exp(0) = 1 on both tokens;                             Â = (0.5, 0.5)
TOK_MASK = [[0, 1, 1], [0, 1, 1]]
TOK_LOGR = [[0, 0.2, 0.4], [0, 0.1, -0.1]]
TOK_ADV = [[0, 1.0, -1.0], [0, 0.5, 0.5]]
E3 = math.exp(0.3)  # 1.3498588


def _tok_batch():
    old = t([[0, -1.0, -2.0], [0, -0.5, -0.7]])  # arbitrary π_old log-probs
    return make_batch(TOK_MASK, [0, 0], [1.0, 0.0], old_logp=old, adv=t(TOK_ADV)), old + t(TOK_LOGR)


def test_gspo_token_with_token_level_advantages_by_hand():
    a = algo("gspo_token", clip_eps_low=0.2, clip_eps_high=0.2)
    assert a.aggregation == "seq-mean-token-mean"
    batch, logp = _tok_batch()
    loss, m, grad = grad_of_agg(a, logp, batch)
    # per token ℓ = max(−Â·s, −Â·clip(s, 0.8, 1.2)):
    #   row 0, token 1 (Â = +1): max(−1.349859, −1.2) = −1.2 (clipped)
    #   row 0, token 2 (Â = −1): max(1.349859, 1.2) = 1.349859 (s > 1 + ε with Â < 0: not clipped)
    #   row 1 (Â = 0.5, s = 1): −0.5 on both tokens
    torch.testing.assert_close(loss, t([[0, -1.2, E3], [0, -0.5, -0.5]]))
    # seq-mean-token-mean: row means (−1.2 + 1.349859)/2 = 0.074929 and −0.5 → J = (0.074929 − 0.5)/2 = −0.212535
    agg = aggregate(loss, batch.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx((-1.2 + E3) / 4 - 0.25)
    assert agg.item() == pytest.approx(-0.212535, abs=1e-6)
    # ∂ℓ_it/∂log π_it = −Â_it·s_i where not clipped (sg[s_i] passes no gradient to the other tokens),
    # × 1/(N·|y_i|) = 1/4:
    #   row 0: 0 (clipped), +1.349859/4 = 0.337465;  row 1: −0.5/4 = −0.125 on both tokens
    torch.testing.assert_close(grad, t([[0, 0, E3 / 4], [0, -0.125, -0.125]]))
    # one of the 4 tokens is clipped; mean ratio (2·1.349859 + 2·1)/4 = 1.174929
    assert m["stats/clip_frac"].item() == pytest.approx(1 / 4)
    assert m["stats/ratio_mean"].item() == pytest.approx((2 * E3 + 2) / 4)
    # approx_kl per token: mean of log π_old − log π = −(0.2 + 0.4 + 0.1 − 0.1)/4 = −0.15
    assert m["stats/approx_kl"].item() == pytest.approx(-0.15)
    # GSPO on the same batch takes the sequence mean of Â: row 0 (1 − 1)/2 = 0 → ℓ = 0, no gradient;
    # row 1 as above → J = (0 − 0.5)/2 = −0.25
    gspo = algo("gspo", clip_eps_low=0.2, clip_eps_high=0.2)
    loss, _, grad = grad_of_agg(gspo, logp, batch)
    torch.testing.assert_close(loss, t([[0, 0, 0], [0, -0.5, -0.5]]))
    assert aggregate(loss, batch.loss_mask, gspo.aggregation, CTX.max_new_tokens).item() == pytest.approx(-0.25)
    torch.testing.assert_close(grad, t([[0, 0, 0], [0, -0.125, -0.125]]))
