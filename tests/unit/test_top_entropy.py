"""High-entropy-minority token training (``loss.top_entropy_quantile`` ρ; Wang et al. 2025, "Beyond
the 80/20 rule", arXiv 2506.01939): the policy loss keeps the tokens whose entropy is at least the
``1 − ρ`` quantile of the forward's policy tokens. Every expected number is worked out by hand
below (``torch.quantile``'s linear interpolation); TRL 1.16.0's ``GRPOTrainer.get_high_entropy_mask``
(one process: its gather is the identity) returns the same masks on these inputs (checked
2026-12-06 by calling it with ``threshold = 1 − ρ``)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.config import LossConfig
from rlsuite.suite.errors import BadInput
from rlsuite.suite.loss_options import policy_masks
from rlsuite.suite.ops import top_entropy_mask

# policy-token entropies (9.9 is off the mask): sorted 0.5, 1.0, 1.0, 2.0, 3.0 (n = 5)
H = torch.tensor([[0.5, 1.0, 2.0], [1.0, 3.0, 9.9]])
M = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize("rho, kept", [
    # ρ = 0.2: the 0.8 quantile sits at position 0.8·4 = 3.2: 2.0 + 0.2·(3.0 − 2.0) = 2.2 → only 3.0
    (0.2, [[0, 0, 0], [0, 1, 0]]),
    # ρ = 0.5: position 2 → 1.0; ties at the threshold are kept: 1.0, 2.0, 1.0, 3.0
    (0.5, [[0, 1, 1], [1, 1, 0]]),
    # ρ = 0: the maximum, 3.0; ρ = 1: the minimum, every policy token (never the one off the mask)
    (0.0, [[0, 0, 0], [0, 1, 0]]),
    (1.0, [[1, 1, 1], [1, 1, 0]]),
])
def test_the_top_quantile_of_the_policy_tokens(rho, kept):
    assert top_entropy_mask(H, M, rho).int().tolist() == kept


def test_an_empty_mask_keeps_nothing_and_the_option_multiplies_the_policy_term():
    assert not top_entropy_mask(H, torch.zeros_like(M), 0.2).any()
    logp = torch.zeros(2, 3)
    keep, high, m = policy_masks(LossConfig(top_entropy_quantile=0.5), logp, H, None, logp, M.float())
    assert keep.tolist() == [[0, 1, 1], [1, 1, 0]] and high.tolist() == [[False, True, True], [True, True, False]]
    assert m["loss/top_entropy_kept_frac"] == pytest.approx(4 / 5)
    # with OPSM too: the product of the two masks (row 0 masked by OPSM: A < 0, KL = 1 > 0.5)
    behav = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    adv = -torch.ones(2, 3)
    keep, _, _ = policy_masks(LossConfig(top_entropy_quantile=0.5, opsm_delta=0.5), logp, H, adv, behav, M.float())
    assert keep.tolist() == [[0, 0, 0], [1, 1, 0]]


def _spec(*sets):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", "grpo", "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 2)])


def test_range_and_data_parallel_are_refused():
    with pytest.raises(BadInput, match=r"loss.top_entropy_quantile must be in \[0, 1\], got 1.5"):
        _spec(("loss.top_entropy_quantile", 1.5))
    with pytest.raises(BadInput, match="dist.world_size=2 is not supported with it; valid: dist.world_size=1"):
        _spec(("loss.top_entropy_quantile", 0.2), ("dist.world_size", 2), ("rollout.rng", "row"))


def test_the_trainer_trains_on_the_minority(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    spec = _spec(("loss.top_entropy_quantile", 0.2))
    assert spec.run_id != _spec().run_id and _spec(("loss.top_entropy_quantile", 1.0)).run_id == _spec().run_id
    code, run = execute(spec, tmp_path)
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    # about a fifth of the policy tokens (more with ties), never none
    assert all(0 < r["loss/top_entropy_kept_frac"] < 0.5 for r in rows)
