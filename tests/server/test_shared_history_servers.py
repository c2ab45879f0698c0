"""Two real servers (two homes, two identities) on one history, a SQLite file and a
PostgreSQL database: neither ends or takes the other's runs while the other's heartbeat
lives; a server killed -9 has its runs recovered by the other only once its heartbeat has
been silent past TUNELAB_SERVER_SILENT_S, and a queued run needing a secret the survivor
lacks ends `error`, resumable, naming the secret. Runs use the scripted trainer."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from sse_helpers import scripted_worker_env, start_run

from tunelab.store import Store

SILENT_S = 3.0
WAIT_S = 60.0
SECRET = "hf_secret_of_server_a_31"


def servers_env(url: str) -> dict[str, str]:
    return {**scripted_worker_env("trainer", step_seconds=0.1), "TUNELAB_DATABASE_URL": url,
            "TUNELAB_SERVER_SILENT_S": str(SILENT_S), "HF_TOKEN": ""}


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def row(url: str, run_id: int) -> dict[str, Any]:
    with Store(url) as store:
        return store.get_run(run_id)


def server_id(home: Path) -> str:
    return (home / "server-id").read_text().strip()


def start_two(start_server, tmp_path: Path, url: str, demo_run, run_1: dict[str, Any]):
    """A trains run 1 and queues run 2 (with A's hf_token) and run 3 (no secret); then B starts."""
    a = start_server(home=tmp_path / "a", extra_env=servers_env(url))
    with a.client() as client:
        first = start_run(client, demo_run(**run_1))
        wait_for(lambda: row(url, first)["status"] == "running", "run 1 to train")
        second = client.post("/api/train/start", json=demo_run(max_steps=4, hf_token=SECRET)).json()
        third = client.post("/api/train/start", json=demo_run(max_steps=4)).json()
    assert second["queued"] and third["queued"], (second, third)
    b = start_server(home=tmp_path / "b", extra_env=servers_env(url))
    assert server_id(a.home) != server_id(b.home)
    return a, b, first, second["job_id"], third["job_id"]


def test_a_live_server_keeps_its_queue_and_runs_it(start_server, tmp_path, store_url, demo_run) -> None:
    url = store_url
    a, b, first, second, third = start_two(start_server, tmp_path, url, demo_run, {"max_steps": 100000})
    # B's scheduler passes over A's runs for longer than the silence bound: A beats, so they stay A's.
    time.sleep(SILENT_S * 2)
    for run_id, status in ((first, "running"), (second, "queued"), (third, "queued")):
        stored = row(url, run_id)
        assert (stored["status"], stored["server_id"]) == (status, server_id(a.home)), stored

    with a.client() as client:
        assert client.post(f"/api/runs/{first}/stop", json={"save": True}).status_code == 200
    wait_for(lambda: row(url, third)["status"] == "completed", "A's queue to run")
    done = {run_id: row(url, run_id) for run_id in (first, second, third)}
    assert done[first]["status"] == "stopped" and done[first]["resume_blocked"] is False
    assert done[second]["status"] == "completed"
    for stored in (done[second], done[third]):
        assert stored["server_id"] == server_id(a.home) and stored["claimed_by"].split(":")[1] == str(a.pid), stored
    assert SECRET not in str(done[second])


def test_a_killed_server_is_recovered_only_after_its_heartbeat_is_silent(start_server, tmp_path, store_url,
                                                                          demo_run) -> None:
    url = store_url
    a, b, first, second, third = start_two(start_server, tmp_path, url, demo_run,
                                           {"max_steps": 100000, "save_steps": 2})
    wait_for(lambda: list((Path(row(url, first)["output_dir"])).glob("checkpoint-*")), "run 1's first checkpoint")
    os.kill(a.pid, signal.SIGKILL)
    a.process.wait()

    wait_for(lambda: row(url, third)["status"] == "completed", "B to take over A's runs")
    with Store(url) as store:
        a_seen = next(s["last_seen"] for s in store.servers() if s["id"] == server_id(a.home))
    closed, failed, taken = row(url, first), row(url, second), row(url, third)
    # Nothing of A's was touched before A had been silent for the bound.
    assert closed["ended_at"] >= a_seen + SILENT_S and failed["ended_at"] >= a_seen + SILENT_S
    assert closed["status"] == "error" and "heartbeat went silent" in closed["error_message"]
    assert closed["resume_blocked"] is False  # its checkpoints are readable here
    assert failed["status"] == "error" and failed["resume_blocked"] is False
    assert "hf_token" in failed["error_message"] and "HF_TOKEN" in failed["error_message"]
    assert taken["server_id"] == server_id(b.home) and taken["claimed_by"].split(":")[1] == str(b.pid)
    assert Path(taken["output_dir"]).is_relative_to(b.home / "outputs")

    with b.client() as client:
        listed = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert listed[second]["can_resume"] is True and listed[first]["can_resume"] is True
        refused = client.post(f"/api/runs/{second}/resume")
        assert refused.status_code == 422 and "hf_token" in refused.text
        resumed = client.post(f"/api/runs/{second}/resume", json={"hf_token": SECRET})
        assert resumed.status_code == 200, resumed.text
    again = resumed.json()["job_id"]
    wait_for(lambda: row(url, again)["status"] == "completed", "the resumed run to complete on B")
    assert row(url, again)["resumed_from_run_id"] == second


def test_a_server_never_closes_another_live_servers_runs_at_start(start_server, tmp_path, store_url, demo_run) -> None:
    """Same host name, two homes: B's start-up leaves A's running run alone (orphans are by server id)."""
    url = store_url
    a = start_server(home=tmp_path / "a", extra_env=servers_env(url))
    with a.client() as client:
        first = start_run(client, demo_run(max_steps=100000))
    wait_for(lambda: row(url, first)["status"] == "running", "run 1 to train")
    b = start_server(home=tmp_path / "b", extra_env=servers_env(url))
    time.sleep(SILENT_S * 2)
    assert row(url, first)["status"] == "running"
    b.stop()
    a.stop()  # A's shutdown stops and saves its own run
    assert row(url, first)["status"] in ("stopped", "error") and row(url, first)["error_message"] != \
        "its server stopped answering during training (its heartbeat went silent)"
