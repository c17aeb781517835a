"""The entropy bonus (``loss.entropy_coef``), aggregated with the entry's mode (verl 0.9.1
``workers/utils/losses.py``: ``policy_loss −= entropy_coeff · agg_loss(entropy, response_mask,
loss_agg_mode)``), and its adaptive coefficient (``loss.entropy_target``: Skywork-OR1, arXiv
2505.22312, as TRL 1.16.0's ``use_adaptive_entropy``: the coefficient moves by ``± delta`` per
optimizer update toward the target within ``[0, max]``, and applies only while the previous
update's entropy was ≤ the target). Every expected number is worked out by hand below."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.config import LossConfig
from rlsuite.suite.loss_options import EntropyControl, needs
from tests.fakes import comparable_rows, crash_then_resume

# two rows: 2 and 1 policy tokens of entropies (1, 2) and (4); L = 4 (max_new_tokens)
H = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]], requires_grad=True)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


class OneProcess:
    def all_gather_object(self, obj):
        return [obj]


@pytest.mark.parametrize("mode, w, expected", [
    # token-mean: w = 1/3 per token → (1 + 2 + 4)/3 = 7/3
    ("token-mean", [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]], 7 / 3),
    # seq-mean-token-mean: w = 1/(N·L_i) → ((1 + 2)/2 + 4/1)/2 = (1.5 + 4)/2 = 2.75
    ("seq-mean-token-mean", [[1 / 4, 1 / 4, 0], [1 / 2, 0, 0]], 2.75),
    # seq-mean-token-sum: w = 1/N → (3 + 4)/2 = 3.5
    ("seq-mean-token-sum", [[1 / 2, 1 / 2, 0], [1 / 2, 0, 0]], 3.5),
    # seq-mean-token-sum-norm: w = 1/(N·L) → (3 + 4)/(2·4) = 0.875
    ("seq-mean-token-sum-norm", [[1 / 8, 1 / 8, 0], [1 / 8, 0, 0]], 0.875),
])
def test_the_bonus_in_each_aggregation_mode(mode, w, expected):
    w_mode = aggregation_weights(MASK, mode, 4, "count")  # the trainer's weights for the mode
    assert w_mode.flatten().tolist() == pytest.approx(torch.tensor(w).flatten().tolist())
    ctl = EntropyControl(LossConfig(entropy_coef=0.1))
    bonus = ctl.bonus(w_mode, H, MASK)
    assert float(bonus.detach()) == pytest.approx(0.1 * expected)
    bonus.backward()  # the bonus's gradient reaches the entropy: c·w per token
    assert H.grad.flatten().tolist() == pytest.approx((0.1 * torch.tensor(w)).flatten().tolist())
    H.grad = None


def test_off_by_default_and_entropy_needed_only_when_on():
    assert EntropyControl(LossConfig()).bonus(MASK, H, MASK) is None
    assert needs(LossConfig()) == frozenset()
    assert needs(LossConfig(entropy_coef=0.01)) == needs(LossConfig(entropy_target=0.5)) == {"entropy"}
    assert needs(LossConfig(top_entropy_quantile=0.2)) == frozenset()  # a detached entropy serves the mask


def test_the_adaptive_coefficient_follows_the_target():
    lo = LossConfig(entropy_coef=0.01, entropy_target=1.0, entropy_coef_delta=0.005, entropy_coef_max=0.012)
    ctl, world = EntropyControl(lo), OneProcess()
    w = MASK / 3

    def update(h: float) -> float:
        """One optimizer update on entropies all equal to h; returns the coefficient it applied."""
        ent = torch.full((2, 3), h)
        applied = float(ctl.bonus(w, ent, MASK)) / (h * 1.0)  # Σ w·mask = 1 (token-mean)
        ctl.step(world)
        return applied

    # update 1: no measurement yet (last = ∞ > 1): applies 0; measures 1.0 ≤ 1 → 0.01 + 0.005 = 0.015,
    # capped at max 0.012
    assert update(1.0) == 0.0 and ctl.coef == pytest.approx(0.012) and ctl.last == 1.0
    # update 2: last 1.0 ≤ 1 → applies 0.012; measures 2 > 1 → 0.012 − 0.005 = 0.007
    assert update(2.0) == pytest.approx(0.012) and ctl.coef == pytest.approx(0.007)
    # update 3: last 2 > 1 → applies 0; measures 3 → 0.002; update 4: → max(−0.003, 0) = 0
    assert update(3.0) == 0.0 and ctl.coef == pytest.approx(0.002)
    assert update(4.0) == 0.0 and ctl.coef == 0.0
    # update 5: measures 0.5 ≤ 1 → 0.005; update 6 applies it
    update(0.5)
    assert ctl.coef == pytest.approx(0.005) and update(0.5) == pytest.approx(0.005)


def test_the_measurement_is_token_weighted_over_live_micro_batches_and_processes():
    lo = LossConfig(entropy_coef=0.0, entropy_target=1.0, entropy_coef_delta=0.25)
    ctl = EntropyControl(lo)
    one = torch.ones(1, 1)
    ctl.bonus(one, torch.tensor([[2.0]]), one)  # micro-batch 1: one token of 2.0
    ctl.bonus(torch.ones(1, 3), torch.full((1, 3), 0.5), torch.ones(1, 3))  # micro-batch 2: three of 0.5
    ctl.bonus(one, torch.tensor([[100.0]]), one, live=False)  # a padding copy (sharded): not counted
    assert ctl.window == [2.0 + 1.5, 4.0]  # (2 + 3·0.5)/4 = 0.875 ≤ 1 (the mean of means, 1.25, is not)
    ctl.step(OneProcess())
    assert ctl.last == 0.875 and ctl.coef == 0.25 and ctl.window == [0.0, 0.0]

    class TwoProcesses:
        def all_gather_object(self, obj):
            return [obj, [9.0, 3.0]]  # the other rank: three tokens of mean 3

    ctl.bonus(one, torch.tensor([[1.0]]), one)
    ctl.step(TwoProcesses())  # (1 + 9)/(1 + 3) = 2.5 > 1 → 0.25 − 0.25 = 0
    assert ctl.last == 2.5 and ctl.coef == 0.0


def test_the_state_survives_a_checkpoint():
    lo = LossConfig(entropy_coef=0.3, entropy_target=1.0)
    ctl = EntropyControl(lo)
    assert ctl.state_dict() == {"coef": 0.3, "last": math.inf}
    ctl.coef, ctl.last = 0.2, 0.7
    again = EntropyControl(lo)
    again.load_state_dict(ctl.state_dict())
    assert (again.coef, again.last, again.applied) == (0.2, 0.7, 0.2)
    assert EntropyControl(LossConfig(entropy_coef=0.3)).state_dict() == {}  # a fixed coefficient has no state


def _spec(*sets):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", "grpo", "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 4)])




def test_the_trainer_adds_the_bonus_and_resumes_the_coefficient(tmp_path, monkeypatch):
    """A fixed bonus is logged with its coefficient; an adaptive one starts closed (applied 0), and its
    coefficient survives a crash after the step-2 checkpoint: the resumed run logs what the
    uninterrupted one does."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    code, run = execute(_spec(("loss.entropy_coef", 0.05)), tmp_path / "fixed")
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(r["stats/entropy_coef"] == 0.05 and r["loss/entropy_bonus"] > 0 for r in rows)
    # a target above any entropy: the coefficient grows by δ after every update, from 0
    spec = _spec(("loss.entropy_target", 100.0), ("loss.entropy_coef_delta", 0.01), ("train.checkpoint_every", 2))
    assert spec.run_id != _spec().run_id
    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    full = read_jsonl(ref / "metrics.jsonl")
    assert [r["stats/entropy_coef"] for r in full] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    assert full[0]["loss/entropy_bonus"] == 0.0 and full[3]["loss/entropy_bonus"] > 0
    run = crash_then_resume(spec, tmp_path / "crash", monkeypatch)
    assert comparable_rows(read_jsonl(run / "metrics.jsonl")) == comparable_rows(full)
