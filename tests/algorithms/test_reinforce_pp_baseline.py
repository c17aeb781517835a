"""REINFORCE++-baseline: the group-mean-centred reward, then whitening over the batch's policy
tokens (token-weighted), worked by hand; its KL settings (k3, in the loss)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import CTX, algo, make_batch, t


def test_reinforce_pp_baseline_group_mean_then_global_whitening():
    a = algo("reinforce_pp_baseline")
    assert a.cfg.kl_where == "loss" and a.cfg.kl_estimator == "k3"
    # prompt 0: R = (1, 0), lengths (3, 1) → centred (0.5, −0.5)
    # prompt 1: R = (3, 1), lengths (2, 2) → centred (1, −1)
    # token values: 0.5 ×3, −0.5, 1 ×2, −1 ×2 (8 tokens); mean 1/8 = 0.125
    # dev: 0.375 ×3, −0.625, 0.875 ×2, −1.125 ×2; Σ dev² = 0.421875 + 0.390625 + 1.53125 + 2.53125
    #   = 4.875; unbiased var 4.875/7 = 0.6964286, std 0.8345230
    #   → 0.449359, −0.748931, 1.048503, −1.348076 (token-weighted: not symmetric within a group)
    mask = [[0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0]]
    out = a.advantages(make_batch(mask, [0, 0, 1, 1], [1.0, 0.0, 3.0, 1.0]), CTX)
    s = math.sqrt(4.875 / 7)
    expected = t([0.375 / s, -0.625 / s, 0.875 / s, -1.125 / s])[:, None] * t(mask)
    torch.testing.assert_close(out.adv, expected, rtol=1e-6, atol=1e-6)
    assert out.adv[1, 1].item() == pytest.approx(-0.748931, abs=1e-6)
