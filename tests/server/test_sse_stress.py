"""The progress stream under a flood of steps, from a real child process through the real
orchestrator (`flood_worker` reports thousands of steps a second without training):
reconnecting again and again never loses or repeats a step, and a client that stops
reading is dropped (its queue stays bounded) and recovers by reconnecting."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
import uvicorn

from sse_helpers import iter_sse
from tunelab import paths
from tunelab.orchestrator import Orchestrator
from tunelab.server.app import create_app
from tunelab.server.main import bind_socket
from tunelab.server.sse import ProgressStream, parse_event_id
from tunelab.store import Store

TOKEN = "flood-token"
FLOOD_STEPS = 12000


@pytest.fixture
def flood_orchestrator(home, demo_assets, monkeypatch) -> Iterator[Orchestrator]:
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(demo_assets.root))
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store, worker_target="flood_worker:run")
    yield orchestrator
    orchestrator.shutdown()
    store.close()


@pytest.fixture
def flood_url(flood_orchestrator) -> Iterator[str]:
    """A real uvicorn server (in a thread of this process) whose runs are floods."""
    app = create_app(store=flood_orchestrator.store, orchestrator=flood_orchestrator, token=TOKEN, heartbeat_seconds=5)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(15)


def flood_body(demo_assets, steps: int) -> dict[str, Any]:
    return {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": steps}


def test_reconnecting_during_a_flood_never_loses_or_repeats_a_step(flood_url, demo_assets):
    client = httpx.Client(base_url=flood_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert client.post("/api/train/start", json=flood_body(demo_assets, FLOOD_STEPS)).status_code == 200
    received: list[int] = []
    last_id = ""
    reconnects = 0
    finished = False
    while not finished:
        headers = {"Last-Event-ID": last_id} if received else {}
        params = {} if received else {"last_event_id": 0}
        with client.stream("GET", "/api/train/progress", headers=headers, params=params) as response:
            read_now = 0
            for event in iter_sse(response):
                if event.event == "progress":
                    received.append(event.data["step"])
                    last_id = event.id
                    read_now += 1
                    if read_now >= 700:  # hang up mid-flood, at an arbitrary step
                        break
                elif event.event in ("complete", "error"):
                    assert event.data["status"] == "completed"
                    finished = True
                    break
        reconnects += 1
    assert reconnects >= 5
    assert received == list(range(1, FLOOD_STEPS + 1))


def test_a_client_that_stops_reading_is_dropped_and_recovers(flood_orchestrator, demo_assets):
    async def scenario() -> tuple[int, list[str], int, list[int], list[str]]:
        stream = ProgressStream(flood_orchestrator, None, heartbeat_seconds=5, queue_limit=50)
        events = stream.events()
        assert (await anext(events)).retry is not None  # subscribed from here on
        flood_orchestrator.start(flood_body(demo_assets, 3000))
        first = await anext(events)
        while first.event != "progress":
            first = await anext(events)
        # Then the client reads nothing while the whole run goes by.
        assert await asyncio.to_thread(flood_orchestrator.wait_idle, 60)
        await asyncio.sleep(0.2)  # let the last deliveries reach the queue
        queued = stream.queue.qsize()
        after_stall = [sse.event async for sse in events]
        again = ProgressStream(flood_orchestrator, parse_event_id(first.id), heartbeat_seconds=5)
        caught_up = [sse async for sse in again.events()]
        steps = [parse_event_id(s.id).step for s in caught_up if s.event == "progress"]
        return queued, after_stall, parse_event_id(first.id).step, steps, [s.event for s in caught_up]

    queued, after_stall, first_step, steps, caught_up_kinds = asyncio.run(scenario())
    assert queued <= 50  # bounded: the flood did not pile up behind the stalled client
    assert after_stall == []  # it was cut off, not served late
    assert steps == list(range(first_step + 1, 3001))  # reconnecting fills the hole exactly
    assert caught_up_kinds[-1] == "complete"


def run_to_the_end(client: httpx.Client, demo_assets, steps: int) -> list[Any]:
    """Start a flood of `steps` and read its whole stream; its progress events."""
    assert client.post("/api/train/start", json=flood_body(demo_assets, steps)).status_code == 200
    with client.stream("GET", "/api/train/progress", params={"last_event_id": 0}) as response:
        events = [e for e in iter_sse(response)]
    assert events[-1].event == "complete", events[-1]
    return [e for e in events if e.event == "progress"]


def test_event_ids_name_the_run_and_an_id_from_another_run_replays_the_new_one_whole(flood_url, demo_assets):
    client = httpx.Client(base_url=flood_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    first = run_to_the_end(client, demo_assets, 60)
    old_run = first[0].data["run_id"]
    assert [e.id for e in first] == [f"{old_run}:{step}" for step in range(1, 61)]
    # A client of the first run held `<old run>:40` when the next (shorter) run began.
    second = run_to_the_end(client, demo_assets, 50)
    new_run = second[0].data["run_id"]
    assert new_run != old_run

    def replay(**request: Any) -> list[str]:
        with client.stream("GET", "/api/train/progress", **request) as response:
            assert response.status_code == 200, response.read()
            return [e.id for e in iter_sse(response) if e.event == "progress"]

    everything = [f"{new_run}:{step}" for step in range(1, 51)]
    assert replay(headers={"Last-Event-ID": f"{old_run}:40"}) == everything
    assert replay(params={"last_event_id": f"{old_run}:40"}) == everything
    # Its own run's id, and a bare step number (as older clients send), mean "after that step".
    assert replay(headers={"Last-Event-ID": f"{new_run}:40"}) == everything[40:]
    assert replay(headers={"Last-Event-ID": "40"}) == everything[40:]
    for bad in ("7:", ":40", "7:forty", "-1", "7:40:1"):
        refused = client.get("/api/train/progress", headers={"Last-Event-ID": bad})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "Last-Event-ID", bad
        assert "<run_id>:<step>" in refused.json()["error"]["message"]
    refused = client.get("/api/train/progress", params={"last_event_id": "x:1"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "last_event_id"


def test_a_flood_goes_out_in_batched_writes_holding_every_step_once(flood_orchestrator, demo_assets):
    """What the response writes: events that are ready share one chunk, so a flood takes
    far fewer writes than steps, and the chunks parse back into every step once, in order."""
    async def scenario() -> list[bytes]:
        stream = ProgressStream(flood_orchestrator, None, heartbeat_seconds=5)
        writes = stream._writes()
        chunks = [await anext(writes)]
        assert b"retry:" in chunks[0]  # sent alone, at once: the client knows it is subscribed
        flood_orchestrator.start(flood_body(demo_assets, 3000))
        async for chunk in writes:
            chunks.append(chunk)
        return chunks

    chunks = asyncio.run(scenario())
    text = b"".join(chunks).decode()
    steps = [int(line.split(":")[-1]) for line in text.splitlines() if line.startswith("id:")]
    assert steps == list(range(1, 3001))
    kinds = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event:")]
    assert kinds[-1] == "complete"
    assert len(chunks) < 3000 / 4  # batched: many events a write under the flood
