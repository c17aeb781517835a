"""GDPO with one reward component: the GRPO z-score whitened over the batch's policy tokens, worked by
hand with and without std scaling and equal to verl 0.9.1's numbers on the same input
(``hand_verl.py``); equal groups shift by one constant, an all-equal batch gives 0. With two named
components (``reward_keys``): each z-scored in its group, the weighted sum whitened, by hand and
equal to verl 0.9.1's per-key path on the same input; unknown keys refused at resolution; a
chain rollout carries the components end to end."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.suite.config import identity_doc
from rlsuite.suite.errors import BadInput
from rlsuite.suite.spec import resolve
from tests.algorithms.hand import t
from tests.algorithms.hand_verl import CTX, GID, MASK, R, close, shared_batch
from tests.fakes import hand_batch, make_entry


VERL_GDPO = [0.5075113773345947, -1.9554582834243774, 0.5075113773345947, 0.692023515701294,
             -1.3189804553985596, 0.6819196343421936]
VERL_GDPO_NOSTD = [0.329850435256958, -2.062471628189087, 0.329850435256958, 0.13049031794071198,
                   -1.0656707286834717, 1.2070351839065552]


# ========================================================================================
# GDPO with one reward component — GRPO z-score, then whitened over the batch's policy tokens
# z: a: mean 2/3, std √(1/3) = 0.577350 → (1/3)/0.577351 = 0.577349, −1.154699, 0.577349
#    b: mean 0.25, std √0.125 = 0.353553 → ±0.707105;  c: singleton (mean 0, std 1) → 0.7/(1 + 1e-6) = 0.699999
# token-weighted (|y| = 2, 1, 3, 1, 2, 2; 11 tokens) mean m = (2·0.577349 − 1.154699 + 3·0.577349 + 0.707105
#    − 2·0.707105 + 2·0.699999)/11 = 2.424942/11 = 0.220449; unbiased var = Σ l (z − m)²/10 = 0.494540
#    → sqrt(var + 1e-8) = 0.703236;  Â = (z − m)/0.703236 = 0.507511, −1.955458, 0.507511, 0.692023, −1.318981, 0.681920
GDPO_HAND = [0.5075113426710127, -1.9554582102738014, 0.5075113426710127, 0.6920234987369954,
             -1.3189805153581795, 0.6819195144490509]
# scale_by_std off: z = 1/3, −2/3, 1/3, 0.25, −0.25, 0.7; m = 2.15/11 = 0.195455; var = 0.174727
#    → Â = (z − m)/0.418004 = 0.329850, −2.062472, 0.329850, 0.130490, −1.065671, 1.207035
GDPO_NOSTD_HAND = [0.32985046090591064, -2.0624715632468478, 0.32985046090591064, 0.13049029222651415,
                   -1.0656707198498652, 1.2070352030952554]


def test_gdpo_is_grpo_then_batch_whitening():
    out = make_entry("gdpo").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(GDPO_HAND)[:, None] * t(MASK))
    close(out.adv[:, 1], VERL_GDPO)
    nostd = make_entry("gdpo", scale_by_std=False).advantages(shared_batch(), CTX)
    torch.testing.assert_close(nostd.adv, t(GDPO_NOSTD_HAND)[:, None] * t(MASK))
    close(nostd.adv[:, 1], VERL_GDPO_NOSTD)


def test_gdpo_equal_groups_are_shifted_by_one_constant_and_an_equal_batch_is_zero():
    # group a all 0.3: z = 0 there, then −m/std of the batch on all its tokens (not 0, unlike GRPO)
    adv = make_entry("gdpo").advantages(shared_batch([0.3, 0.3, 0.3, 0.5, 0.0, 0.7]), CTX).adv
    on = t(MASK)[:3] > 0
    assert (adv[:3][on] == adv[0, 1]).all() and float(adv[0, 1]) != 0.0
    # every group equal (and no singleton): every z is 0 → exactly 0
    flat = hand_batch(MASK[:5], GID[:5], [0.3] * 3 + [0.9] * 2)
    assert (make_entry("gdpo").advantages(flat, CTX).adv == 0).all()


# ========================================================================================
# GDPO with two reward components (``reward_keys``): each z-scored in its group, weighted sum whitened.
# The shared input (lengths 2, 1, 3, 1, 2, 2; groups a = rows 0-2, b = rows 3-4, c = row 5) with
#   correct = 1, 0, 0 | 1, 0 | 1      format = 1, 1, 0 | 0, 0 | 1
# verl 0.9.1 ``compute_gdpo_outcome_advantage`` on the same inputs (gdpo_reward_keys = [correct, format],
# each key's score on its row's last valid token, float32; recorded once):
VERL_GDPO_K2 = [1.020536184310913, -0.0910659208893776, -1.2026679515838623, 0.36274388432502747,
                -0.5448756217956543, 1.1925026178359985]
VERL_GDPO_K2_W21 = [1.1076802015304565, -0.3527875542640686, -1.0830215215682983, 0.48685741424560547,
                    -0.705609917640686, 1.1554269790649414]  # gdpo_reward_weights = [2, 1]
VERL_GDPO_K2_NOSTD = [0.6730363368988037, -0.19795192778110504, -1.0689401626586914, 0.23754224181175232,
                      -0.6334460377693176, 1.5440247058868408]  # norm_adv_by_std_in_grpo = False
CORRECT = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
FORMAT = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
# correct: a mean 1/3, std √(1/3) = 0.577350 → (2/3)/0.577351 = 1.154699, −0.577349, −0.577349;
#          b mean 0.5, std √0.5 = 0.707107 → ±0.707106;  c singleton (mean 0, std 1) → 1/(1 + 1e-6) = 0.999999
# format:  a mean 2/3 → 0.577349, 0.577349, −1.154699;  b all 0 → 0, 0;  c → 0.999999
# sum (w = 1, 1): 1.732048, 0, −1.732048, 0.707106, −0.707106, 1.999998
# token-weighted mean m = (2·1.732048 + 0 − 3·1.732048 + 0.707106 − 2·0.707106 + 2·1.999998)/11 = 1.560842/11
#    = 0.141895; unbiased var = Σ l (x − m)²/10 = 2.427845 → sqrt(var + 1e-8) = 1.558154
#    → Â = (x − m)/1.558154 = 1.020536, −0.091066, −1.202668, 0.362744, −0.544876, 1.192503
GDPO_K2_HAND = [1.0205362215988583, -0.09106591823613426, -1.2026680580711269, 0.3627438992648858,
                -0.5448757357371545, 1.1925026107306107]
# w = (2, 1): sum 2.886746, −0.577349, −2.309397, 1.414212, −1.414212, 2.999997; m = 2.853735/11 = 0.259430;
#    var = 5.625949 → 2.371908 → Â = 1.107680, −0.352788, −1.083021, 0.486857, −0.705610, 1.155427
GDPO_K2_W21_HAND = [1.107680252943522, -0.352787546392646, -1.0830214460607297, 0.48685742535816534,
                    -0.705609918364735, 1.1554268950295483]
# scale_by_std off: correct centred 2/3, −1/3, −1/3, ½, −½, 1 (a singleton keeps its reward); format 1/3, 1/3,
#    −2/3, 0, 0, 1; sum 1, 0, −1, ½, −½, 2; m = 2.5/11 = 0.227273; var = 1.318182 → 1.148121
#    → Â = 0.673036, −0.197952, −1.068940, 0.237542, −0.633446, 1.544025
GDPO_K2_NOSTD_HAND = [0.6730364425422646, -0.1979518948653719, -1.0689402322730086, 0.2375422738384463,
                      -0.6334460635691903, 1.5440247799499012]
# GDPO on the *summed* reward correct + format = 2, 1, 0 | 1, 0 | 2 (K = 1, GRPO's coupling): group a's z-scores
# 1, 0, −1 (its std is 1) against b's ±0.707107 — decoupled, a's are 1.732048, 0, −1.732048: a group where both
# components vary moves √3 times as far instead of as far as b; whitened (m = 0.208445, sd 1.184146):
COUPLED_HAND = [0.6684598189593457, -0.1760294517804358, -1.0205187225202172, 0.42111439085411484,
                -0.7731732944149864, 1.5129490896991271]


def components_batch(**comps):
    return dataclasses.replace(shared_batch(), reward_components={k: t(v) for k, v in comps.items()})


def test_gdpo_two_components_by_hand_and_as_verl():
    b = components_batch(correct=CORRECT, format=FORMAT)
    for kw, hand, verl in (({}, GDPO_K2_HAND, VERL_GDPO_K2),
                           ({"reward_weights": (2.0, 1.0)}, GDPO_K2_W21_HAND, VERL_GDPO_K2_W21),
                           ({"scale_by_std": False}, GDPO_K2_NOSTD_HAND, VERL_GDPO_K2_NOSTD)):
        adv = make_entry("gdpo", reward_keys=("correct", "format"), **kw).advantages(b, CTX).adv
        torch.testing.assert_close(adv, t(hand)[:, None] * t(MASK), rtol=0, atol=1e-12)
        close(adv[:, 1], verl)
    coupled = make_entry("gdpo").advantages(shared_batch([c + f for c, f in zip(CORRECT, FORMAT)]), CTX).adv
    torch.testing.assert_close(coupled, t(COUPLED_HAND)[:, None] * t(MASK), rtol=0, atol=1e-12)
    assert (coupled[:, 1] - t(GDPO_K2_HAND)).abs().max() > 0.1  # decoupling changes the advantages


def test_gdpo_one_key_is_the_one_component_path():
    # reward_keys = (score,) holding the task rewards R: the same numbers as the default (K = 1) path, GDPO_HAND
    adv = make_entry("gdpo", reward_keys=("score",)).advantages(components_batch(score=R), CTX).adv
    torch.testing.assert_close(adv, t(GDPO_HAND)[:, None] * t(MASK), rtol=0, atol=1e-12)
    # and the default path ignores the components: today's numbers exactly
    default = make_entry("gdpo").advantages(components_batch(correct=CORRECT, format=FORMAT), CTX).adv
    assert torch.equal(default, make_entry("gdpo").advantages(shared_batch(), CTX).adv)


def test_gdpo_reward_key_checks():
    with pytest.raises(BadInput) as e:  # exit 2 at resolution, listing the task's components
        resolve("chain", "gdpo", "tiny", 0, sets=[("algo.reward_keys", ["correct", "style"])])
    assert e.value.problems == ["algo.reward_keys: 'style' not among the reward components of task 'chain'; "
                                "valid: correct, format"]
    with pytest.raises(BadInput, match="valid: none"):
        resolve("arith", "gdpo", "tiny", 0, sets=[("algo.reward_keys", ["correct"])])
    with pytest.raises(BadInput, match="one weight per reward_keys entry"):
        resolve("chain", "gdpo", "tiny", 0, sets=[("algo.reward_keys", ["correct"]), ("algo.reward_weights", [1, 2])])
    with pytest.raises(BadInput, match="each component once"):
        resolve("chain", "gdpo", "tiny", 0, sets=[("algo.reward_keys", ["correct", "correct"])])
    ok = resolve("chain", "gdpo", "tiny", 0, sets=[("algo.reward_keys", ["format", "correct"])])
    assert ok.algo.reward_keys == ("format", "correct")
    # in the run id only when set: at the default the identity has no such field (gdpo's recorded ids stay)
    default = resolve("chain", "gdpo", "tiny", 0)
    assert "reward_keys" not in identity_doc(default.to_dict())["algo"]
    assert identity_doc(ok.to_dict())["algo"]["reward_keys"] == ["format", "correct"]
    assert ok.run_id != default.run_id
    with pytest.raises(ValueError, match=r"not among the batch's reward components \(none\)"):
        make_entry("gdpo", reward_keys=("correct",)).advantages(shared_batch(), CTX)


def _gdpo_by_formula(comps: dict, gid: list, lengths: list) -> list:
    """GDPO's sequence advantages from the definition, in plain floats (not the entry's code): each
    component z-scored in its group (Bessel std + 1e-6; a singleton keeps its value, an all-equal group
    gets 0), summed, then whitened with token weights |y_i| (Bessel variance + 1e-8)."""
    total = [0.0] * len(gid)
    for vals in comps.values():
        for g in set(gid):
            rows = [i for i in range(len(gid)) if gid[i] == g]
            xs = [vals[i] for i in rows]
            m = sum(xs) / len(xs)
            sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 1.0
            for i in rows:
                z = vals[i] if len(xs) == 1 else (0.0 if max(xs) == min(xs) else (vals[i] - m) / (sd + 1e-6))
                total[i] += z if len(xs) > 1 else z / (1 + 1e-6)
    n = sum(lengths)
    mean = sum(w * x for w, x in zip(lengths, total)) / n
    var = sum(w * (x - mean) ** 2 for w, x in zip(lengths, total)) / (n - 1)
    return [(x - mean) / (var + 1e-8) ** 0.5 for x in total]


def test_a_chain_rollout_carries_the_components_to_gdpo_end_to_end(tmp_path):
    """``chain`` (the committed tiny base) through the trainer: the batch's reward components are the
    grades' (re-graded from the texts), GDPO's advantages are the definition's on them, and the update's
    policy loss is their prompt-level aggregate."""
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.trainer import Trainer
    from rlsuite.suite.warmstart import warm_started
    from rlsuite.tasks.base import TASKS

    spec = resolve("chain", "gdpo", "tiny", 0, sets=[
        ("algo.reward_keys", ["correct", "format"]), ("algo.aggregation", "prompt-mean-token-mean"),
        ("rollout.prompts_per_step", 4), ("rollout.group_size", 4)])
    task, algo = TASKS.get("chain")(spec.task), ALGORITHMS.get("gdpo")(spec.algo)
    model, tok, _ = load_model(spec.model)
    warm_started(task, model, tok, "tiny", 1)
    tr = Trainer(spec, tmp_path / "run", task, algo, model, tok)
    tr.state.step_no = 1
    batch, _ = tr._collect_batch(tr.context())
    examples = [tr.splits["train"][int(i)] for i in batch.example_idx]
    grades = [task.grade(e, text) for e, text in zip(examples, batch.texts)]
    comps = {k: batch.reward_components[k].tolist() for k in ("correct", "format")}
    assert comps == {k: [g.components[k] for g in grades] for k in ("correct", "format")}
    lengths = batch.loss_mask.sum(-1).tolist()
    want = _gdpo_by_formula(comps, batch.group_id.tolist(), lengths)
    got = (batch.adv.sum(-1) / batch.loss_mask.sum(-1)).tolist()
    assert got == pytest.approx(want, abs=1e-5)
    m = tr._update(batch, tr.context())  # one update with the prompt-level weights
    # on-policy (ratio 1) the clipped surrogate is −Â per token; prompt-level: each of the P = 4 groups'
    # token mean of −Â, averaged over the groups
    gid, adv_sum = batch.group_id.tolist(), batch.adv.sum(-1).tolist()
    per_group = [-sum(a for a, g in zip(adv_sum, gid) if g == k) / sum(n for n, g in zip(lengths, gid) if g == k)
                 for k in sorted(set(gid))]
    assert float(m["loss/policy"]) == pytest.approx(sum(per_group) / 4, abs=1e-5)
    # (token-mean would give 0 here: the whitened advantages have token mean 0)
    assert abs(sum(per_group) / 4) > 1e-3
