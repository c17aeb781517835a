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
