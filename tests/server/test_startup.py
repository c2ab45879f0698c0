"""What the server does at start and while idle: orphaned runs closed, the prewarmed worker
started once a client reads the lab (not at start), a small process, and a progress stream that opens
with `retry:` and keeps the connection alive."""

from __future__ import annotations

import time

import psutil
from fastapi.testclient import TestClient

from sse_helpers import iter_sse
from tunelab.orchestrator.prewarm import PREWARM_ENV
from tunelab.server.app import create_app
from tunelab.store import ORPHAN_MESSAGE, Store

IDLE_RSS_LIMIT_MB = 150


def test_runs_left_running_by_a_previous_server_are_closed_at_start(start_server, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with Store(home / "tunelab.db") as store:
        crashed = store.create_run({"model_name": "m"}, "m", "d")
        store.add_metrics(crashed, [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.25}])
        cancelled = store.create_run({"model_name": "m"}, "m", "d")
        store.mark_cancel_requested(cancelled)

    client = start_server(home=home).client()
    crashed_run = client.get(f"/api/runs/{crashed}").json()
    assert crashed_run["status"] == "error"
    assert crashed_run["error_message"] == ORPHAN_MESSAGE
    assert crashed_run["final_step"] == 2 and crashed_run["final_loss"] == 2.25
    assert crashed_run["can_resume"] is False  # no checkpoint on disk
    assert client.get(f"/api/runs/{cancelled}").json()["status"] == "stopped"


def test_the_warm_worker_waits_for_a_client_not_for_the_start(home, monkeypatch):
    # Its torch import would compete with the server's own start-up for the cores, and an
    # unused server should hold only itself (warm_on_use.py; test_warm_on_use.py on a real server).
    monkeypatch.delenv(PREWARM_ENV, raising=False)
    app = create_app(prewarm=True, static_dir=None)
    orchestrator = app.state.orchestrator
    assert orchestrator.prewarm_status() == {"enabled": True, "pid": None, "ready": False}
    with TestClient(app) as client:
        time.sleep(0.5)
        assert orchestrator.prewarm_status()["pid"] is None
        token = (home / "token").read_text().strip()
        assert client.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        deadline = time.monotonic() + 60
        while orchestrator.prewarm_status()["pid"] is None and time.monotonic() < deadline:
            time.sleep(0.02)
        warm = orchestrator.prewarm_status()["pid"]
        assert warm is not None
    assert not psutil.pid_exists(warm) or psutil.Process(warm).status() == psutil.STATUS_ZOMBIE  # ended with the server


def test_idle_server_is_small(live_server):
    assert live_server.client().get("/api/train/status").status_code == 200
    rss_mb = psutil.Process(live_server.pid).memory_info().rss / 2**20
    assert rss_mb < IDLE_RSS_LIMIT_MB


def test_idle_stream_starts_with_retry_then_heartbeats(live_server):
    with live_server.client().stream("GET", "/api/train/progress") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = iter_sse(response)
        first = next(events)
        assert first.retry is not None and first.retry > 0
        heartbeats = [next(events) for _ in range(2)]
    assert [e.event for e in heartbeats] == ["heartbeat", "heartbeat"]
    assert heartbeats[1].data["ts"] >= heartbeats[0].data["ts"]


def test_an_idle_stream_sends_heartbeats_and_no_ping_flood(live_server):
    """The stream turns sse-starlette's pings off (`ping=0`); releases before 3.4.9 then
    spun on a zero sleep and sent ping comments as fast as the loop ran."""
    lines = []
    with live_server.client().stream("GET", "/api/train/progress") as response:
        for line in response.iter_lines():
            lines.append(line)
            if sum(text == "event: heartbeat" for text in lines) == 2 or len(lines) > 1000:
                break
    assert [text for text in lines if text.startswith(":")] == []
    assert len(lines) < 20


def test_a_bad_last_event_id_names_the_header(live_server):
    response = live_server.client().get("/api/train/progress", headers={"Last-Event-ID": "step-five"})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "Last-Event-ID"
