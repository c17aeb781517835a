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


def _spy(monkeypatch):
    """Record every call of the rollout stage's ``collect`` (the anchors' and the rollout's)."""
    from rlsuite.suite import rollout_stage

    seen = []
    real = rollout_stage.collect

    def spy(engine, tok, prompts, params, gen, **kw):
        rec, m = real(engine, tok, prompts, params, gen, **kw)
        seen.append((params, kw, rec.texts))
        return rec, m

    monkeypatch.setattr(rollout_stage, "collect", spy)
    return seen


def test_reference_anchors_run_the_task_environment_on_a_multi_turn_task(tmp_path, monkeypatch):
    """On ``search_toy`` (a search, then an answer from the retrieved passage) the base's anchors are
    whole episodes through the task's environment, with the rollout's turn limits (A*-PO's V*, RRC's
    anchor votes grade them like the rollout's completions); an observation shows in the kept texts."""
    import torch

    from rlsuite.suite.checkpoint import unpack
    from rlsuite.suite.runner import execute

    seen = _spy(monkeypatch)
    spec = _multi_turn_spec("a_star_po", ("algo.num_value_samples", 2))
    code, run = execute(spec, tmp_path)
    assert code == 0
    anchors = unpack(torch.load(run / "checkpoint" / "state.pt", weights_only=False))["ref_anchors"]
    texts = [t for a in anchors.values() for t in a]
    assert len(texts) == 2 * len(anchors) and len(anchors) >= 2
    # the anchor passes: 2 samples of one prompt (a rollout pass has 2 prompts x 2 samples)
    calls = [(kw, tx) for _, kw, tx in seen if len(tx) == 2 and set(tx) <= set(texts)]
    assert len(calls) == len(anchors)
    for kw, tx in calls:
        assert kw["envs"] is not None and len(kw["envs"]) == 2 and len({id(e) for e in kw["envs"]}) == 2
        assert kw["max_turns"] == spec.rollout.max_turns > 1
    assert any("<information>" in t for t in texts), texts  # the environment answered a search


def test_greedy_anchors_run_the_task_environment_on_a_multi_turn_task(tmp_path, monkeypatch):
    """ReMax's greedy baseline (``anchor``) on ``search_toy``: decoded through the environment with the
    rollout's turn limits (one fresh environment a prompt)."""
    from rlsuite.suite.runner import execute

    seen = _spy(monkeypatch)
    spec = _multi_turn_spec("remax")
    code, _ = execute(spec, tmp_path)
    greedy = [(kw, tx) for params, kw, tx in seen if params.temperature == 0.0]
    assert code == 0 and greedy
    for kw, texts in greedy:
        assert kw["envs"] is not None and len({id(e) for e in kw["envs"]}) == len(texts)
        assert kw["max_turns"] == spec.rollout.max_turns > 1
    assert any("<information>" in t for _, tx in greedy for t in tx)
