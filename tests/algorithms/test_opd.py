"""OPD and the ``algo.distill_coef`` term (``suite/distill.py``): the per-token reverse-KL advantage,
its clamp, the clipped surrogate (ε, dual clip 3) with ``token-mean``, the metrics, a teacher equal to
the student (exactly 0), the term λ·Σ w·ℓ added to another entry, and the configuration checks
(``distill_coef`` refused on opd; ``algo.teacher`` refused where nothing reads it, or when it names
nothing), all worked by hand on 2 rows.

The inputs are the ones run once through verl 0.9.1 (``kl_penalty(log_prob, teacher, "k1")`` clamped
to ±10, then ``compute_policy_loss_vanilla`` with clip 0.2, dual clip 3.0, ``token-mean``, on the
response columns only); its outputs are recorded in ``VERL_*`` below and agree with the hand values.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.distill import distill_loss, loss_term, reverse_kl_advantage
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, D, algo, make_batch, t

# 2 rows, T = 4: one prompt column, then 3 response positions; 5 policy tokens.
MASK = [[0, 1, 1, 1], [0, 1, 1, 0]]
GID = [0, 0]
LOGP = [[0, -1.0, -0.5, -2.0], [0, -0.2, -3.0, 0]]        # log π_θ of the sampled tokens
TEACHER = [[0, -1.5, -0.5, -0.4], [0, -14.0, -1.0, 0]]    # log π_T of the same tokens
# k1 = log π_θ − log π_T: row 0: −1.0+1.5 = 0.5, −0.5+0.5 = 0, −2.0+0.4 = −1.6
#                         row 1: −0.2+14.0 = 13.8, −3.0+1.0 = −2.0
# A = clamp(−k1, ±10): row 0: −0.5, 0, 1.6; row 1: −13.8 → −10 (clamped), 2.0
ADV = [[0, -0.5, 0.0, 1.6], [0, -10.0, 2.0, 0]]
# log π_θ − log π_old: 0 except row 0 token 3 (0.5: r = e^0.5 = 1.6487) and row 1 token 1 (1.5: r = e^1.5 = 4.4817)
DELTA = [[0, 0, 0, 0.5], [0, 1.5, 0, 0]]

# verl 0.9.1 on the same inputs (response columns; float32): loss and ∂loss/∂log_prob
VERL_ON_POLICY = (1.3799999952316284, [[0.1, 0.0, -0.32], [2.0, -0.4, 0.0]])
VERL_OFF_POLICY = (5.315999984741211, [[0.1, 0.0, 0.0], [0.0, -0.4, 0.0]], {"pg_clipfrac": 0.2})


def batch(old=None, teacher=TEACHER):
    old_logp = t(LOGP) if old is None else old
    return make_batch(MASK, GID, [1.0, 0.0], old_logp=old_logp * t(MASK), teacher_logp=t(teacher) * t(MASK))


def run(alg, b):
    logp = t(LOGP).clone().requires_grad_(True)
    loss, m = alg.loss(Forward(logp=logp), b, CTX)
    total = aggregate(loss, b.loss_mask, alg.aggregation, CTX.max_new_tokens)
    total.backward()
    return loss.detach(), total.detach(), m, logp.grad


def close(x, want, tol=1e-9):
    torch.testing.assert_close(torch.as_tensor(x, dtype=D), t(want), rtol=0, atol=tol)


def test_advantage_is_the_negative_reverse_kl_sample_clamped():
    close(reverse_kl_advantage(t(LOGP), t(TEACHER), t(MASK)), ADV)
    # no clamp: row 1 token 1 keeps −13.8
    close(reverse_kl_advantage(t(LOGP), t(TEACHER), t(MASK), None), [[0, -0.5, 0.0, 1.6], [0, -13.8, 2.0, 0]])
    # no gradient flows through the advantage
    lp = t(LOGP).requires_grad_(True)
    assert not reverse_kl_advantage(lp, t(TEACHER), t(MASK)).requires_grad


def test_opd_advantages_are_zero_and_rewards_unused():
    alg = algo("opd")
    out = alg.advantages(batch(), CTX)
    close(out.adv, [[0, 0, 0, 0], [0, 0, 0, 0]])
    assert {"old_logp", "teacher_logp"} <= alg.needs and alg.aggregation == "token-mean"


def test_opd_on_policy_loss_gradient_and_metrics_by_hand():
    # r = 1 everywhere: ℓ = max(−A·1, −A·clip(1)) = −A; dual clip for A < 0: min(−A, −3A) = −A (= |A|)
    # ℓ = row 0: 0.5, 0, −1.6; row 1: 10, −2.0 → token-mean = (0.5 + 0 − 1.6 + 10 − 2.0)/5 = 6.9/5 = 1.38
    # ∂/∂log π_θ = −A·r/5 (A detached): 0.1, 0, −0.32 | 2.0, −0.4
    loss, total, m, grad = run(algo("opd"), batch())
    close(loss, [[0, 0.5, 0.0, -1.6], [0, 10.0, -2.0, 0]])
    close(total, 1.38)
    close(grad, [[0, 0.1, 0.0, -0.32], [0, 2.0, -0.4, 0]])
    close(total, VERL_ON_POLICY[0], 1e-6)
    close(grad[:, 1:], VERL_ON_POLICY[1], 1e-6)
    # distill/reverse_kl: mean k1 = (0.5 + 0 − 1.6 + 13.8 − 2.0)/5 = 10.7/5 = 2.14; one token of 5 hit the clamp
    close(m["distill/reverse_kl"], 2.14)
    close(m["distill/adv_clamped_frac"], 0.2)
    close(m["stats/clip_frac"], 0.0)


def test_opd_clips_the_ratio_and_dual_clips():
    old = t(LOGP) - t(DELTA)
    # row 0 token 3: A = 1.6, r = e^0.5 = 1.64872 > 1.2 → ℓ = max(−1.6·1.64872, −1.6·1.2) = −1.92, no gradient
    # row 1 token 1: A = −10, r = e^1.5 = 4.48169: max(44.8169, 12) = 44.8169 > cap −A·3 = 30 → ℓ = 30, no gradient
    # others as on policy: 0.5, 0, −2.0 → token-mean = (0.5 + 0 − 1.92 + 30 − 2.0)/5 = 26.58/5 = 5.316
    loss, total, m, grad = run(algo("opd"), batch(old))
    close(loss, [[0, 0.5, 0.0, -1.92], [0, 30.0, -2.0, 0]], 1e-9)
    close(total, 5.316)
    close(grad, [[0, 0.1, 0.0, 0.0], [0, 0.0, -0.4, 0]])
    close(total, VERL_OFF_POLICY[0], 1e-6)
    close(grad[:, 1:], VERL_OFF_POLICY[1], 1e-6)
    # clip_frac: l2 > l1 on row 0 token 3 only (−1.92 > −2.638) → 1/5 (verl's pg_clipfrac 0.2)
    close(m["stats/clip_frac"], 0.2)
    close(m["stats/dual_clip_frac"], 0.2)
    # ε = 0.7: r = 1.64872 < 1.7 is inside → ℓ = −1.6·1.64872 = −2.637954 and the gradient −A·r/5 = −0.527590
    loss, _, _, grad = run(algo("opd", clip_eps=0.7), batch(old))
    close(loss[0, 3], -1.6 * 1.6487212707001282, 1e-9)
    close(grad[0, 3], -1.6 * 1.6487212707001282 / 5, 1e-9)


def test_opd_without_clamp():
    # A = −13.8 on row 1 token 1: ℓ = 13.8 → (0.5 + 0 − 1.6 + 13.8 − 2.0)/5 = 10.7/5 = 2.14, gradient 13.8/5 = 2.76
    _, total, m, grad = run(algo("opd", adv_clamp=None), batch())
    close(total, 2.14)
    close(grad[1, 1], 2.76)
    close(m["distill/adv_clamped_frac"], 0.0)
    # c = 1: A = −0.5, 0, 1, −1, 1 → ℓ = 0.5, 0, −1, 1, −1: (0.5 − 1 + 1 − 1)/5 = −0.1; 3 of 5 tokens clamped
    _, total, m, _ = run(algo("opd", adv_clamp=1.0), batch())
    close(total, -0.1)
    close(m["distill/adv_clamped_frac"], 0.6)


def test_a_teacher_equal_to_the_student_gives_exactly_zero():
    loss, total, m, grad = run(algo("opd"), batch(teacher=LOGP))
    assert torch.equal(loss, torch.zeros_like(loss)) and float(total) == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))
    assert float(m["distill/reverse_kl"]) == 0.0


def test_the_term_added_to_another_entry_by_hand():
    # loss_term: λ·Σ w·ℓ with the entry's aggregation weights w; token-mean: w = 1/5 on the 5 tokens.
    # λ = 0.5, on policy: 0.5 · 1.38 = 0.69; metrics renamed under distill/
    cfg = algo("grpo", distill_coef=0.5).cfg
    w = t(MASK) / 5
    lp = t(LOGP).requires_grad_(True)
    val, m = loss_term(cfg, w, lp, t(LOGP) * t(MASK), t(TEACHER) * t(MASK), t(MASK))
    val.backward()
    close(val.detach(), 0.69)
    close(lp.grad, [[0, 0.05, 0.0, -0.16], [0, 1.0, -0.2, 0]])   # 0.5 × the on-policy gradient above
    assert "distill/clip_frac" in m and not any(k.startswith("stats/") for k in m)
    close(m["distill/reverse_kl"], 2.14)
    # off (the default): no term, no teacher needed
    assert loss_term(algo("grpo").cfg, w, lp, t(LOGP), t(TEACHER), t(MASK)) is None
    assert "teacher_logp" in algo("grpo", distill_coef=0.5).needs and "teacher_logp" not in algo("grpo").needs


def test_distill_loss_matches_opd_loss():
    b = batch(t(LOGP) - t(DELTA))
    lp = t(LOGP)
    a, _ = distill_loss(lp, b.old_logp, b.teacher_logp, b.loss_mask)
    c, _ = algo("opd").loss(Forward(logp=lp), b, CTX)
    assert torch.equal(a, c)


def test_configuration_checks():
    with pytest.raises(ValueError, match="distill_coef must be 0 with opd"):
        algo("opd", distill_coef=0.1)
    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.spec import resolve

    with pytest.raises(BadInput, match=r"algo.teacher=tiny is read only by a distilling entry"):
        resolve("arith", "grpo", "tiny", 0, sets=[("algo.teacher", "tiny")], budgets=[("updates", 1)])
    with pytest.raises(BadInput, match=r"algo.teacher=/nonexistent/x: not a folder"):
        resolve("arith", "opd", "tiny", 0, sets=[("algo.teacher", "/nonexistent/x")], budgets=[("updates", 1)])
    ok = resolve("arith", "grpo", "tiny", 0, sets=[("algo.teacher", "tiny"), ("algo.distill_coef", 0.1)],
                 budgets=[("updates", 1)])
    assert ok.algo.teacher == "tiny" and ok.algo.distill_coef == 0.1
    # at their defaults both fields stay out of spec.json's algo section (so no earlier run id moved)
    base = resolve("arith", "grpo", "tiny", 0, budgets=[("updates", 1)])
    assert "teacher" not in base.to_dict()["algo"] and "distill_coef" not in base.to_dict()["algo"]
    assert dataclasses.replace(base.algo, distill_coef=0.1) != base.algo


def test_a_recorded_spec_with_a_teacher_elsewhere_rebuilds(tmp_path):
    """A run's spec.json names its teacher by a path on the machine that ran it (the committed
    ``benchmarks/opd/runs`` name ``/work/runs/opd/...``): rebuilding that document on another machine
    (reports, the committed-runs migration test, a job) is not refused for it; a new run naming a
    teacher that is not here still is, and loading it (a resume) fails with the same one line."""
    from rlsuite.suite.distill import load_teacher
    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.spec import resolve, spec_from_dict

    there = tmp_path / "teacher_run"
    (there / "final").mkdir(parents=True)
    (there / "final" / "config.json").write_text("{}")
    spec = resolve("arith", "opd", "tiny", 0, sets=[("algo.teacher", str(there))], budgets=[("updates", 1)])
    doc = spec.to_dict()
    (there / "final" / "config.json").unlink()
    (there / "final").rmdir()
    there.rmdir()
    again = spec_from_dict(doc)
    assert again.algo.teacher == str(there) and again.run_id == spec.run_id
    with pytest.raises(BadInput, match=r"not a folder, a registered model or a Hugging Face id"):
        resolve("arith", "opd", "tiny", 0, sets=[("algo.teacher", str(there))], budgets=[("updates", 1)])
    with pytest.raises(BadInput, match=r"not a folder, a registered model or a Hugging Face id"):
        load_teacher(again, None, None, None)
    # the consistency check of the document itself stays: a teacher on an entry that never reads it
    bad = resolve("arith", "grpo", "tiny", 0, budgets=[("updates", 1)]).to_dict()
    bad["algo"]["teacher"] = "tiny"
    with pytest.raises(BadInput, match=r"read only by a distilling entry"):
        spec_from_dict(bad)
