"""EDAS: the shaping of the wrong answers' advantages by the diversity of their error classes worked
by hand (entropy, Δ per class, the κ cap, one class, warm-up by fraction and in steps, the None
class, the error-equivalence and base switches, the authors' defaults, the overlong filter)."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.base import Group
from rlsuite.algorithms.edas import EDAS, EDASConfig
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_no_prompt import close, ctx, make_batch, with_adv


# ======================================================================================
# EDAS. Group 0: scores (1, 0, 0, 0, 0, 1), wrong answers "3", "3", "3", "7". GRPO z-score: mean 1/3,
# unbiased std √(4/15) = 0.516398 → wrong Â = −0.645497, right 1.290994. S = 0.645497;
# p = (¾, ¼), H = 0.562335, I = (0.287682, 1.386294), ln N_w = ln 4 = 1.386294.
# α = 0.4: Δ_3 = 0.4·S·(0.287682 − 0.562335)/1.386294 = −0.051154; Δ_7 = 0.4·S·0.594361 = 0.153463
# (|A|/κ = 0.322749 does not bind) → Â_3 = −0.696650, Â_7 = −0.492033. Group 1: one wrong → unchanged.

ED_SCORES = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
ED_GROUPS = [0] * 6 + [1] * 3


def ed_adv(parsed, progress=0.0, error_class=None, **kw):
    b = make_batch([[1]] * 9, ED_GROUPS, ED_SCORES, parsed=tuple(parsed),
                   error_class=tuple(parsed if error_class is None else error_class))
    out = EDAS(EDASConfig(base="grpo", **kw)).advantages(b, ctx(progress=progress))
    return out.adv[:, 0], out.metrics


AW, AC = -0.645496, 1.290992  # with the 1e-6 in the z-score denominator
G1 = [0.577350, -1.154700, 0.577350]  # group 1 z-scores (1, 0, 1): ±(1/3, 2/3)/0.57735


def test_edas_diverse_errors_by_hand():
    adv, m = ed_adv(["5", "3", "3", "3", "7", "5", "1", "2", "1"])
    torch.testing.assert_close(adv, t([AC, -0.696650, -0.696650, -0.696650, -0.492033, AC] + G1), atol=2e-6, rtol=0)
    assert m["algo/edas/groups_kmulti"] == 1 and m["algo/edas/groups_k1"] == 0
    assert m["algo/edas/error_entropy"] == pytest.approx(0.562335, abs=1e-6)
    # α = 0.8 doubles Δ: Δ_7 = 0.306926 < 0.322749 → −0.338570; Δ_3 = −0.102309 → −0.747805
    adv, _ = ed_adv(["5", "3", "3", "3", "7", "5", "1", "2", "1"], alpha=0.8)
    torch.testing.assert_close(adv[1:5], t([-0.747805] * 3 + [-0.338570]), atol=2e-6, rtol=0)


def test_edas_perseveration_kappa_warmup_and_none_class():
    same = ["5", "3", "3", "3", "3", "5", "1", "2", "1"]
    # K = 1: Δ = −β·S; β = 0.2 (GRPO default) → −0.774597; β = 0.3 → −0.839146
    adv, m = ed_adv(same)
    torch.testing.assert_close(adv[1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)
    assert m["algo/edas/perseveration_rate"] == 1.0
    torch.testing.assert_close(ed_adv(same, beta=0.3)[0][1:5], t([-0.839146] * 4), atol=2e-6, rtol=0)
    # κ = 4: |Δ| ≤ |A|/4 = 0.161374 binds against 0.193649 → −0.806871
    torch.testing.assert_close(ed_adv(same, beta=0.3, kappa=4.0)[0][1:5], t([-0.806871] * 4), atol=2e-6, rtol=0)
    # warm-up over half the training, at progress ¼ → half the shaping: −0.645497 − 0.064550 = −0.710047
    torch.testing.assert_close(ed_adv(same, progress=0.25, warmup_frac=0.5)[0][1:5], t([-0.710047] * 4),
                               atol=2e-6, rtol=0)
    nones = ["5", None, None, None, None, "5", "1", "2", "1"]
    torch.testing.assert_close(ed_adv(nones)[0][1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)  # shared class
    torch.testing.assert_close(ed_adv(nones, none_class="unique")[0][1:5], t([AW] * 4), atol=2e-6, rtol=0)
    with pytest.raises(ValueError):
        EDASConfig(kappa=1.0)


def test_edas_error_equivalence_switch():
    """The task's error class (e.g. an exception type) partitions the wrong answers; ``equivalence =
    parsed`` uses the parsed answers instead."""
    parsed = ["5", "3", "3", "3", "7", "5", "1", "2", "1"]
    same_exc = ["", "ValueError", "ValueError", "ValueError", "ValueError", "", "", "x", ""]
    adv, m = ed_adv(parsed, error_class=same_exc)  # one class (K = 1): perseveration → −0.774597
    torch.testing.assert_close(adv[1:5], t([-0.774597] * 4), atol=2e-6, rtol=0)
    assert m["algo/edas/groups_k1"] == 1
    adv, _ = ed_adv(parsed, error_class=same_exc, equivalence="parsed")  # K = 2 as in the hand example
    torch.testing.assert_close(adv[1:5], t([-0.696650] * 3 + [-0.492033]), atol=2e-6, rtol=0)


def test_edas_base_switch():
    b = make_batch([[1]] * 2, [0, 0], [1.0, 1.0])
    assert EDAS(EDASConfig(base="dapo")).filter(b, ctx()).tolist() == [False, False]  # dynamic sampling
    assert EDAS(EDASConfig(base="grpo")).filter(b, ctx()) is None
    # ratio 1.25 with A = 1: GRPO clips at 1.2, DAPO's clip-higher at 1.28 does not
    b = with_adv(make_batch([[1]], [0], [1.0]), [1.0])
    fwd = Forward(logp=t([[math.log(1.25)]]))
    assert float(EDAS(EDASConfig(base="grpo")).loss(fwd, b, ctx())[0]) == pytest.approx(-1.2)
    assert float(EDAS(EDASConfig(base="dapo")).loss(fwd, b, ctx())[0]) == pytest.approx(-1.25)


def test_edas_defaults_are_the_authors_launch_settings():
    """The GRPO launcher's KL loss (0.01, k3 = verl's low_var_kl), the DAPO launcher's zero overlong
    buffer (no penalty), no warm-up; each departure stays a switch."""
    grpo, dapo = EDASConfig(base="grpo"), EDASConfig()
    assert (grpo.kl_coef, grpo.kl_estimator) == (0.01, "k3") and "ref_logp" in EDAS(grpo).needs
    assert dapo.kl_coef == 0.0 and "ref_logp" not in EDAS(dapo).needs
    assert EDASConfig(base="grpo", kl_coef=0.0).kl_coef == 0.0
    assert dapo.overlong == "none" and grpo.ramp(1, 0.0) == 1.0
    # no overlong penalty by default: a truncated wrong row keeps its grade as reward
    g = Group(prompt="p", example=None, completions=("a", "b"), parsed=(None, None), scores=t([1.0, 0.0]),
              lengths=torch.tensor([4, 4]), truncated=torch.tensor([False, True]))
    c = ctx()
    c.max_new_tokens = 4
    close(EDAS(dapo).rewards(g, c), t([1.0, 0.0]))
    close(EDAS(EDASConfig(overlong="shaping")).rewards(g, c), t([0.0, -1.0]))  # L = L_max: the full −1


def test_edas_authors_warmup_waits_then_ramps_in_steps():
    same = ["5", "3", "3", "3", "3", "5", "1", "2", "1"]
    b = make_batch([[1]] * 9, ED_GROUPS, ED_SCORES, parsed=tuple(same), error_class=tuple(same))
    cfg = dict(base="grpo", warmup_start=2, warmup_steps=4)
    at = lambda step: EDAS(EDASConfig(**cfg)).advantages(b, ctx(step=step)).adv[1:5, 0]
    close(at(2), t([AW] * 4))                    # not started: Â unchanged
    close(at(4), t([-0.710047] * 4))             # (4 − 2)/4 = ½ of Δ = −0.129100
    close(at(9), t([-0.774597] * 4))             # past the ramp: the full shaping
    assert EDASConfig(**cfg).ramp(3, 0.9) == 0.25  # in steps, whatever the progress
    with pytest.raises(ValueError, match="alternatives"):
        EDASConfig(warmup_frac=0.5, warmup_steps=4)


def test_edas_overlong_filter_drops_truncated_rows_from_the_wrong_set():
    """The fidelity issue's case: scores (1, 0, 0, 0), error classes (42, 3, 3, 7), the last row
    truncated; DAPO's z-score: right 1.5, wrong −0.5. Without the filter W = {3, 3, 7}: S = 0.5,
    p = (⅔, ⅓), H = 0.636514, Δ_3 = 0.4·0.5·(0.405465 − 0.636514)/ln 3 = −0.042062 → −0.542062.
    With the filter the truncated row leaves the loss and W: W = {3, 3}, K = 1, Δ = −β·S = −0.3·0.5 →
    −0.65 (|A|/κ = 0.25 does not bind). (Counted in W with Â = 0 it was S = ⅓, Δ = −0.028040.)"""
    cls = ("42", "3", "3", "7")
    b = make_batch([[1]] * 4, [0] * 4, [1.0, 0.0, 0.0, 0.0], parsed=cls, error_class=cls,
                   truncated=torch.tensor([False, False, False, True]))
    near = lambda a, e: torch.testing.assert_close(a, t(e), atol=1e-5, rtol=0)  # the z-score's 1e-6: 1.499997
    plain = EDAS(EDASConfig()).advantages(b, ctx()).adv[:, 0]
    near(plain, [1.5, -0.542062, -0.542062, -0.415876])  # Δ_7 = 0.4·0.5·(1.098612 − 0.636514)/ln 3 = 0.084124
    out = EDAS(EDASConfig(overlong="filter")).advantages(b, ctx())
    near(out.adv[:, 0], [1.5, -0.65, -0.65, 0.0])
    assert out.metrics["algo/edas/groups_k1"] == 1.0
