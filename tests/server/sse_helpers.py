"""Reading the server's Server-Sent Events stream in tests, and starting runs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx


@dataclass
class Sse:
    event: str
    data: Any
    id: str | None = None
    retry: int | None = None


def iter_sse(response: httpx.Response) -> Iterator[Sse]:
    """Parse a text/event-stream response into events (a retry-only block included)."""
    fields: dict[str, list[str]] = {}
    for line in response.iter_lines():
        if line == "":
            if fields:
                data = "\n".join(fields.get("data", [])) or None
                yield Sse(
                    event=fields.get("event", ["message"])[-1],
                    data=json.loads(data) if data else None,
                    id=fields.get("id", [None])[-1],
                    retry=int(fields["retry"][-1]) if "retry" in fields else None,
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)


def stream_until_end(client: httpx.Client, headers: dict[str, str] | None = None,
                     until_step: int | None = None, params: dict[str, Any] | None = None,
                     path: str = "/api/train/progress") -> list[Sse]:
    """Read the progress stream (the most recent run's, or `path`) until its
    `complete`/`error` event (or, with `until_step`, until a progress event at or past
    that step, then disconnect)."""
    seen: list[Sse] = []
    with client.stream("GET", path, headers=headers or {}, params=params or {}) as response:
        assert response.status_code == 200, response.read()
        for event in iter_sse(response):
            seen.append(event)
            if event.event in ("complete", "error"):
                break
            if until_step is not None and event.event == "progress" and event.data["step"] >= until_step:
                break
    return seen


def progress_steps(events: list[Sse]) -> list[int]:
    return [e.data["step"] for e in events if e.event == "progress"]


def final_event(events: list[Sse]) -> Sse:
    assert events and events[-1].event in ("complete", "error"), [e.event for e in events[-3:]]
    return events[-1]


def start_run(client: httpx.Client, body: dict[str, Any]) -> int:
    response = client.post("/api/train/start", json=body)
    assert response.status_code == 200, response.text
    return response.json()["job_id"]


def scripted_worker_env(worker: str = "trainer", step_seconds: float = 0.02) -> dict[str, str]:
    """Server environment whose runs use a scripted fake worker from tests/orchestrator
    (spawned exactly like the trainer) instead of training the demo model."""
    tests = Path(__file__).resolve().parents[1]
    python_path = [str(tests / "orchestrator"), str(tests), os.environ.get("PYTHONPATH", "")]
    return {"TUNELAB_WORKER_TARGET": f"scripted_workers:{worker}", "TUNELAB_PREWARM": "0",
            "SCRIPTED_STEP_SECONDS": str(step_seconds), "PYTHONPATH": os.pathsep.join(p for p in python_path if p)}
