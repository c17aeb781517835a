"""AGRO: GGPO's mean contrast with no reference refresh and ``seq-mean-token-sum``. Its defaults, and
on GGPO's example (``hand_full_batch.py``) the gradient worked by hand: ∂/∂log π = −Â_i/N on every
token of y_i (row 0: −0.533333/5)."""

from __future__ import annotations

import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import D, t
from tests.algorithms.hand_full_batch import CTX, GG_BATCH, algo, with_adv


def test_agro_defaults_and_sequence_sum_gradient():
    a = algo("agro", beta=0.5)
    assert a.cfg.contrast == "mean" and a.cfg.refresh_every is None and a.aggregation == "seq-mean-token-sum"
    _, b = with_adv(a, GG_BATCH)
    x = torch.zeros(5, 3, dtype=D, requires_grad=True)
    loss, _ = a.loss(Forward(logp=x), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, 3).backward()
    # seq-mean-token-sum: ∂/∂log π_it = −Â_i/N on every token of y_i; N = 5: row 0 −0.533333/5 = −0.106667
    torch.testing.assert_close(x.grad[0], t([0, -(0.8 - 0.8 / 3) / 5, -(0.8 - 0.8 / 3) / 5]))
