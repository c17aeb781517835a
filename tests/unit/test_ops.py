"""Pure tensor ops (suite.ops): hand-computed values, invariances and slow-loop equivalence."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.ops import (broadcast_to_tokens, clipped_surrogate, clipped_value_loss, gae, group_mean_std,
                               group_normalised_advantage, kl_estimate, masked_mean, masked_sum, masked_var,
                               masked_whiten)

D = torch.float64
SQRT3 = math.sqrt(3.0)


def t(x):
    return torch.tensor(x, dtype=D)


# ----------------------------------------------------------------------------------------
# masked statistics


def test_masked_mean_sum_by_hand():
    x = t([[1.0, 2.0], [3.0, 4.0]])
    m = t([[1.0, 0.0], [1.0, 1.0]])
    assert masked_sum(x, m).item() == 8.0            # 1 + 3 + 4
    assert masked_mean(x, m).item() == pytest.approx(8 / 3)
    torch.testing.assert_close(masked_mean(x, m, dim=-1), t([1.0, 3.5]))
    torch.testing.assert_close(masked_mean(x, m, dim=0), t([2.0, 4.0]))  # (1+3)/2, 4/1


def test_masked_mean_of_empty_mask_is_zero():
    x = t([[1.0, 2.0], [3.0, 4.0]])
    m = t([[0.0, 0.0], [1.0, 0.0]])
    torch.testing.assert_close(masked_mean(x, m, dim=-1), t([0.0, 3.0]))
    assert masked_mean(x, torch.zeros_like(x)).item() == 0.0


def test_masked_var_is_unbiased():
    # valid 1, 3, 5 (100 is masked): mean 3, Σ(x−3)² = 8, unbiased var 8/2 = 4, biased 8/3
    x = t([[1.0, 3.0], [5.0, 100.0]])
    m = t([[1.0, 1.0], [1.0, 0.0]])
    assert masked_var(x, m).item() == pytest.approx(4.0)
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(8 / 3)


def test_masked_whiten_by_hand():
    # valid 1, 3, 5: mean 3, std 2 → (−1, 0, 1); the masked entry is returned as 0.
    x = t([[1.0, 3.0], [5.0, 100.0]])
    m = t([[1.0, 1.0], [1.0, 0.0]])
    torch.testing.assert_close(masked_whiten(x, m), t([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-7, rtol=0)
    # shift_mean=False adds the mean back: (2, 3, 4)
    torch.testing.assert_close(masked_whiten(x, m, shift_mean=False), t([[2.0, 3.0], [4.0, 0.0]]),
                               atol=1e-7, rtol=0)


# ----------------------------------------------------------------------------------------
# group statistics and the GRPO advantage


def test_group_mean_std_unbiased_and_singleton():
    # group 7: rewards 1, 0, 0 → mean 1/3, unbiased var ((2/3)² + 2·(1/3)²)/2 = 1/3 → std 1/√3
    # group 3: rewards 2, 4   → mean 3,   unbiased var (1 + 1)/1 = 2       → std √2
    # group 5: singleton 9    → (0, 1) by convention
    r = t([1.0, 2.0, 0.0, 9.0, 0.0, 4.0])
    g = torch.tensor([7, 3, 7, 5, 7, 3])
    mean, std = group_mean_std(r, g)
    torch.testing.assert_close(mean, t([1 / 3, 3.0, 1 / 3, 0.0, 1 / 3, 3.0]))
    s = 1 / SQRT3
    torch.testing.assert_close(std, t([s, math.sqrt(2), s, 1.0, s, math.sqrt(2)]))


def test_group_normalised_advantage_2x3_by_hand():
    # prompt 0: R = 1, 0, 0 → mean 1/3, std 1/√3 → A = (2/3)√3 = 1.1547, −(1/3)√3 = −0.57735
    # prompt 1: R = 1, 1, 0 → mean 2/3, std 1/√3 → A = (1/3)√3 = 0.57735 (×2), −(2/3)√3 = −1.1547
    r = t([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    hi, lo = 2 / SQRT3, 1 / SQRT3
    torch.testing.assert_close(group_normalised_advantage(r, g), t([hi, -lo, -lo, lo, lo, -hi]),
                               rtol=1e-5, atol=1e-5)
    # mean-only: R − mean
    torch.testing.assert_close(group_normalised_advantage(r, g, scale_by_std=False),
                               t([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3]))


def test_group_advantage_of_constant_group_and_singleton():
    # all-equal group → std 0 → A = 0/(0+ε) = 0; singleton → (R − 0)/(1 + ε) = R
    r = t([0.5, 0.5, 0.5, 2.0])
    g = torch.tensor([0, 0, 0, 1])
    torch.testing.assert_close(group_normalised_advantage(r, g), t([0.0, 0.0, 0.0, 2.0 / (1 + 1e-6)]))


@pytest.mark.parametrize("scale", [True, False])
def test_adding_a_constant_per_group_leaves_advantages_unchanged(scale):
    gen = torch.Generator().manual_seed(1)
    r = torch.rand(12, generator=gen, dtype=D)
    g = torch.arange(4).repeat_interleave(3)
    shift = t([5.0, -3.0, 0.25, 100.0])[g]
    torch.testing.assert_close(group_normalised_advantage(r + shift, g, scale),
                               group_normalised_advantage(r, g, scale), rtol=1e-9, atol=1e-9)


def test_std_scaled_advantage_ignores_reward_scale():
    gen = torch.Generator().manual_seed(2)
    r = torch.rand(12, generator=gen, dtype=D)
    g = torch.arange(4).repeat_interleave(3)
    base = group_normalised_advantage(r, g)
    for c in (0.1, 7.0, 1000.0):
        torch.testing.assert_close(group_normalised_advantage(c * r, g), base, rtol=1e-4, atol=1e-4)
    # … while the mean-only advantage scales with it
    torch.testing.assert_close(group_normalised_advantage(7 * r, g, False), 7 * group_normalised_advantage(r, g, False))


def test_broadcast_to_tokens():
    out = broadcast_to_tokens(t([2.0, -1.0]), t([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    torch.testing.assert_close(out, t([[0.0, 2.0, 2.0], [0.0, -1.0, 0.0]]))


# ----------------------------------------------------------------------------------------
# KL estimators


def test_kl_estimators_by_hand():
    # d = logp − ref = 0.5, −0.5, 0, −20
    logp = t([[0.5, -0.5, 0.0, -20.0]])
    ref = torch.zeros_like(logp)
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), logp)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), t([[0.125, 0.125, 0.0, 200.0]]))
    # k3 = e^{−d} + d − 1: e^{−0.5} − 0.5 = 0.1065307; e^{0.5} − 1.5 = 0.1487213; 0;
    #      e^{20} − 21 ≈ 4.85e8 → clamped to 10
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), t([[0.10653066, 0.14872127, 0.0, 10.0]]),
                               rtol=0, atol=1e-7)


def test_abs_and_straight_through_kl_estimators():
    """verl 0.9.1 ``kl_penalty``: ``abs`` = |d|; a ``+`` suffix keeps the value, takes k2's gradient d
    (``k2+`` is k2). d = 0.5, −0.5: abs = 0.5, 0.5 with gradient ±1; k3+ has k3's value and grad d."""
    logp = t([[0.5, -0.5]]).requires_grad_(True)
    ref = torch.zeros(1, 2)
    torch.testing.assert_close(kl_estimate(logp, ref, "abs"), t([[0.5, 0.5]]))
    for kind, value in (("k1+", [0.5, -0.5]), ("k3+", [0.10653066, 0.14872127]), ("abs+", [0.5, 0.5]),
                        ("k2+", [0.125, 0.125])):
        logp.grad = None
        out = kl_estimate(logp, ref, kind)
        torch.testing.assert_close(out.detach(), t([value]), rtol=0, atol=1e-7)
        out.sum().backward()
        torch.testing.assert_close(logp.grad, t([[0.5, -0.5]]))  # k2's gradient d
    logp.grad = None
    kl_estimate(logp, ref, "k1").sum().backward()
    torch.testing.assert_close(logp.grad, t([[1.0, 1.0]]))  # k1's own gradient, for contrast


def test_kl_uses_difference_not_absolute_values():
    # same d = 0.5 at different absolute log-probs
    out = kl_estimate(t([[-1.0]]), t([[-1.5]]), "k3")
    assert out.item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)


def test_unknown_kl_estimator_raises():
    with pytest.raises(ValueError, match="k1, k2, k3, abs"):
        kl_estimate(t([0.0]), t([0.0]), "k4")


# ----------------------------------------------------------------------------------------
# clipped surrogate

#         A     r      L1 = −A·r   L2 = −A·clip(r, 0.8, 1.2)   max       dual (c = 3)
# case 0  +1    1.5    −1.5        −1.2                        −1.2 (clip, high)
# case 1  +1    0.5    −0.5        −0.8                        −0.5
# case 2  −1    1.5     1.5         1.2                         1.5      1.5
# case 3  −1    0.5     0.5         0.8                         0.8 (clip, low)
# case 4  −1    4.0     4.0         1.2                         4.0      min(4, 3) = 3 (dual)
# case 5  +2    1.1    −2.2        −2.2                        −2.2
# case 6  −2    0.9     1.8         1.8                         1.8
# case 7  masked (r = 9, A = −1)                                0
ADV = t([[1.0, 1.0, -1.0, -1.0], [-1.0, 2.0, -2.0, -1.0]])
RATIO = t([[1.5, 0.5, 1.5, 0.5], [4.0, 1.1, 0.9, 9.0]])
MASK = t([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
OLD = t([[-1.0, -2.0, -0.5, -3.0], [-1.2, -0.7, -2.5, -1.0]])
LOGP = OLD + torch.log(RATIO)


def test_clipped_surrogate_by_hand_no_dual_clip():
    loss, m = clipped_surrogate(LOGP, OLD, ADV, MASK, 0.2, 0.2)
    torch.testing.assert_close(loss, t([[-1.2, -0.5, 1.5, 0.8], [4.0, -2.2, 1.8, 0.0]]))
    # L2 > L1 on cases 0 and 3: 2 of 7 valid tokens
    assert m["stats/clip_frac"].item() == pytest.approx(2 / 7)
    assert m["stats/clip_frac_high"].item() == pytest.approx(1 / 7)   # case 0
    # ratio < 0.8 with A < 0: case 3 only (case 1 has A > 0)
    assert m["stats/clip_frac_low"].item() == pytest.approx(1 / 7)
    assert m["stats/dual_clip_frac"].item() == 0.0
    assert m["stats/ratio_min"].item() == pytest.approx(0.5)
    assert m["stats/ratio_max"].item() == pytest.approx(4.0)       # the masked 9 is ignored
    # ratio mean over valid = (1.5 + 0.5 + 1.5 + 0.5 + 4 + 1.1 + 0.9) / 7 = 10 / 7
    assert m["stats/ratio_mean"].item() == pytest.approx(10 / 7)
    # approx_kl = mean(−log r) over valid
    lr = [1.5, 0.5, 1.5, 0.5, 4.0, 1.1, 0.9]
    assert m["stats/approx_kl"].item() == pytest.approx(-sum(math.log(r) for r in lr) / 7)


def test_clipped_surrogate_dual_clip_active():
    loss, m = clipped_surrogate(LOGP, OLD, ADV, MASK, 0.2, 0.2, dual_clip=3.0)
    torch.testing.assert_close(loss, t([[-1.2, -0.5, 1.5, 0.8], [3.0, -2.2, 1.8, 0.0]]))
    assert m["stats/dual_clip_frac"].item() == pytest.approx(1 / 7)  # case 4


def test_clipped_surrogate_asymmetric_clip():
    # ε_low = 0.1, ε_high = 0.4: case 0 (A=+1, r=1.5) → −clip(1.5, 0.9, 1.4) = −1.4;
    # case 3 (A=−1, r=0.5) → max(0.5, 0.9) = 0.9; case 6 (A=−2, r=0.9) → max(1.8, 1.8) = 1.8
    loss, _ = clipped_surrogate(LOGP, OLD, ADV, MASK, 0.1, 0.4)
    torch.testing.assert_close(loss, t([[-1.4, -0.5, 1.5, 0.9], [4.0, -2.2, 1.8, 0.0]]))


def test_clipped_surrogate_log_ratio_clamped_at_20():
    # log r = 50 would overflow to e^50; clamped to e^20. A = −1 without dual clip: L = e^20.
    loss, _ = clipped_surrogate(t([[50.0]]), t([[0.0]]), t([[-1.0]]), t([[1.0]]), 0.2, 0.2)
    assert loss.item() == pytest.approx(math.exp(20.0))


def test_on_policy_gradient_equals_reinforce():
    # With old_logp = sg[logp] (r = 1), ∇ Σ w·L = −Σ w·A·∇logp (REINFORCE).
    gen = torch.Generator().manual_seed(3)
    feats = torch.randn(4, 5, 3, generator=gen, dtype=D)
    theta = torch.randn(3, generator=gen, dtype=D, requires_grad=True)
    adv = torch.randn(4, 5, generator=gen, dtype=D)
    mask = (torch.rand(4, 5, generator=gen) > 0.3).to(D)
    w = mask / mask.sum()

    logp = -torch.nn.functional.softplus(feats @ theta)  # any differentiable log-prob
    loss, _ = clipped_surrogate(logp, logp.detach(), adv, mask, 0.2, 0.2, dual_clip=3.0)
    (g_ppo,) = torch.autograd.grad((w * loss).sum(), theta)

    logp2 = -torch.nn.functional.softplus(feats @ theta)
    (g_pg,) = torch.autograd.grad((-w * adv * logp2).sum(), theta)
    torch.testing.assert_close(g_ppo, g_pg)
    assert g_pg.abs().sum() > 0


def test_clipped_tokens_have_zero_gradient():
    # case 0 (A = +1, r = 1.5 > 1.2) is clipped → no gradient; case 5 (inside) → −A·r = −2.2
    logp = LOGP.clone().requires_grad_(True)
    loss, _ = clipped_surrogate(logp, OLD, ADV, MASK, 0.2, 0.2)
    loss.sum().backward()
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[1, 1].item() == pytest.approx(-2.2)


# ----------------------------------------------------------------------------------------
# GAE


def test_gae_one_sequence_by_hand():
    # γ = 0.9, λ = 0.8 (γλ = 0.72); r = (0, 0, 0, 1), V = (0.5, 0.4, 0.6, 0.8), V_4 = 0
    # t=3: δ = 1 − 0.8 = 0.2                       Â = 0.2
    # t=2: δ = 0.9·0.8 − 0.6 = 0.12                Â = 0.12 + 0.72·0.2    = 0.264
    # t=1: δ = 0.9·0.6 − 0.4 = 0.14                Â = 0.14 + 0.72·0.264  = 0.33008
    # t=0: δ = 0.9·0.4 − 0.5 = −0.14               Â = −0.14 + 0.72·0.33008 = 0.0976576
    # returns = Â + V = (0.5976576, 0.73008, 0.864, 1.0)
    r = t([[0.0, 0.0, 0.0, 1.0]])
    v = t([[0.5, 0.4, 0.6, 0.8]])
    m = torch.ones_like(r)
    adv, ret = gae(r, v, m, 0.9, 0.8)
    torch.testing.assert_close(adv, t([[0.0976576, 0.33008, 0.264, 0.2]]))
    torch.testing.assert_close(ret, t([[0.5976576, 0.73008, 0.864, 1.0]]))


def test_gae_skips_masked_tokens_in_the_middle():
    # Same sequence with t=1 masked (an observation): its reward (7) and value (100) are
    # ignored, V_{t+1} and Â carry across it.
    # t=3: 0.2; t=2: 0.264; t=1: skipped → 0;
    # t=0: δ = 0.9·V_2 − V_0 = 0.54 − 0.5 = 0.04,  Â = 0.04 + 0.72·0.264 = 0.23008
    r = t([[0.0, 7.0, 0.0, 1.0]])
    v = t([[0.5, 100.0, 0.6, 0.8]])
    m = t([[1.0, 0.0, 1.0, 1.0]])
    adv, ret = gae(r, v, m, 0.9, 0.8)
    torch.testing.assert_close(adv, t([[0.23008, 0.0, 0.264, 0.2]]))
    torch.testing.assert_close(ret, t([[0.73008, 0.0, 0.864, 1.0]]))


def test_gae_trailing_padding_is_terminal():
    # Padding after the last token: the value after it is 0 (terminal), not the pad's value.
    r = t([[0.0, 1.0, 0.0, 0.0]])
    v = t([[0.3, 0.5, 9.0, 9.0]])
    m = t([[1.0, 1.0, 0.0, 0.0]])
    adv, _ = gae(r, v, m, 1.0, 1.0)
    # t=1: δ = 1 − 0.5 = 0.5; t=0: δ = 0.5 − 0.3 = 0.2, Â = 0.2 + 0.5 = 0.7
    torch.testing.assert_close(adv, t([[0.7, 0.5, 0.0, 0.0]]))


def _gae_slow(r, v, m, gamma, lam):
    """Reference: per row, the list of valid positions, scanned backwards."""
    B, T = m.shape
    lam_t = lam if isinstance(lam, torch.Tensor) else torch.full((B, T), float(lam), dtype=v.dtype)
    adv = torch.zeros(B, T, dtype=v.dtype)
    for b in range(B):
        idx = [i for i in range(T) if m[b, i] > 0]
        running, next_v = 0.0, 0.0
        for i in reversed(idx):
            delta = r[b, i].item() + gamma * next_v - v[b, i].item()
            running = delta + gamma * lam_t[b, i].item() * running
            adv[b, i] = running
            next_v = v[b, i].item()
    return adv, (adv + v) * m


def _random_batch(seed, B=5, T=9):
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(B, T, generator=gen, dtype=D)
    v = torch.randn(B, T, generator=gen, dtype=D)
    m = (torch.rand(B, T, generator=gen) > 0.35).to(D)  # gaps anywhere
    m[:, :2] = 0.0                                      # a prompt prefix
    m[0] = 0.0                                          # an empty row
    return gen, r, v, m


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.7, 0.3)])
def test_gae_equals_slow_loop(seed, gamma, lam):
    _, r, v, m = _random_batch(seed)
    adv, ret = gae(r, v, m, gamma, lam)
    ref_adv, ref_ret = _gae_slow(r, v, m, gamma, lam)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


@pytest.mark.parametrize("seed", [0, 5])
def test_gae_per_token_lambda_equals_slow_loop(seed):
    gen, r, v, m = _random_batch(seed)
    lam = torch.rand(r.shape, generator=gen, dtype=D)
    adv, ret = gae(r, v, m, 0.95, lam)
    ref_adv, ref_ret = _gae_slow(r, v, m, 0.95, lam)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_gae_constant_lambda_tensor_equals_scalar():
    _, r, v, m = _random_batch(7)
    a1, r1 = gae(r, v, m, 0.9, 0.6)
    a2, r2 = gae(r, v, m, 0.9, torch.full_like(v, 0.6))
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(r1, r2)


# ----------------------------------------------------------------------------------------
# clipped value loss


def test_clipped_value_loss_by_hand():
    # clip 0.5
    # i0: V=1.0, V_old=0.0, R=0.2: (V−R)² = 0.64; clip V → 0.5: (0.5−0.2)² = 0.09 → ½·0.64 = 0.32
    # i1: V=0.9, V_old=0.0, R=1.0: (V−R)² = 0.01; clip V → 0.5: (0.5−1.0)² = 0.25 → ½·0.25 = 0.125 (clipped)
    # i2: V=2.0, V_old=1.8, R=1.0: inside the range, (1.0)² = 1 → 0.5
    # i3: masked → 0
    v = t([[1.0, 0.9, 2.0, 5.0]])
    old = t([[0.0, 0.0, 1.8, 0.0]])
    ret = t([[0.2, 1.0, 1.0, 0.0]])
    m = t([[1.0, 1.0, 1.0, 0.0]])
    loss, met = clipped_value_loss(v, old, ret, m, 0.5)
    torch.testing.assert_close(loss, t([[0.32, 0.125, 0.5, 0.0]]))
    assert met["value/clip_frac"].item() == pytest.approx(1 / 3)
    # no clipping: ½ (V − R)² = (0.32, 0.005, 0.5, 0)
    loss, met = clipped_value_loss(v, old, ret, m, None)
    torch.testing.assert_close(loss, t([[0.32, 0.005, 0.5, 0.0]]))
    assert met["value/clip_frac"].item() == 0.0


# ----------------------------------------------------------------------------------------
# exact zeros for equal rewards (float rounding of the group / batch statistics)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("G", [2, 3, 8, 16, 64])
@pytest.mark.parametrize("value", [0.7, 0.97, 0.1, 1 / 3, 123.456])
def test_equal_fractional_rewards_give_exactly_zero_advantage(value, G, dtype):
    # before: float32 sums left a residual that 1/(std + 1e-6) amplified (G = 8, r = 0.7 → +0.056)
    r = torch.full((G,), value, dtype=dtype)
    g = torch.zeros(G, dtype=torch.long)
    mean, std = group_mean_std(r, g)
    assert mean.dtype == std.dtype == dtype
    assert (mean == r).all() and (std == 0.0).all()
    for scale in (True, False):
        adv = group_normalised_advantage(r, g, scale)
        assert adv.dtype == dtype and (adv == 0.0).all()


def test_equal_groups_next_to_unequal_ones():
    # float32: groups 0 and 2 are all-equal (exactly 0), group 1 matches the float64 z-score
    r = torch.tensor([0.97, 0.97, 0.97, 0.2, 0.7, 0.45, 123.456, 123.456])
    g = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    adv = group_normalised_advantage(r, g)
    assert adv.dtype == torch.float32
    assert (adv[[0, 1, 2, 6, 7]] == 0.0).all()
    x = r[3:6].double()
    want = (x - x.mean()) / (x.std() + 1e-6)
    torch.testing.assert_close(adv[3:6].double(), want, rtol=1e-6, atol=1e-7)
    # a singleton keeps verl's convention (mean 0, std 1), equal or not
    assert group_normalised_advantage(t([0.7]), torch.tensor([5])).item() == pytest.approx(0.7 / (1 + 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("value", [0.7, 0.97, 1 / 3, 123.456])
def test_masked_whiten_of_equal_values_is_exact(value, dtype):
    # 11 valid tokens of one value (masked entries hold junk): 0 with shift_mean; without it the
    # centred part is 0 and the mean is added back, so the batch is returned unchanged
    mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]], dtype=dtype)
    x = torch.where(mask > 0, torch.tensor(value, dtype=dtype), torch.tensor(-7.5, dtype=dtype))
    out = masked_whiten(x, mask)
    assert out.dtype == dtype and (out == 0.0).all()
    assert (masked_whiten(x, mask, shift_mean=False) == x * mask).all()
    assert (masked_whiten(x, torch.zeros_like(mask)) == 0.0).all()  # empty mask: all zero


def test_masked_whiten_keeps_the_input_dtype():
    x = torch.tensor([[1.0, 3.0], [5.0, 100.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = masked_whiten(x, m)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------------------
# clip fractions with low bits that do not round-trip


def test_value_clip_frac_does_not_count_an_unclipped_token():
    # |V − V_old| = 0.431 < 0.5, but V_old + (V − V_old) ≠ V in float32, so l2 > l1 by a rounding
    v = torch.tensor([[-0.05357092246413231]])
    old = torch.tensor([[0.3777356743812561]])
    ret, m = torch.tensor([[1.0]]), torch.ones(1, 1)
    assert (old + (v - old)).item() != v.item()  # the repro does exercise the rounding
    loss, met = clipped_value_loss(v, old, ret, m, 0.5)
    assert met["value/clip_frac"].item() == 0.0
    assert loss.item() == pytest.approx(0.5 * (v.item() - 1.0) ** 2, rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_value_clip_frac_matches_a_float64_count(seed):
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(16, 256, generator=g) * 0.3  # V, V_old of either sign: low bits vary
    v = torch.randn(16, 256, generator=g) * 0.3
    ret = torch.randn(16, 256, generator=g)
    m = (torch.rand(16, 256, generator=g) > 0.2).float()
    c = 0.5
    frac = clipped_value_loss(v, old, ret, m, c)[1]["value/clip_frac"]
    v6, o6, r6, m6 = v.double(), old.double(), ret.double(), m.double()
    l1, l2 = (v6 - r6) ** 2, (o6 + (v6 - o6).clamp(-c, c) - r6) ** 2  # V − V_old is exact in float64
    want = ((((v6 - o6).abs() > c) & (l2 > l1)).double() * m6).sum()
    assert round(frac.item() * m.sum().item()) == want.item()
    naive = (((old + (v - old).clamp(-c, c) - ret) ** 2 > (v - ret) ** 2).float() * m).sum()
    assert naive > want  # comparing the two float32 losses alone over-counts here


@pytest.mark.parametrize("seed", range(3))
def test_policy_clip_frac_counts_ratios_outside_the_band_that_bind(seed):
    # clamp returns r itself inside the band, so L2 == L1 there: no reconstruction error to guard
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(8, 64, generator=g) * 3
    logp = old + 0.25 * torch.randn(8, 64, generator=g)
    adv = torch.randn(8, 64, generator=g) * 0.7
    m = (torch.rand(8, 64, generator=g) > 0.1).float()
    lo, hi = 0.2, 0.28
    _, met = clipped_surrogate(logp, old, adv, m, lo, hi)
    ratio = torch.exp(logp - old)
    a, r = adv.double(), ratio.double()
    binds = ((r > 1 + hi) & (a > 0)) | ((r < 1 - lo) & (a < 0))
    want = (binds.double() * m.double()).sum() / m.sum()
    assert met["stats/clip_frac"].item() == pytest.approx(want.item(), abs=1e-7)


def test_entropy_keeps_float64_and_upcasts_half_precision():
    from rlsuite.suite.ops import entropy_from_logits

    logits = torch.tensor([[2.0, -1.0, 0.5, 0.25]], dtype=torch.float64)
    p = torch.softmax(logits, -1)
    ref = -(p * p.log()).sum(-1)
    got = entropy_from_logits(logits)
    assert got.dtype == torch.float64 and abs(float(got - ref)) < 1e-14
    assert entropy_from_logits(logits.to(torch.bfloat16)).dtype == torch.float32


def test_entropy_of_float64_logits_is_float64_to_1e12_by_hand():
    """Issue 37: logits (0, ln 2, ln 3) give p = (1/6, 2/6, 3/6) and
    H = ln(6)/6 + ln(3)/3 + ln(2)/2 by hand; a float32 path misses 1e-12 (by about 1e-8 here).
    Float32 logits stay float32 (and agree to float32 rounding)."""
    from rlsuite.suite.ops import entropy_from_logits

    want = math.log(6) / 6 + math.log(3) / 3 + math.log(2) / 2
    logits = torch.tensor([[0.0, math.log(2), math.log(3)], [0.0, 0.0, 0.0]], dtype=torch.float64)
    got = entropy_from_logits(logits)
    assert got.dtype == torch.float64 and got.shape == (2,)
    assert abs(got[0].item() - want) < 1e-12 and abs(got[1].item() - math.log(3)) < 1e-12
    got32 = entropy_from_logits(logits.float())
    assert got32.dtype == torch.float32
    assert abs(got32[0].item() - want) < 1e-6 and abs(got32[1].item() - math.log(3)) < 1e-6
