"""The judges of the RRC entries (``suite/judges.py``): the task judge grading through
``Group.grade``, the registry and one load per model, and the LM judge on a tiny Llama saved to a
temp dir (both orders, FLOPs charged). The entries' tests: ``tests/algorithms/test_rrc*.py``."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.judges import JUDGES, LMJudge, Pool, TaskJudge, judge_pairs, load_judge
from rlsuite.suite.registry import UnknownName
from tests.algorithms.hand_judges import ctx, group, make


def test_task_judge_grades_through_group_grade():
    graded: list[str] = []

    def grade(text: str) -> float:
        graded.append(text)
        return float(text.strip() == "42")

    judge = TaskJudge()
    assert judge.compare("6*7=", "42", "41", grade=grade).p == 1.0
    assert judge.compare("6*7=", "40", "41", grade=grade).p == 0.5  # tie
    assert judge.compare("6*7=", "40", "42", grade=grade, debias=False).p == 0.0
    graded.clear()
    algo = make("rrc_anchor", judge="task")
    g = group(["42", "41", " 42"], scores=[1.0, 0.0, 1.0], anchors=("41",), grade=grade)
    torch.testing.assert_close(algo.rewards(g, ctx()), torch.tensor([0.5, 0.0, 0.5]))
    assert graded == ["41"]  # the group's own grades are reused; only the anchor is graded
    with pytest.raises(ValueError, match="Group.grade"):
        judge_pairs(judge, Pool("p", ("a", "b")), [(0, 1)])
    # deterministic, and self-competitive Borda from task grades
    r = make(judge="task").rewards(group(["a", "b", "c"], scores=[1.0, 0.0, 1.0]), ctx())
    torch.testing.assert_close(r, torch.tensor([0.75, 0.0, 0.75]))


def test_judge_registry_and_loaded_once():
    assert set(JUDGES.names()) >= {"task", "lm"}
    with pytest.raises(UnknownName, match="did you mean 'task'"):
        JUDGES.get("tsk")
    assert load_judge("task") is load_judge("task", "ignored")
    with pytest.raises(ValueError, match="judge_model"):
        make(judge="lm", judge_model="")


@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory):
    from transformers import LlamaForCausalLM

    from rlsuite.suite.models import char_tokenizer, tiny_config

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(len(tok)))
    path = tmp_path_factory.mktemp("judge")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_lm_judge_on_a_saved_tiny_llama(tiny_judge_dir):
    from rlsuite.suite.models import non_embedding_params

    judge = load_judge("lm", tiny_judge_dir)
    assert isinstance(judge, LMJudge) and load_judge("lm", tiny_judge_dir) is judge
    charges: list = []
    charge = lambda *a: charges.append(a)
    pref = judge.compare("2+2=", "4", "5", charge=charge)
    assert 0.0 <= pref.p <= 1.0 and pref.calls == 2
    # both orders, averaged: check each order against a direct single-sequence forward
    ids = judge.encode("2+2=", "4", "5")
    with torch.no_grad():
        logits = judge.model(input_ids=torch.tensor([ids])).logits[0, -1]
    p_ab = torch.softmax(logits[list(judge.verdict_ids)], -1)[0]
    assert pref.p_ab == pytest.approx(float(p_ab), abs=1e-5)
    assert pref.p == pytest.approx(0.5 * (pref.p_ab + 1 - pref.p_ba))
    # FLOPs: one batched forward over both orders, charged with the judge's non-embedding params
    n_tok = len(ids) + len(judge.encode("2+2=", "5", "4"))
    assert charges == [("judge", n_tok, non_embedding_params(judge.model))]
    # through the entry: all 3 pairs × 2 orders in one forward; rewards are Borda scores in [0, 1]
    charges.clear()
    algo = make(judge="lm", judge_model=tiny_judge_dir)
    r = algo.rewards(group(["4", "5", "44"]), ctx(charges))
    assert r.shape == (3,) and ((r >= 0) & (r <= 1)).all()
    assert algo._step_metrics()["algo/rrc/judge_calls"] == 6 and len(charges) == 1 and charges[0][0] == "judge"
