"""A-3PO: the interpolation weight α from the versions, the log-linear and linear approximations of
π_prox, the decoupled clipped loss with the behaviour weight π_prox/μ and its cap, the recompute arm,
the metrics and the update counter, worked by hand. The approximations use the inputs of AReaL's
``tests/test_prox_approx.py`` (``test_mixed_versions_in_batch``, ``test_linear_approximation_
probabilities``, ``test_alpha_clamping``, ``test_version_zero_division_handling``), and the loss inputs
were checked against AReaL's ``ppo_actor_loss_fn`` with token-level ratio rejection
(inclusionAI/AReaL commit 4aef98d): per-token −0.428881 / 0.578929 (ε 0.2, cap 5), 0.607825 for the
clipped row (ε 0.05), 0 for the rejected row (cap 0.9), −0.624019 / 0.639816 without rejection."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.a3po import approximate_prox_logp, interpolation_alpha
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, make_batch, t

A = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO z-score of rewards (1, 0): ±0.5/(√0.5 + 1e-6) = ±0.7071058


@pytest.mark.parametrize("current, versions, alpha", [
    (4, [0, 2], [0.75, 0.5]),  # (3 − 0)/(4 − 0) = 0.75; (3 − 2)/(4 − 2) = 0.5   (AReaL mixed versions)
    (5, [4], [0.0]),           # one update stale: (4 − 4)/(5 − 4) = 0            (AReaL alpha clamping)
    (3, [3], [0.0]),           # on policy: v_θ − v = 0 → 0                        (AReaL zero division)
    (2, [0], [0.5]),           # (1 − 0)/(2 − 0)
    (1, [3], [0.0]),           # a row newer than v_θ: clamped to 0
])
def test_interpolation_alpha_by_hand(current, versions, alpha):
    torch.testing.assert_close(interpolation_alpha(current, torch.tensor(versions)), t(alpha))


def test_prox_approximations_by_hand():
    mu, lp = t([[-1.0], [-2.0]]), t([[-1.5], [-2.2]])
    # loglinear: −1 + 0.75·(−0.5) = −1.375;  −2 + 0.5·(−0.2) = −2.1
    torch.testing.assert_close(approximate_prox_logp(mu, lp, t([0.75, 0.5]), "loglinear"), t([[-1.375], [-2.1]]))
    # linear: log(0.25·e^−1 + 0.75·e^−1.5) = log(0.091970 + 0.167348) = log 0.259317 = −1.349702
    #         log(0.5·e^−2 + 0.5·e^−2.2) = log(0.067668 + 0.055402) = log 0.123069 = −2.095008
    torch.testing.assert_close(approximate_prox_logp(mu, lp, t([0.75, 0.5]), "linear"), t([[-1.349702], [-2.095008]]),
                               rtol=0, atol=2e-6)
    # AReaL's probability-space case: μ = 0.5, π_θ = 0.25, α = 0.5 → log 0.375
    got = approximate_prox_logp(t([[math.log(0.5)]]), t([[math.log(0.25)]]), t([0.5]), "linear")
    assert float(got) == pytest.approx(math.log(0.375))
    # α = 0 gives μ exactly and α = 1 gives π_θ exactly, in both spaces
    for method in ("loglinear", "linear"):
        torch.testing.assert_close(approximate_prox_logp(mu, lp, t([0.0, 1.0]), method), t([[-1.0], [-2.2]]))


# Two one-token rows of a group, rewards (1, 0), behaviour versions (0, 2), v_θ = 4 (four updates done).
MU = [[0, -1.0], [0, -2.0]]
LOGP = [[0, -1.5], [0, -2.2]]


def batch(**kw):
    return make_batch([[0, 1], [0, 1]], [0, 0], [1.0, 0.0], behav_logp=t(MU), policy_version=torch.tensor([0, 2]),
                      **kw)


def _run(a, b, logp=LOGP):
    out = a.advantages(b, CTX)
    b = dataclasses.replace(b, adv=out.adv, extras={**b.extras, **out.extras})
    x = t(logp).requires_grad_(True)
    loss, m = a.loss(Forward(logp=x), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, CTX.max_new_tokens).backward()
    return out, loss.detach(), m, x.grad


def _stale(**cfg):
    a = algo("a3po", **cfg)
    for _ in range(4):  # v_θ = 4
        a.after_update(CTX)
    return a


def test_a3po_loss_by_hand():
    out, loss, m, grad = _run(_stale(), batch(old_logp=t([[0, -1.2], [0, -2.1]])))
    assert out.metrics["algo/a3po/alpha_mean"] == pytest.approx(0.625)       # (0.75 + 0.5)/2
    assert out.metrics["algo/a3po/staleness_mean"] == pytest.approx(3.0)    # (4 + 2)/2
    # row 0: prox −1.375, r = e^(−1.5 + 1.375) = e^−0.125 = 0.882497 ∈ [0.8, 1.2]; w = e^(−1.375 + 1) = e^−0.375
    #        ℓ = −Â·r·w = −0.7071058·e^−0.5 = −0.428881   (w·r = π_θ/μ)
    # row 1: prox −2.1, r = e^−0.1 = 0.904837; w = e^−0.1 → ℓ = +0.7071058·e^−0.2 = 0.578929
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.578929]]), rtol=0, atol=1e-6)
    # token-mean over 2 tokens; ∂ℓ/∂log π = ℓ (prox and w are detached) → ℓ/2
    torch.testing.assert_close(grad, t([[0, -0.214441], [0, 0.289465]]), rtol=0, atol=1e-6)
    # metrics: |prox − π_old| = 0.175, 0 → 0.0875; approx KL to π_old: ((−1.2 + 1.5) + (−2.1 + 2.2))/2 = 0.2
    assert float(m["algo/a3po/prox_abs_err"]) == pytest.approx(0.0875)
    assert float(m["stats/approx_kl"]) == pytest.approx(0.2)
    # w: e^−0.375 = 0.687289, e^−0.1 = 0.904837 → mean 0.796063
    assert float(m["algo/a3po/weight_mean"]) == pytest.approx(0.796063, abs=1e-6)


def test_a3po_clip_cap_and_recompute_by_hand():
    # ε 0.05: row 1 (Â < 0, r = 0.904837 < 0.95) is clipped: ℓ = 0.7071058·0.95·e^−0.1 = 0.607825, ∂ = 0;
    # row 0 (Â > 0, r < 1 − ε) keeps the unclipped term (PPO's pessimistic side)
    _, loss, _, grad = _run(_stale(clip_eps_low=0.05, clip_eps_high=0.05), batch())
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.607825]]), rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, t([[0, -0.214441], [0, 0.0]]), rtol=0, atol=1e-6)
    # cap 0.9: row 1's w = 0.904837 > 0.9 is rejected (ℓ = 0), still counted in the normaliser
    _, loss, m, grad = _run(_stale(behaviour_cap=0.9), batch())
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.0]]), rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, t([[0, -0.214441], [0, 0.0]]), rtol=0, atol=1e-6)
    assert float(m["algo/a3po/behaviour_masked_frac"]) == pytest.approx(0.5)
    # no weight: ℓ = −Â·r = −0.7071058·0.882497 = −0.624019;  0.7071058·0.904837 = 0.639816
    _, loss, _, _ = _run(_stale(behaviour_cap=None), batch())
    torch.testing.assert_close(loss, t([[0, -0.624019], [0, 0.639816]]), rtol=0, atol=1e-6)
    # recompute: prox = π_old = (−1.2, −2.5): row 0 r = e^−0.3 = 0.740818 < 0.8 with Â > 0 (unclipped),
    #   w = e^−0.2 → ℓ = −0.7071058·e^−0.5 = −0.428881; row 1 r = e^0.3 = 1.349859 > 1.2 with Â < 0 (unclipped),
    #   w = e^−0.5 → ℓ = 0.7071058·e^−0.2 = 0.578929: the versions play no part
    a = algo("a3po", prox="recompute")
    assert "old_logp" in a.needs and "old_logp" not in algo("a3po").needs
    _, loss, _, _ = _run(a, batch(old_logp=t([[0, -1.2], [0, -2.5]])))
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.578929]]), rtol=0, atol=1e-6)
    # linear: prox = (−1.349702, −2.095008): row 0 r = e^−0.150298 = 0.860452 ∈ [0.8, 1.2], w = e^−0.349702 =
    #   0.704898, ℓ = −0.7071058·0.860452·0.704898 = −0.7071058·e^−0.5 again; row 1 r = e^−0.104992 = 0.900331,
    #   w = e^−0.095008 → ℓ = 0.7071058·e^−0.2 (w·r = π_θ/μ whatever prox is, while r stays inside the clip)
    _, loss, _, _ = _run(_stale(prox="linear"), batch())
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.578929]]), rtol=0, atol=1e-6)


def test_a3po_one_update_stale_is_ppo_against_mu():
    # v_θ = 1, rows sampled at version 0: α = 0, π_prox = μ, w = 1 → ℓ = max(−Â r, −Â clip(r)) with r = π_θ/μ:
    # row 0 r = e^−0.5 = 0.606531 < 0.8, Â > 0 → unclipped −0.7071058·0.606531 = −0.428881;
    # row 1 r = e^−0.2 = 0.818731 ∈ [0.8, 1.2] → 0.7071058·0.818731 = 0.578929
    a = algo("a3po")
    a.after_update(CTX)
    b = dataclasses.replace(batch(), policy_version=torch.tensor([0, 0]))
    out, loss, m, _ = _run(a, b)
    assert out.metrics["algo/a3po/alpha_mean"] == 0.0
    assert float(m["algo/a3po/weight_mean"]) == pytest.approx(1.0)
    torch.testing.assert_close(loss, t([[0, -0.428881], [0, 0.578929]]), rtol=0, atol=1e-6)


def test_a3po_counts_updates_and_restores_them():
    a = _stale()
    assert a.state_dict() == {"updates": 4}
    fresh = algo("a3po")
    fresh.load_state_dict(a.state_dict())
    out = fresh.advantages(batch(), CTX)
    torch.testing.assert_close(out.extras["a3po_alpha"], t([0.75, 0.5]))
    assert not fresh.old_logp_before_update


def test_a3po_skips_the_pi_old_scoring_pass_at_one_update_a_batch_only():
    """The forward pass A-3PO saves: under staleness at one update a batch π_old comes from the update's
    own forward (no scoring pass), with several updates a batch the scoring pass runs (the docstring's
    [ASSUMPTION]); ``prox = recompute`` reads π_old but needs no pass before the update either."""
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.update_plan import old_logp_from_update, update_fields

    def from_update(*sets):
        s = resolve("chain", "a3po", "tiny", 0, sets=[("rollout.sync", "lag"), ("rollout.staleness", 4), *sets])
        a = ALGORITHMS.get("a3po")(s.algo)
        return old_logp_from_update(s, a, update_fields(a.needs, s.model.critic), 128)

    assert from_update() and from_update(("algo.prox", "recompute"))
    assert not from_update(("train.minibatches", 4)) and not from_update(("train.epochs", 2))
