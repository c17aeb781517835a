"""Dr. GRPO: truncated samples' rewards set to 0, and the mean-only advantage with
``seq-mean-token-sum-norm`` worked by hand (−2/27, and a gradient −Â_i/(N·L) independent of
|y_i|)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from tests.algorithms.hand import CTX, algo, grad_of_agg, group, make_batch, t


# ========================================================================================
# dr_grpo — truncated → reward 0; Â = R − mean (no std); seq-mean-token-sum-norm with L

def test_dr_grpo_truncated_rewards_zero():
    a = algo("dr_grpo")
    # scores (1, 1, 0), sample 1 truncated → (1, 0, 0)
    r = a.rewards(group([1.0, 1.0, 0.0], lengths=[3, 3, 1], truncated=[False, True, False]), CTX)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 0.0, 0.0]))
    # the switch off keeps the task's grade
    r = algo("dr_grpo", zero_truncated=False).rewards(group([1.0, 1.0, 0.0], truncated=[False, True, False]), CTX)
    torch.testing.assert_close(r.float(), torch.tensor([1.0, 1.0, 0.0]))


def test_dr_grpo_mean_only_advantage_and_constant_normaliser():
    a = algo("dr_grpo")
    assert a.aggregation == "seq-mean-token-sum-norm"
    assert a.needs == {"old_logp"}                   # β = 0: no reference model
    # 1 prompt × 3, L = max_new_tokens = 3; rewards after truncation zeroing: (1, 0, 0)
    # mean 1/3 → Â = (2/3, −1/3, −1/3) — no std division (GRPO would give 2/√3, −1/√3, −1/√3)
    mask = [[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 0, 0]]
    batch = make_batch(mask, [0, 0, 0], [1.0, 0.0, 0.0], scores=torch.tensor([1.0, 1.0, 0.0]),
                       truncated=[False, True, False])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t([2 / 3, -1 / 3, -1 / 3])[:, None] * t(mask))
    # on-policy (r = 1): ℓ = −Â per token; token sums: row 0: −2, row 1: +1, row 2: +1/3
    # seq-mean-token-sum-norm: (−2 + 1 + 1/3)/(N·L) = (−2/3)/9 = −2/27 = −0.0740741
    # (seq-mean-token-mean would give (−2/3 + 1/3 + 1/3)/3 = 0: the length bias Dr. GRPO removes)
    old = -0.7 * t(mask)
    batch = batch.replace(adv=adv, old_logp=old)
    loss, _, grad = grad_of_agg(a, old, batch)
    agg = aggregate(loss, batch.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert agg.item() == pytest.approx(-2 / 27)
    # ∂/∂logp_t = −Â_i/(N·L), independent of |y_i|: −2/27 on row 0, +1/27 on rows 1 and 2
    torch.testing.assert_close(grad, t([-2 / 27, 1 / 27, 1 / 27])[:, None] * t(mask))
