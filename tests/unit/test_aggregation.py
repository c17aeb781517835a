"""Loss aggregation modes (suite.aggregation): hand values, accumulation equivalence and
padding invariance (algorithms/README.md, "Loss aggregation")."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.aggregation import AGG_MODES, aggregate, aggregation_weights

# A [3, 4] per-token loss and its loss mask (row lengths 2, 4, 1); rows 0 and 1 answer prompt 7,
# row 2 prompt 3 (group ids need not be 0..P−1).
LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0],
                     [5.0, 6.0, 7.0, 8.0],
                     [9.0, 10.0, 11.0, 12.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0],
                     [1.0, 1.0, 1.0, 1.0],
                     [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
GID = torch.tensor([7, 7, 3])
L_CONST = 5

# Σ m·ℓ per row: 1+2 = 3; 5+6+7+8 = 26; 9.  Total 38.  Σ m = 2 + 4 + 1 = 7.  N = 3.
HAND = {
    # Σ mℓ / Σ m = 38 / 7
    "token-mean": 38.0 / 7.0,
    # (1/N) Σ_i row mean = (3/2 + 26/4 + 9/1) / 3 = (1.5 + 6.5 + 9) / 3 = 17/3
    "seq-mean-token-mean": 17.0 / 3.0,
    # (1/N) Σ_i Σ_t mℓ = 38 / 3
    "seq-mean-token-sum": 38.0 / 3.0,
    # Σ mℓ / (N · L) = 38 / (3 · 5) = 38/15
    "seq-mean-token-sum-norm": 38.0 / 15.0,
    # Σ mℓ = 38 (verl's token-sum)
    "token-sum": 38.0,
    # prompt 7 pools rows 0, 1: (3 + 26) / (2 + 4) = 29/6; prompt 3: 9/1; P = 2 → (29/6 + 9) / 2 = 83/12
    "prompt-mean-token-mean": 83.0 / 12.0,
}


def test_modes_are_the_six_documented():
    assert set(AGG_MODES) == set(HAND)


@pytest.mark.parametrize("mode", sorted(HAND))
def test_aggregate_by_hand(mode):
    got = aggregate(LOSS, MASK, mode, L_CONST, group_id=GID)
    assert got.item() == pytest.approx(HAND[mode], rel=1e-6)


def test_seq_mean_token_mean_weights_by_hand():
    # w_{i,t} = m_{i,t} / (N · |y_i|): row 0 → 1/6, row 1 → 1/12, row 2 → 1/3.
    w = aggregation_weights(MASK, "seq-mean-token-mean", L_CONST)
    expected = torch.tensor([[1 / 6, 1 / 6, 0, 0],
                             [1 / 12, 1 / 12, 1 / 12, 1 / 12],
                             [1 / 3, 0, 0, 0]], dtype=torch.float64)  # MASK is float64: so are the weights
    torch.testing.assert_close(w, expected, rtol=1e-15, atol=0)


def test_prompt_mean_token_mean_weights_by_hand():
    # w_{i,t} = m_{i,t} / (P · tokens of row i's prompt): prompt 7 has 2 + 4 = 6 tokens → 1/12 on
    # rows 0 and 1; prompt 3 has 1 token → 1/2 on row 2.  Each prompt's weights sum to 1/P = 1/2.
    w = aggregation_weights(MASK, "prompt-mean-token-mean", L_CONST, group_id=GID)
    expected = torch.tensor([[1 / 12, 1 / 12, 0, 0],
                             [1 / 12, 1 / 12, 1 / 12, 1 / 12],
                             [1 / 2, 0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(w, expected, rtol=1e-15, atol=0)


def test_prompt_mean_token_mean_as_skyrl_on_its_own_test_inputs():
    """SkyRL (a956457) ``tests/backends/skyrl_train/utils/test_ppo_utils.py::test_prompt_mean``:
    rows (1, 2), (3, pad), (5, 6), (7, 8), prompts {0, 1} and {2, 3}; its expected value, worked
    there: prompt 0 (1+2+3)/3 = 2, prompt 1 (5+6+7+8)/4 = 6.5, mean 4.25."""
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    got = aggregate(loss, mask, "prompt-mean-token-mean", 2, group_id=torch.tensor([0, 0, 1, 1]))
    assert got.item() == pytest.approx(4.25)


def test_prompt_mean_token_mean_differs_from_token_and_sequence_means():
    # The same inputs as HAND: 83/12 ≈ 6.917 vs token-mean 38/7 ≈ 5.429 and seq-mean-token-mean 17/3 ≈ 5.667;
    # one prompt per row makes it seq-mean-token-mean; one prompt for the batch makes it token-mean.
    assert HAND["prompt-mean-token-mean"] not in (HAND["token-mean"], HAND["seq-mean-token-mean"])
    one_each = aggregate(LOSS, MASK, "prompt-mean-token-mean", L_CONST, group_id=torch.tensor([0, 1, 2]))
    assert one_each.item() == pytest.approx(17.0 / 3.0)
    one = aggregate(LOSS, MASK, "prompt-mean-token-mean", L_CONST, group_id=torch.tensor([4, 4, 4]))
    assert one.item() == pytest.approx(38.0 / 7.0)


def test_prompt_mean_token_mean_needs_the_group_ids():
    with pytest.raises(ValueError, match="needs each row's group id"):
        aggregation_weights(MASK, "prompt-mean-token-mean", L_CONST)
    with pytest.raises(ValueError, match="needs each row's group id"):
        aggregation_weights(MASK, "prompt-mean-token-mean", L_CONST, group_id=torch.tensor([0, 1]))


def test_prompt_mean_token_mean_empty_group_rule():
    # Prompt 0: rows (1, 2) and (3, pad) → 6/3 = 2; prompt 1: one empty row. count: P = 2 → 2/2 = 1
    # (SkyRL counts every prompt, its token count clamped at 1); skip: P = 1 → 2.
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    gid = torch.tensor([0, 0, 1])
    assert aggregate(loss, mask, "prompt-mean-token-mean", 2, group_id=gid).item() == pytest.approx(1.0)
    assert aggregate(loss, mask, "prompt-mean-token-mean", 2, "skip", group_id=gid).item() == pytest.approx(2.0)


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError) as e:
        aggregation_weights(MASK, "sum-of-tokens", L_CONST)
    for mode in AGG_MODES:
        assert mode in str(e.value)


def test_empty_mask_gives_zero_not_nan():
    zero = torch.zeros(2, 3)
    for mode in AGG_MODES:
        out = aggregate(torch.ones(2, 3), zero, mode, 4, group_id=torch.tensor([0, 1]))
        assert out.item() == 0.0


SPLITS = [[[0], [1], [2]], [[0, 1], [2]], [[0], [1, 2]], [[2, 0], [1]]]


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("split", SPLITS)
def test_accumulated_micro_batches_equal_full_batch_value(mode, split):
    # The trainer computes w on the whole minibatch, then each micro-batch adds Σ w[rows]·ℓ[rows]
    # (split [[0], [1], [2]] cuts prompt 7 in two micro-batches: the same value).
    w = aggregation_weights(MASK, mode, L_CONST, group_id=GID)
    acc = sum((w[rows] * LOSS[rows]).sum() for rows in split)
    assert acc.item() == pytest.approx(HAND[mode], rel=1e-6)


def _param_loss(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A per-token loss with a non-trivial gradient: ℓ_{i,t} = (θ_0 x_{i,t} + θ_1)² · sin(x)."""
    return (theta[0] * x + theta[1]) ** 2 * torch.sin(x)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_accumulated_gradient_equals_full_batch_gradient(mode):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = (torch.rand(5, 7, generator=g) > 0.4).double()
    mask[:, 0] = 1.0  # every row has a token
    theta = torch.tensor([0.7, -0.3], dtype=torch.float64, requires_grad=True)

    gid = torch.tensor([0, 0, 1, 1, 1])  # prompt 1 spans two micro-batches
    full = aggregate(_param_loss(theta, x), mask, mode, 9, group_id=gid)
    (g_full,) = torch.autograd.grad(full, theta)

    w = aggregation_weights(mask, mode, 9, group_id=gid)  # once, on the whole batch
    theta.grad = None
    for rows in ([0, 1], [2], [3, 4]):
        (w[rows] * _param_loss(theta, x[rows])).sum().backward()
    torch.testing.assert_close(theta.grad, g_full, rtol=1e-6, atol=1e-9)


def test_per_micro_batch_normaliser_would_differ():
    # Sanity of the property above: re-normalising each micro-batch on its own is *not* the
    # full-batch token-mean: rows [0] and [1, 2] give 3/2 + 35/5 = 8.5 ≠ 38/7.
    naive = (aggregate(LOSS[[0]], MASK[[0]], "token-mean", L_CONST)
             + aggregate(LOSS[1:], MASK[1:], "token-mean", L_CONST))
    assert naive.item() == pytest.approx(8.5)
    assert naive.item() != pytest.approx(HAND["token-mean"])


@pytest.mark.parametrize("mode", AGG_MODES)
def test_extra_masked_columns_change_nothing(mode):
    # Right-pad with 3 columns of masked garbage loss (and a left pad column): same value.
    garbage = torch.full((3, 3), 123.0, dtype=torch.float64)
    loss = torch.cat([garbage[:, :1], LOSS, garbage], dim=1)
    mask = torch.cat([torch.zeros(3, 1, dtype=torch.float64), MASK, torch.zeros(3, 3, dtype=torch.float64)], dim=1)
    assert aggregate(loss, mask, mode, L_CONST, group_id=GID).item() == pytest.approx(HAND[mode], rel=1e-6)


def test_the_empty_row_rule_and_verl_on_the_same_inputs():
    """Rows (1, 2, 3), (4, 5, pad) and an empty row; L = 3. verl 0.9.1 ``agg_loss`` on these inputs
    (run once from its wheel, values recorded): token-mean 3.0, token-sum 15.0, seq-mean-token-mean
    3.25, seq-mean-token-sum 7.5, seq-mean-token-sum-norm 2.5 (its N skips the empty row; its norm is
    the mask's width 3 = L here). ``empty_rows=skip`` gives exactly those; ``count`` (the default)
    counts the empty row in N = 3."""
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    verl = {"token-mean": 3.0, "token-sum": 15.0, "seq-mean-token-mean": 3.25, "seq-mean-token-sum": 7.5,
            "seq-mean-token-sum-norm": 2.5}
    for mode, want in verl.items():
        assert aggregate(loss, mask, mode, 3, "skip").item() == pytest.approx(want)
    count = {"token-mean": 3.0, "token-sum": 15.0, "seq-mean-token-mean": 6.5 / 3, "seq-mean-token-sum": 5.0,
             "seq-mean-token-sum-norm": 15.0 / 9}
    for mode, want in count.items():
        assert aggregate(loss, mask, mode, 3).item() == pytest.approx(want)
    with pytest.raises(ValueError, match="valid: count, skip"):
        aggregation_weights(mask, "token-mean", 3, "drop")


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_a_float64_loss_is_aggregated_in_float64(mode):
    """A float64 loss with a bool mask: the weights take the loss's dtype, so the aggregate equals a
    float64 reference to 1e-12 (float32 weights carried ~3e-8 relative error)."""
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(4, 7, generator=g, dtype=torch.float64) / 3
    mask = torch.rand(4, 7, generator=g) > 0.3
    m = mask.double()
    n = m.sum(-1, keepdim=True).clamp(min=1)
    ref = {"token-mean": (loss * m).sum() / m.sum(), "token-sum": (loss * m).sum(),
           "seq-mean-token-mean": ((loss * m).sum(-1, keepdim=True) / n).sum() / 4,
           "seq-mean-token-sum": (loss * m).sum() / 4, "seq-mean-token-sum-norm": (loss * m).sum() / (4 * 7)}[mode]
    got = aggregate(loss, mask, mode, 7)
    assert got.dtype == torch.float64
    assert abs(float(got - ref)) <= 1e-12 * max(1.0, abs(float(ref)))
    assert aggregation_weights(mask, mode, 7).dtype == torch.float32  # a bool mask alone: float32 weights
