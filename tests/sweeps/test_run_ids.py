"""Run ids of the bundled sweep specs and of every entry stay as recorded (``run_ids.json``, written
by ``python -m tests.sweeps.record_run_ids`` at the run-id reset of issue 32). A change of any id is
a change of identity: deliberate, recorded anew, and named in its commit. (The three views of run
identity and the migration of older documents: ``tests/unit/test_migrate.py``.)"""

from __future__ import annotations

import json

from tests.sweeps.record_run_ids import FIXTURE, current_run_ids, entry_run_ids


def test_bundled_sweep_and_entry_run_ids_are_unchanged():
    rec = json.loads(FIXTURE.read_text())
    entries = entry_run_ids()
    new = frozenset(entries) - set(rec["_entries"])  # entries added since the recording
    cur = current_run_ids(leave_out=new) | {"_entries": {k: v for k, v in entries.items() if k not in new}}
    assert sorted(rec) == sorted(cur)
    for spec in rec:
        assert cur[spec] == rec[spec], (
            f"{spec}: run ids changed. A change of identity is deliberate: re-record with "
            f"`python -m tests.sweeps.record_run_ids` and name the changed ids in the commit")


def test_a_new_entry_leaves_the_recorded_ids_alone(monkeypatch):
    """An entry registered after the recording adds runs to the ``algorithms: all`` specs; with its
    runs left out, the expansion is exactly the recording (so the test above passes without a
    re-recording)."""
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.algorithms.grpo import GRPO

    class Throwaway(GRPO):
        name = "throwaway_entry"

    raw = json.loads(FIXTURE.read_text())
    rec = {s: ids for s, ids in raw.items() if s != "_entries"}
    # entries registered since the recording (other than the throwaway) are left out too
    later = frozenset(ALGORITHMS._entries) - set(raw["_entries"])
    monkeypatch.setitem(ALGORITHMS._entries, "throwaway_entry", Throwaway)
    grown = [s for s, ids in current_run_ids(leave_out=later).items() if len(ids) > len(rec[s])]
    assert grown, "no bundled spec expands `algorithms: all`: this test checks nothing"
    assert current_run_ids(leave_out=later | {"throwaway_entry"}) == rec
