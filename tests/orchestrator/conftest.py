"""Fixtures for orchestrator tests: a real store in a temporary home, and orchestrators
that run scripted fake workers (real spawn children) and are always shut down."""

from __future__ import annotations

import pytest
from orch_helpers import EventRecorder

from tunelab import paths
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store


@pytest.fixture
def store(home) -> Store:
    with Store(paths.db_path()) as db:
        yield db


@pytest.fixture
def orchestrator_for(store):
    """`orchestrator_for(worker_function, **kwargs)` -> (Orchestrator, EventRecorder)."""
    made: list[Orchestrator] = []

    def make(worker, **kwargs) -> tuple[Orchestrator, EventRecorder]:
        orchestrator = Orchestrator(store, worker_target=worker, **kwargs)
        recorder = EventRecorder()
        orchestrator.subscribe(recorder)
        made.append(orchestrator)
        return orchestrator, recorder

    yield make
    for orchestrator in made:
        orchestrator.shutdown()
