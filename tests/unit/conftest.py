"""Unit tests: CPU only, one torch thread (the machine has two shared cores), < 1 s each."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    torch.set_num_threads(1)
    yield
