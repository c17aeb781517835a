"""``train.critic_warmup_steps`` (verl's ``trainer.critic_warmup``): the first N steps train the
critic alone — the policy's weights stay the starting ones bit for bit while the critic's move —
then the policy learns; refused for an entry without a critic (exit 2, one line); out of the run id
at its default."""

from __future__ import annotations

import pytest
import torch

from tests import fakes  # noqa: F401  (the _parity_test task)


def _trainer(tmp_path, algo: str, *sets):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trainer import Trainer
    from rlsuite.tasks.base import TASKS

    spec = resolve("_parity_test", algo, "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 8)])
    model, tok, _ = load_model(spec.model)
    (tmp_path / "run").mkdir()  # the run folder the runner would have made (metrics.jsonl lands there)
    return Trainer(spec, tmp_path / "run", TASKS.get(spec.task.name)(spec.task), ALGORITHMS.get(algo)(spec.algo),
                   model, tok)


def _weights(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("critic", ["head", "separate"])
def test_the_warmup_steps_train_the_critic_alone_then_the_policy_learns(tmp_path, critic):
    tr = _trainer(tmp_path, "ppo", ("train.critic_warmup_steps", 2), ("model.critic", critic),
                  ("train.minibatches", 2))
    st = tr.state
    policy0, critic0 = _weights(st.model), _weights(st.critic)
    rows = [tr.step() for _ in range(2)]
    assert [r["train/critic_warmup"] for r in rows] == [1.0, 1.0]
    assert _same(_weights(st.model), policy0)  # the policy (a head critic's trunk included) did not move
    assert not _same(_weights(st.critic), critic0)  # the critic learned
    assert all(r["loss/value"] != 0 for r in rows) and st.budget.counters["updates"] == 4  # 2 steps x 2 updates
    assert all(r["stats/grad_norm"] == 0.0 for r in rows)  # the policy's gradient was dropped, not stepped
    assert all(r["stats/critic_grad_norm"] > 0 for r in rows)  # the critic's, logged on its own
    row = tr.step()
    assert row["train/critic_warmup"] == 0.0 and row["stats/grad_norm"] > 0 and row["stats/critic_grad_norm"] > 0
    assert not _same(_weights(st.model), policy0)  # after the warm-up the policy learns


def test_without_warmup_the_first_step_moves_the_policy_and_logs_no_warmup_metric(tmp_path):
    tr = _trainer(tmp_path, "ppo")
    policy0 = _weights(tr.state.model)
    row = tr.step()
    assert "train/critic_warmup" not in row and not _same(_weights(tr.state.model), policy0)
    (tmp_path / "grpo").mkdir()
    assert "stats/critic_grad_norm" not in _trainer(tmp_path / "grpo", "grpo").step()  # no critic: no critic norm


def test_critic_warmup_needs_an_entry_with_a_critic_and_is_out_of_the_id_at_zero():
    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.spec import resolve

    with pytest.raises(BadInput) as e:
        resolve("_parity_test", "grpo", "tiny", 0, sets=[("train.critic_warmup_steps", 3)])
    msg = str(e.value)
    assert "train.critic_warmup_steps=3" in msg and "'grpo'" in msg and "no critic" in msg and "ppo" in msg
    with pytest.raises(BadInput, match="critic_warmup_steps"):
        resolve("_parity_test", "ppo", "tiny", 0, sets=[("train.critic_warmup_steps", -1)])
    base = resolve("_parity_test", "ppo", "tiny", 0)
    assert resolve("_parity_test", "ppo", "tiny", 0, sets=[("train.critic_warmup_steps", 0)]).run_id == base.run_id
    assert resolve("_parity_test", "ppo", "tiny", 0, sets=[("train.critic_warmup_steps", 2)]).run_id != base.run_id


def test_the_policys_lr_warmup_counts_its_own_updates_and_the_entropy_window_stays_empty(tmp_path):
    """optim.warmup_updates = 2 after 1 critic warm-up step: the policy's first update runs at half
    its rate (update 1 of 2, as it would without the warm-up), its second at the full rate; the
    critic's group counts every update. An adaptive entropy bonus measures nothing while the policy
    does not learn, so its first measurement after the warm-up holds the policy's tokens only."""
    tr = _trainer(tmp_path, "ppo", ("train.critic_warmup_steps", 1), ("optim.warmup_updates", 2),
                  ("loss.entropy_coef", 0.01), ("loss.entropy_target", 0.5))
    base_policy, base_critic = tr.base_lrs
    tr.step()
    assert tr.state.entropy_control.window == [0.0, 0.0] and tr.state.entropy_control.last == float("inf")
    row = tr.step()  # the policy's first update
    assert row["stats/lr"] == pytest.approx(base_policy * 0.5)
    assert tr.state.opt.param_groups[1]["lr"] == pytest.approx(base_critic * 1.0)  # the critic's 2nd update
    assert tr.state.entropy_control.last == pytest.approx(row["stats/entropy"], rel=1e-6)
    assert tr.step()["stats/lr"] == pytest.approx(base_policy)
