"""A*-PO: the optimal value V* = β1·log mean exp(r/β1) of the reference samples, the regression target
r − V* from the rewards hook (graded once per prompt), the rows of all-incorrect prompts left out of the
loss, the squared error of β2·Σ log π/π_ref against the target and its gradient, worked by hand. The
definitions are TRL 1.16.0's ``A2POTrainer._estimate_optimal_values`` and ``compute_loss``
(``trl/experimental/a2po/a2po_trainer.py``), on the same inputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms.a_star_po import optimal_value
from rlsuite.algorithms.base import Group
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, make_batch, t

# V* of reference rewards (1, 0, 0, 0), β1 = 0.5: 0.5·(ln(e² + 3) − ln 4) = 0.5·(ln 10.389056 − 1.386294)
#   = 0.5·(2.340753 − 1.386294) = 0.477229
V1 = 0.477229


@pytest.mark.parametrize("rewards, beta1, v", [
    ([1, 0, 0, 0], 0.5, V1),
    ([1, 1, 0, 0], 0.5, 0.716890),  # 0.5·(ln(2e² + 2) − ln 4) = 0.5·(2.820078 − 1.386294)
    ([1, 1, 1, 1], 0.5, 1.0),       # 0.5·(ln 4e² − ln 4) = 0.5·2
    ([1, 0, 0, 0], 1.0, 0.357374),  # ln(e + 3) − ln 4 = 1.743668 − 1.386294
    ([0, 0, 0, 0], 0.5, 0.0),       # all incorrect: exactly 0
])
def test_optimal_value_by_hand(rewards, beta1, v):
    assert optimal_value(t(rewards), beta1) == pytest.approx(v, abs=1e-6)
    assert optimal_value(t([0.0] * 8), beta1) == 0.0


def _group(scores, anchors, calls):
    def grade(text):
        calls.append(text)
        return 1.0 if text == "ok" else 0.0
    return Group(prompt="q", example=None, completions=("c",) * len(scores), parsed=(None,) * len(scores),
                 scores=torch.tensor(scores), grade=grade, anchors=anchors)


def test_rewards_are_the_target_and_v_star_is_estimated_once():
    a, calls = algo("a_star_po"), []
    r = a.rewards(_group([1.0, 0.0], ("ok", "no", "no", "no"), calls), CTX)
    torch.testing.assert_close(r, t([1 - V1, -V1]), rtol=0, atol=1e-6)  # r − V*: 0.522771, −0.477229
    assert len(calls) == 4
    a.rewards(_group([0.0, 0.0], ("ok", "no", "no", "no"), calls), CTX)
    assert len(calls) == 4  # the prompt's V* is cached (stage 1 runs once per prompt)
    assert a.state_dict()["v_star"]["q"] == pytest.approx(V1, abs=1e-6)
    fresh = algo("a_star_po")
    fresh.load_state_dict(a.state_dict())
    fresh.rewards(_group([1.0], ("no",) * 4, calls), CTX)  # restored: no new grades, the old V*
    assert len(calls) == 4
    # without anchors (hooks outside the trainer) V* comes from the group's scores (1, 0, 0, 0) and is counted
    b = algo("a_star_po")
    torch.testing.assert_close(b.rewards(_group([1.0, 0.0, 0.0, 0.0], (), []), CTX), t([1 - V1, -V1, -V1, -V1]),
                               rtol=0, atol=1e-6)
    out = b.advantages(make_batch([[0, 1]], [0], [0.5]), CTX)
    assert out.metrics["algo/a_star_po/anchorless_groups"] == 1.0


# Rows 0, 1: a prompt with V* = 0.477229 (scores 1, 0); rows 2, 3: a prompt whose reference never solved it
# (V* = 0, so the target equals the score). Prompt width 1; row 0 has 2 response tokens, the others 1 or 2.
MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 0], [0, 1, 1]]
SCORES = [1.0, 0.0, 1.0, 0.0]
TARGET = [1 - V1, -V1, 1.0, 0.0]
LOGP = [[0, -0.5, -1.0], [0, -2.0, -1.0], [0, -0.4, 0], [0, -0.7, -0.1]]
REF = [[0, -1.0, -2.0], [0, -1.0, -0.0], [0, -0.3, 0], [0, -0.2, -0.3]]  # Σ(log π − log π_ref): 1.5, −2.0, ...


def batch():
    return make_batch(MASK, [0, 0, 1, 1], TARGET, scores=t(SCORES), ref_logp=t(REF))


def test_advantages_drop_all_incorrect_prompts_and_loss_by_hand():
    a = algo("a_star_po", beta2=0.1)
    out = a.advantages(batch(), CTX)
    # V* = score − target = (0.477229, 0.477229, 0, 0): rows 2, 3 leave the loss mask
    torch.testing.assert_close(out.loss_mask, t([[0, 1, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0]]))
    torch.testing.assert_close(out.adv, t([[0, 1 - V1, 1 - V1], [0, -V1, -V1], [0, 0, 0], [0, 0, 0]]),
                               rtol=0, atol=1e-6)
    assert out.metrics["algo/a_star_po/dropped_frac"] == 0.5
    assert out.metrics["algo/a_star_po/v_star_mean"] == pytest.approx(V1 / 2, abs=1e-6)
    b = dataclasses.replace(batch(), adv=out.adv, extras=dict(out.extras), loss_mask=out.loss_mask)
    logp = t(LOGP).requires_grad_(True)
    loss, m = a.loss(Forward(logp=logp), b, CTX)
    # row 0: implicit = 0.1·1.5 = 0.15, error 0.15 − 0.522771 = −0.372771, squared 0.138958
    # row 1: implicit = 0.1·(−2.0) = −0.2, error −0.2 + 0.477229 = 0.277229, squared 0.076856
    # each row's squared error sits on every one of its tokens
    torch.testing.assert_close(loss, t([[0, 0.138958, 0.138958], [0, 0.076856, 0.076856], [0, 0, 0], [0, 0, 0]]),
                               rtol=0, atol=2e-6)
    assert float(m["algo/a_star_po/implicit_reward_mean"]) == pytest.approx(-0.025)  # (0.15 − 0.2)/2
    # seq-mean-token-mean: (1/N)·Σ_rows sq-err, N = 4 rows (the dropped rows count: loss.empty_rows = count)
    total = aggregate(loss, b.loss_mask, a.aggregation, CTX.max_new_tokens)
    assert float(total.detach()) == pytest.approx((0.138958 + 0.076856) / 4, abs=1e-6)
    total.backward()
    # ∂/∂log π_t = (1/N)·2·error·β2: row 0: 0.5·(−0.372771)·0.1 = −0.018639; row 1: 0.5·0.277229·0.1 = 0.013861
    torch.testing.assert_close(logp.grad, t([[0, -0.018639, -0.018639], [0, 0.013861, 0.013861], [0, 0, 0],
                                             [0, 0, 0]]), rtol=0, atol=1e-6)
    # TRL's mean over the rows it keeps (loss.empty_rows = skip): (0.138958 + 0.076856)/2 = 0.107907
    assert float(aggregate(loss.detach(), b.loss_mask, a.aggregation, CTX.max_new_tokens, empty_rows="skip")) == \
        pytest.approx(0.107907, abs=1e-6)


def test_filter_off_keeps_every_row_and_regresses_on_the_score():
    a = algo("a_star_po", beta2=0.1, filter_all_incorrect=False)
    out = a.advantages(batch(), CTX)
    assert out.loss_mask is None and out.metrics["algo/a_star_po/dropped_frac"] == 0.0
    b = dataclasses.replace(batch(), adv=out.adv, extras=dict(out.extras))
    loss, _ = a.loss(Forward(logp=t(LOGP)), b, CTX)
    # row 2: implicit 0.1·(−0.4 + 0.3) = −0.01, target 1 → (−1.01)² = 1.0201
    # row 3: implicit 0.1·(−0.5 + 0.2) = −0.03, target 0 → 0.0009
    torch.testing.assert_close(loss[2:], t([[0, 1.0201, 0], [0, 0.0009, 0.0009]]))


def test_declarations_and_config_checks():
    a = algo("a_star_po", num_value_samples=5)
    assert a.anchors_per_prompt == 5 and {"ref_anchor", "ref_logp"} <= a.needs
    assert not a.on_policy_pg and not a.group_relative and not a.old_logp_before_update
    with pytest.raises(ValueError, match="kl_where = reward"):
        algo("a_star_po", kl_coef=0.1, kl_where="reward")
    algo("a_star_po", kl_coef=0.1, kl_where="reward", filter_all_incorrect=False)  # allowed without the filter
