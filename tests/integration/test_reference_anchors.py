"""``ref_anchor`` (RRC's anchor-guided rule): the trainer samples ``anchors_per_prompt`` anchors per
prompt once from the frozen base, keeps them for the run and in its checkpoints, charges them to
the budget when generated, and a resumed run replays exactly."""

from __future__ import annotations

from tests import fakes  # noqa: F401  (the _parity_test task)
from tests.integration.test_checkpoints import _crash_and_resume, _spec


def test_reference_anchors_are_sampled_once_kept_and_resumed(tmp_path, monkeypatch):
    from rlsuite.suite.checkpoint import unpack

    spec = _spec(("train.checkpoint_every", 2), algo="rrc_anchor", updates=4)
    read, last, _ = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)
    anchors = unpack(last)["ref_anchors"]
    assert anchors and all(isinstance(a, tuple) and len(a) == 4 for a in anchors.values())  # n_anchors = 4
    before = unpack(read)["ref_anchors"]
    assert before and all(anchors[i] == a for i, a in before.items())  # kept as first sampled


def test_reference_anchors_come_from_the_base_not_the_policy(tmp_path):
    """The anchors of a prompt are the same whenever it is first drawn: a run at another learning
    rate (a different policy after step 1) gets the same anchors for every prompt both runs saw."""
    import torch

    from rlsuite.suite.checkpoint import unpack
    from rlsuite.suite.runner import execute

    got = []
    for lr in ("1e-3", "1e-2"):
        code, run = execute(_spec(("optim.lr", lr), algo="rrc_anchor", updates=3), tmp_path / lr)
        assert code == 0
        got.append(unpack(torch.load(run / "checkpoint" / "state.pt", weights_only=False))["ref_anchors"])
    shared = set(got[0]) & set(got[1])
    assert shared and all(got[0][i] == got[1][i] for i in shared)


def _multi_turn_spec(algo: str, *sets):
    from rlsuite.suite.spec import resolve

    return resolve("search_toy", algo, "tiny", 0,
                   sets=[("train.keep_checkpoint", True), ("rollout.prompts_per_step", 2), ("rollout.group_size", 2),
                         ("eval.every", 1.0), ("eval.max_prompts", 4), *sets], budgets=[("updates", 1)])


def test_reference_anchors_run_the_task_environment_on_a_multi_turn_task(tmp_path):
    """On ``search_toy`` (a search, then an answer from the retrieved passage) the base's anchors are
    whole episodes: the environment's observation follows the search, as in the rollout, so the
    anchors are graded like the rollout's completions (A*-PO's V*, RRC's anchor votes)."""
    import torch

    from rlsuite.suite.checkpoint import unpack
    from rlsuite.suite.runner import execute

    code, run = execute(_multi_turn_spec("a_star_po", ("algo.num_value_samples", 2)), tmp_path)
    assert code == 0
    anchors = unpack(torch.load(run / "checkpoint" / "state.pt", weights_only=False))["ref_anchors"]
    texts = [t for a in anchors.values() for t in a]
    assert len(texts) == 2 * len(anchors) and len(anchors) >= 2
    searched = [t for t in texts if "</search>" in t]
    assert searched and all("<information>" in t for t in searched), texts


def test_greedy_anchors_run_the_task_environment_on_a_multi_turn_task(tmp_path, monkeypatch):
    """ReMax's greedy baseline (``anchor``) on ``search_toy``: decoded through the environment with the
    rollout's turn limits, and its texts carry the observation."""
    from rlsuite.suite import rollout_stage
    from rlsuite.suite.runner import execute

    seen = []
    real = rollout_stage.collect

    def spy(engine, tok, prompts, params, gen, **kw):
        rec, m = real(engine, tok, prompts, params, gen, **kw)
        if params.temperature == 0.0:
            seen.append((kw, rec.texts))
        return rec, m

    monkeypatch.setattr(rollout_stage, "collect", spy)
    code, run = execute(_multi_turn_spec("remax"), tmp_path)
    assert code == 0 and seen
    for kw, texts in seen:
        assert kw["envs"] is not None and len(kw["envs"]) == len(texts) and kw["max_turns"] > 1
        searched = [t for t in texts if "</search>" in t]
        assert searched and all("<information>" in t for t in searched), texts
