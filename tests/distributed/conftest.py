"""Fixtures for distributed runs: the orchestrator helpers, a store in a temporary home,
and real orchestrators (the real worker, which starts torchrun for `num_processes: 2`)
that are always shut down."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
for _folder in (TESTS_DIR / "orchestrator", TESTS_DIR):  # orch_helpers, checkpoint_factory
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from orch_helpers import EventRecorder  # noqa: E402

from tunelab import paths  # noqa: E402
from tunelab.orchestrator import Orchestrator  # noqa: E402
from tunelab.store import Store  # noqa: E402


@pytest.fixture
def store(home) -> Store:
    with Store(paths.db_path()) as db:
        yield db


@pytest.fixture
def real_orchestrator(store):
    """(Orchestrator with the real worker, EventRecorder of its events)."""
    made = Orchestrator(store)
    recorder = EventRecorder()
    made.subscribe(recorder)
    yield made, recorder
    made.shutdown()
