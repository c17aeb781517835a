"""Run ids of the bundled sweep specs and of every entry stay as recorded (``run_ids.json``, written
by ``python -m tests.sweeps.record_run_ids`` at the run-id reset of issue 32). A change of any id is
a change of identity: deliberate, recorded anew, and named in its commit. (The three views of run
identity and the migration of older documents: ``tests/unit/test_migrate.py``.)"""

from __future__ import annotations

import json

from tests.sweeps.record_run_ids import FIXTURE, current_run_ids, entry_run_ids


def test_bundled_sweep_and_entry_run_ids_are_unchanged():
    rec, cur = json.loads(FIXTURE.read_text()), current_run_ids() | {"_entries": entry_run_ids()}
    assert sorted(rec) == sorted(cur)
    for spec in rec:
        assert cur[spec] == rec[spec], spec
