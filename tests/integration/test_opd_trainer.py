"""On-policy distillation through the shared trainer on the tiny model (``algorithms/opd.py``,
``algo.distill_coef``, ``suite/distill.py``): a teacher that is the student itself gives exactly zero
loss and reverse KL; a different teacher (a saved folder) pulls the student's log-probs toward it;
the term on another entry loads and scores the teacher; a teacher with another tokenizer is
refused before anything is written (BadInput: exit 2)."""

from __future__ import annotations

import pytest
import torch

from tests import fakes  # noqa: F401  (the _parity_test task)


def _spec(algo: str, *sets, updates: int = 2):
    from rlsuite.suite.spec import resolve

    return resolve("_parity_test", algo, "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", updates)])


def _teacher_folder(path, tokenizer=None, sharpen: float = 1.0):
    """The tiny model (its seed-0 initial weights, the student's at warm_start=none) saved with
    ``save_pretrained``; ``sharpen`` scales the final norm's weight (the logits scale with it)."""
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.models import load_model

    model, tok, _ = load_model(ModelConfig(warm_start="none"))
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
    model.save_pretrained(path)
    (tokenizer or tok).save_pretrained(path)
    return str(path)


def test_a_teacher_equal_to_the_student_gives_zero(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    # "tiny" at warm_start=none is the student's own initial model: log π_T = log π_θ on every token
    code, run = execute(_spec("opd", ("algo.teacher", "tiny"), ("optim.weight_decay", 0.0)), tmp_path)
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    for r in rows:  # a zero gradient leaves the weights where they are (no weight decay): step 2 is zero too
        assert r["distill/reverse_kl"] == 0.0 and r["loss/total"] == 0.0
    assert run.name.split("__")[1] == "opd"


def test_a_different_teacher_pulls_the_student_toward_it(tmp_path):
    """KL(π_θ ‖ π_T) over the whole vocabulary, at the policy positions of one fixed rollout batch,
    falls over 12 updates of opd (the per-token estimator is noisy step to step: the first update
    may raise it; the trend is what distillation promises)."""
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.policy import position_ids
    from rlsuite.suite.trainer import Trainer
    from rlsuite.tasks.base import TASKS

    teacher = _teacher_folder(tmp_path / "teacher", sharpen=4.0)
    spec = _spec("opd", ("algo.teacher", teacher), ("optim.lr", 1e-3), ("log.progress", "off"), updates=100)
    model, tok, _ = load_model(spec.model)
    trainer = Trainer(spec, tmp_path / "run", TASKS.get(spec.task.name)(spec.task), ALGORITHMS.get("opd")(spec.algo),
                      model, tok)
    (tmp_path / "run").mkdir()
    batch, _ = trainer._collect_batch(trainer.context())
    st = trainer.state

    def kl() -> float:
        with torch.no_grad():
            kw = dict(input_ids=batch.tokens, attention_mask=batch.attn_mask,
                      position_ids=position_ids(batch.attn_mask))
            a = torch.log_softmax(st.model(**kw).logits[:, :-1].float(), -1)
            b = torch.log_softmax(st.teacher(**kw).logits[:, :-1].float(), -1)
            m = batch.loss_mask[:, 1:]
            return float(((a.exp() * (a - b)).sum(-1) * m).sum() / m.sum())

    before = kl()
    for _ in range(12):
        trainer.step()
    after = kl()
    assert before > 0.1 and after < 0.95 * before, (before, after)
    assert all(not p.requires_grad for p in st.teacher.parameters())


def test_the_term_on_another_entry(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    teacher = _teacher_folder(tmp_path / "teacher", sharpen=4.0)
    spec = _spec("grpo", ("algo.teacher", teacher), ("algo.distill_coef", 0.5))
    code, run = execute(spec, tmp_path / "runs")
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(r["loss/distill"] != 0.0 and r["distill/reverse_kl"] > 0 for r in rows)
    # loss/total = the entry's policy loss + its KL term + the distillation term
    r = rows[0]
    assert r["loss/total"] == pytest.approx(r["loss/policy"] + r.get("loss/kl", 0.0) + r["loss/distill"], abs=1e-5)
    assert r["budget/flops"] > 0 and spec.run_id != _spec("grpo").run_id


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path):
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.models import CHARS, SPECIAL
    from rlsuite.suite.runner import execute

    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS[::-1])}  # the same strings, other ids
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.decoder = decoders.Fuse()
    other = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                    unk_token="<unk>")
    teacher = _teacher_folder(tmp_path / "teacher", tokenizer=other)
    with pytest.raises(BadInput, match=r"algo.teacher=.*its tokenizer differs from the student's") as e:
        execute(_spec("opd", ("algo.teacher", teacher)), tmp_path / "runs")
    assert len(e.value.problems) == 1 and "\n" not in e.value.problems[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
