"""The IS-corrected (unbiased) KL estimate (``loss.kl_is_weight``; DeepSeek-V3.2, arXiv 2512.02556;
TRL 1.16.0 ``use_bias_correction_kl``: ``per_token_kl = (exp(ref − logp) − (ref − logp) − 1) · coef_1``
with ``coef_1 = exp(logp − old)``, its token-level ratio, differentiable through ``logp``). Every
expected number is worked out by hand below, with TRL's formula (k3, which is ours)."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite import kl_control
from rlsuite.suite.config import LossConfig
from rlsuite.suite.errors import BadInput

LN2 = math.log(2)


class Cfg:
    kl_where, kl_estimator = "loss", "k3"


def _term(weighted: bool):
    # token 1: π = ½, π_old = ¼ (ratio 2), π_ref = ¼; token 2: π = π_old = ½ (ratio 1), π_ref = ¼
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]], requires_grad=True)
    old = torch.tensor([[math.log(0.25), math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.25)]])
    mask = torch.ones(1, 2)
    w = mask / 2  # token-mean over the two tokens
    term = kl_control.loss_term(Cfg, 0.1, w, logp, ref, mask, old if weighted else None)
    term.backward()
    return float(term.detach()), logp.grad[0].tolist()


def test_the_kl_term_is_weighted_by_the_ratio_and_its_gradient():
    # d = log π − log π_ref = ln 2 on both tokens: k3 = e^−d + d − 1 = ½ + ln 2 − 1 = 0.193147
    k3 = 0.5 + LN2 - 1
    value, grad = _term(weighted=False)
    assert value == pytest.approx(0.1 * 0.5 * (k3 + k3), abs=1e-7)  # β·Σ w·k = 0.019315
    # ∂k3/∂log π = 1 − e^−d = ½, times β·w = 0.05
    assert grad == pytest.approx([0.05 * 0.5, 0.05 * 0.5], abs=1e-7)
    value, grad = _term(weighted=True)
    # r = 2 and 1: β·Σ w·r·k3 = 0.05·(2·0.193147 + 0.193147) = 0.028972
    assert value == pytest.approx(0.05 * (2 * k3 + k3), abs=1e-7)
    # ∂(r·k3)/∂log π = r·k3 + r·(1 − e^−d): token 1: 0.386294 + 1 = 1.386294; token 2 (r = 1, still
    # differentiable): 0.193147 + 0.5 = 0.693147 — the gradient changes where the ratio is 1
    assert grad == pytest.approx([0.05 * (2 * k3 + 1.0), 0.05 * (k3 + 0.5)], abs=1e-7)


def _spec(*sets):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", "grpo", "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 2)])


def test_it_needs_the_kl_in_the_loss():
    assert LossConfig().kl_is_weight is False
    for sets in ([("algo.kl_coef", 0.0)], [("algo.kl_coef", 0.1), ("algo.kl_where", "reward")]):
        with pytest.raises(BadInput, match="loss.kl_is_weight weights the KL loss term.*valid: algo.kl_coef > 0"):
            _spec(("loss.kl_is_weight", True), *sets)


def test_the_trainer_applies_it(tmp_path):
    """Each update is on-policy (one per step: ratio 1). At the first π = π_ref (k3 and its gradient
    0): the two runs are the same; at the second the KL term's value is the same but its gradient
    is not (∂(r·k3) = ∂k3 + k3 where r = 1)."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    rows = []
    for flag in (False, True):
        spec = _spec(("algo.kl_coef", 0.5), ("loss.kl_is_weight", flag))
        code, run = execute(spec, tmp_path / str(flag))
        assert code == 0
        rows.append(read_jsonl(run / "metrics.jsonl"))
    assert _spec(("algo.kl_coef", 0.5), ("loss.kl_is_weight", True)).run_id != _spec(("algo.kl_coef", 0.5)).run_id
    plain, weighted = rows
    assert plain[0]["stats/grad_norm"] == weighted[0]["stats/grad_norm"] and plain[0]["loss/kl"] == 0.0
    assert plain[1]["loss/kl"] == pytest.approx(weighted[1]["loss/kl"], rel=1e-6) and plain[1]["loss/kl"] > 0
    assert plain[1]["stats/grad_norm"] != pytest.approx(weighted[1]["stats/grad_norm"], rel=1e-6)
