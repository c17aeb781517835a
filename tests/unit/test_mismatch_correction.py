"""Training–inference mismatch correction (``loss.is_correction``, ``suite/mismatch_correction.py``):
every mode by hand, the peers' numbers on the same inputs, the trainer wiring (the policy term
only, the metrics, the aliased π_old = μ case) and the refusal for entries with their own π/μ weight.

Inputs of the hand cases: two responses, ℓ = log π_old − log μ with ratios r = (2, 0.5, 4) and
(1.5, 3, pad). Products: 4 and 4.5; geometric means 4^(1/3) = 1.587401 and √4.5 = 2.121320.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.suite.mismatch_correction import MODES, correction

OLD = torch.log(torch.tensor([[2.0, 0.5, 4.0], [1.5, 3.0, 1.0]]))
MU = torch.zeros(2, 3)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
G0, G1 = 4 ** (1 / 3), math.sqrt(4.5)


def run(mode, low=0.0, high=2.5):
    return correction(OLD, MU, MASK, mode, low, high)


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b), atol=1e-5, rtol=0)


def test_truncated_is_at_three_levels():
    w, keep, m = run("token_tis")  # clamp(r, ·, 2.5): 4 → 2.5, 3 → 2.5
    close(w, [[2.0, 0.5, 2.5], [1.5, 2.5, 0.0]])
    assert keep is None and m["mismatch/is_truncated_frac"] == pytest.approx(2 / 5)
    assert m["mismatch/is_weight_mean"] == pytest.approx(9 / 5)
    close(run("token_tis", low=0.6)[0], [[2.0, 0.6, 2.5], [1.5, 2.5, 0.0]])  # a lower bound too
    close(run("seq_tis")[0], [[2.5] * 3, [2.5, 2.5, 0.0]])  # products 4 and 4.5 → 2.5
    close(run("geo_tis")[0], [[G0] * 3, [G1, G1, 0.0]])  # below 2.5: untouched
    assert run("geo_tis")[2]["mismatch/is_truncated_frac"] == 0.0


def test_masked_is_keeps_the_ratio_inside_and_drops_outside():
    w, keep, m = run("token_mis", low=0.6)  # inside [0.6, 2.5]: 2 and 1.5
    close(w, [[2.0, 0.0, 0.0], [1.5, 0.0, 0.0]])
    assert keep is None and m["mismatch/is_masked_frac"] == pytest.approx(3 / 5)
    close(run("seq_mis", high=4.2)[0], [[4.0] * 3, [0.0] * 3])  # 4 inside, 4.5 outside
    # the gate on the geometric mean (1.587 in, 2.121 out); survivors keep their token ratios (OpenRLHF)
    close(run("geo_mis", low=0.6, high=2.0)[0], [[2.0, 0.5, 4.0], [0.0] * 3])


def test_rejection_changes_the_loss_mask_only():
    w, keep, m = run("token_reject", low=0.6)
    assert w is None and m["mismatch/is_weight_mean"] == 1.0
    close(keep, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    close(run("seq_reject", high=4.2)[1], [[1.0] * 3, [0.0] * 3])
    close(run("geo_reject", low=0.6, high=2.0)[1], [[1.0] * 3, [0.0] * 3])


def test_the_same_numbers_as_verl_and_trl_on_the_same_inputs():
    """verl 0.9.1 ``compute_rollout_correction_weights`` / ``compute_rollout_rejection_mask`` on these
    inputs (run once with the installed wheel, values recorded here): ``token`` 2.5 →
    [[2, .5, 2.5], [1.5, 2.5, 0]]; ``sequence`` 2.5 → [[2.5]*3, [2.5, 2.5, 0]]; ``token`` "0.6_2.5"
    (IcePop) → [[2, 0, 0], [1.5, 0, 0]]; ``sequence`` "0.1_4.2" → [[4]*3, [0]*3]; rejection on the
    inverse ratio μ/π_old: ``token_k1`` "0.4_1.6666667" → [[1, 0, 0], [1, 0, 0]], ``seq_sum_k1``
    "0.2380952_10" → [[1]*3, [0]*3], ``seq_mean_k1`` "0.5_1.6666667" → [[1]*3, [0]*3]. TRL 1.16.0's
    ``token_truncate`` clamps exp(ℓ) to [clip_min, clip_max] and ``sequence_mask`` zeroes
    exp(Σℓ) outside them (its trainer code, the same formulas as verl's TIS and IcePop here).
    OpenRLHF 0.11.2's ``PolicyLoss`` (run once from its wheel on these inputs with advantage −1 and
    π = π_old, so each token's loss is its coefficient; values recorded here): token mask
    [0.6, 2.5] → [[2, 0, 0], [1.5, 0, 0]]; seq mask [0.6, 2.0] on the geometric mean → the
    survivors' token ratios [[2, .5, 4], [0]*3]; token clip [0.6, 2.5] → [[2, .6, 2.5], [1.5, 2.5, 0]]."""
    verl = {("token_tis", 0.0, 2.5): [[2.0, 0.5, 2.5], [1.5, 2.5, 0.0]],
            ("seq_tis", 0.0, 2.5): [[2.5, 2.5, 2.5], [2.5, 2.5, 0.0]],
            ("token_mis", 0.6, 2.5): [[2.0, 0.0, 0.0], [1.5, 0.0, 0.0]],
            ("seq_mis", 0.1, 4.2): [[4.0, 4.0, 4.0], [0.0, 0.0, 0.0]]}
    for (mode, lo, hi), want in verl.items():
        close(run(mode, lo, hi)[0], want)
    verl_rs = {("token_reject", 0.6, 2.5): [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
               ("seq_reject", 0.1, 4.2): [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]],
               ("geo_reject", 0.6, 2.0): [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]}
    for (mode, lo, hi), want in verl_rs.items():
        close(run(mode, lo, hi)[1], want)
    openrlhf = {("token_mis", 0.6, 2.5): [[2.0, 0.0, 0.0], [1.5, 0.0, 0.0]],
                ("geo_mis", 0.6, 2.0): [[2.0, 0.5, 4.0], [0.0, 0.0, 0.0]],
                ("token_tis", 0.6, 2.5): [[2.0, 0.6, 2.5], [1.5, 2.5, 0.0]]}
    for (mode, lo, hi), want in openrlhf.items():
        close(run(mode, lo, hi)[0], want)


def test_no_mismatch_gives_weight_one_and_bad_modes_are_refused():
    for mode in MODES[1:]:
        w, keep, _ = correction(MU, MU, MASK, mode, 0.5, 2.0)
        close(w if w is not None else keep, MASK.tolist())
    with pytest.raises(ValueError, match="valid: token_tis"):
        correction(MU, MU, MASK, "tis", 0.0, 2.0)


def _spec(*sets, algo="grpo"):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", algo, "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 2)])


def test_the_trainer_weights_the_policy_term_and_logs_the_weights(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    spec = _spec(("loss.is_correction", "token_tis"), ("loss.is_high", 1.0), ("rollout.mismatch", "noise"))
    assert spec.run_id != _spec(("rollout.mismatch", "noise")).run_id  # in the run id when set
    code, run = execute(spec, tmp_path)
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(0 < r["mismatch/is_weight_mean"] <= 1.0 and r["mismatch/is_aliased"] == 0.0 for r in rows)
    assert any(r["mismatch/is_truncated_frac"] > 0 for r in rows)  # noise puts some ratios above 1
    # π_old aliased to μ: the weight is exactly 1, and that is logged
    code, run = execute(_spec(("loss.is_correction", "seq_mis"), ("rollout.old_logp", "behaviour")), tmp_path)
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(r["mismatch/is_aliased"] == 1.0 and r["mismatch/is_weight_mean"] == 1.0 for r in rows)


def test_the_weight_multiplies_the_policy_gradient(tmp_path):
    """With ``is_high`` = 1e-6 every token's weight is at most 1e-6 (π_old ≈ μ here), so the first
    update's gradient norm shrinks by about that factor (no KL term: kl_coef 0)."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    norms = []
    for sets in ([], [("loss.is_correction", "token_tis"), ("loss.is_high", 1e-6)]):
        code, run = execute(_spec(("algo.kl_coef", 0.0), *sets), tmp_path / str(len(sets)))
        assert code == 0
        norms.append(read_jsonl(run / "metrics.jsonl")[0]["stats/grad_norm"])
    assert norms[0] > 0 and norms[1] < 1e-4 * norms[0]


@pytest.mark.parametrize("algo", ["dppo", "drpo", "dppo_pdm", "3po", "copc", "fbos_rl", "is_grpo"])
def test_entries_with_their_own_weight_refuse_the_correction(algo):
    from rlsuite.suite.errors import BadInput

    with pytest.raises(BadInput, match="would correct twice"):
        _spec(("loss.is_correction", "token_tis"), algo=algo)
    _spec(algo=algo)  # at the default (none) they run as before
