"""Helpers shared by the orchestrator tests: an event recorder, a config for the
scripted workers, and waiting for a run's end."""

from __future__ import annotations

import threading
from typing import Any, Callable

from tunelab.config.run_config import RunConfig, parse_config
from tunelab.orchestrator import Orchestrator

WAIT_S = 60


class EventRecorder:
    """Subscriber that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT_S) -> dict[str, Any]:
        with self._cond:
            found = self._cond.wait_for(lambda: next((e for e in self.events if predicate(e)), None), timeout)
        assert found, f"no matching event within {timeout} s; got types {[e['type'] for e in self.events][-20:]}"
        return found

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def finals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("final")]


def scripted_config(**overrides: Any) -> RunConfig:
    """A valid config for fake workers (they never read the model or the data)."""
    return parse_config({"model_name": "scripted/tiny", "local_datasets": ["/nowhere/train.jsonl"],
                         "max_steps": 5, **overrides})


def finished(orchestrator: Orchestrator, run_id: int) -> dict[str, Any]:
    """Wait for the run to be finalized; return its stored row."""
    assert orchestrator.wait_idle(WAIT_S), "the run did not finish"
    return orchestrator.store.get_run(run_id)
