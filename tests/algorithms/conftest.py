"""Hand-computed tests, one file per registered algorithm entry (``test_<entry>.py``): CPU only, one
torch thread (the machine has two shared cores). Their shared builders are the ``hand*.py``
modules here; ``test_every_entry_has_a_hand_test.py`` keeps one file per entry."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    torch.set_num_threads(1)
    yield
