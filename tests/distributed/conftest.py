"""Fixtures for distributed runs: the orchestrator helpers and a store in a temporary home."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator"))

from tunelab import paths  # noqa: E402
from tunelab.store import Store  # noqa: E402


@pytest.fixture
def store(home) -> Store:
    with Store(paths.db_path()) as db:
        yield db
