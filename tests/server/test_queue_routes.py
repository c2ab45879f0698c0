"""`GET /api/queue`, `POST /api/runs/{id}/queue` and cancelling a queued run, on a real
server with one (stand-in) GPU whose first run keeps it busy, so later starts queue; and
`tunelab queue` talking to that server over HTTP with a member's key. Priorities and
moves past other owners' runs are an admin's; a key's queued runs are capped.

Callers: the home's token (admin), the members alice and bob, and a viewer."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from fake_gpu import one_gpu_env
from test_roles import add_keys
from tunelab.cli.main import app

runner = CliRunner()


@pytest.fixture
def lab(start_server, tmp_path, demo_run):
    """A server on one GPU kept busy by a run of the home's token (minutes long, at 0.2 s a
    step), its clients by caller, the keys' secrets, and the busy run's id."""
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, extra_env=one_gpu_env(tmp_path))
    clients = {name: server.client(token=secret) for name, secret in secrets.items()}
    clients["token"] = server.client()
    busy = start(clients["token"], demo_run(max_steps=5000, display_name="busy"))
    assert busy["status"] == "running", busy
    yield server, clients, secrets, busy["job_id"]
    # Withdraw the waiting runs before the busy one frees the GPU, so none starts just to be stopped.
    for run_id in [*queued_ids(clients["token"]), busy["job_id"]]:
        clients["token"].post(f"/api/runs/{run_id}/stop", json={"save": False})


def start(client: httpx.Client, body: dict) -> dict:
    answer = client.post("/api/train/start", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def queued_ids(client: httpx.Client) -> list[int]:
    return [r["id"] for r in client.get("/api/queue").json()["queued"]]


def test_the_queue_shows_active_and_queued_runs_and_members_reorder_only_their_own(lab, demo_run):
    server, as_, _, running = lab
    bob = start(as_["bob"], demo_run(display_name="bob waits"))
    alice = start(as_["alice"], demo_run(display_name="alice waits", gpu_ids=[0]))
    assert bob["status"] == alice["status"] == "queued"
    alice_later = start(as_["alice"], demo_run(display_name="alice later"))["job_id"]

    seen = as_["viewer"].get("/api/queue").json()
    assert [(a["id"], a["owner"], a["devices"]) for a in seen["active"]] == [(running, None, ["gpu-0"])]
    assert seen["active"][0]["phase"] and seen["active"][0]["total_steps"] in (None, 5000)
    assert [(q["id"], q["queue_position"], q["owner"], q["queue_priority"], q["device_request"]) for q in seen["queued"]] == [
        (bob["job_id"], 1, "bob", 0, {"num_gpus": 1}), (alice["job_id"], 2, "alice", 0, {"gpu_ids": [0]}),
        (alice_later, 3, "alice", 0, {"num_gpus": 1})]

    # bob may not move alice's run, nor a viewer anyone's; the 403 names the owner.
    refused = as_["bob"].post(f"/api/runs/{alice['job_id']}/queue", json={"position": 1})
    assert refused.status_code == 403 and "belongs to the key 'alice'" in refused.json()["error"]["message"]
    assert as_["viewer"].post(f"/api/runs/{bob['job_id']}/queue", json={"priority": 1}).status_code == 403

    # A member sets no priority, not even on its own run: priorities rank the team's runs.
    priority = as_["alice"].post(f"/api/runs/{alice['job_id']}/queue", json={"priority": 1_000_000})
    assert priority.status_code == 403 and priority.json()["error"]["code"] == "admin_required", priority.text
    assert priority.json()["error"]["field"] == "priority" and "only an admin" in priority.json()["error"]["message"]
    # It moves its runs among its own, but never ahead of bob's.
    moved = as_["alice"].post(f"/api/runs/{alice_later}/queue", json={"position": 2})
    assert moved.status_code == 200, moved.text
    assert [q["id"] for q in moved.json()["queued"]] == [bob["job_id"], alice_later, alice["job_id"]]
    jump = as_["alice"].post(f"/api/runs/{alice['job_id']}/queue", json={"position": 1})
    assert jump.status_code == 403 and jump.json()["error"]["code"] == "queue_jump_forbidden", jump.text
    message = jump.json()["error"]["message"]
    assert f"ahead of run {bob['job_id']} of the key 'bob'" in message and "highest place" in message and " 2)" in message
    assert queued_ids(as_["viewer"]) == [bob["job_id"], alice_later, alice["job_id"]]
    assert [q["queue_priority"] for q in as_["viewer"].get("/api/queue").json()["queued"]] == [0, 0, 0]
    # An admin may put it first.
    first = as_["admin"].post(f"/api/runs/{alice['job_id']}/queue", json={"position": 1})
    assert first.status_code == 200, first.text
    assert queued_ids(as_["token"]) == [alice["job_id"], bob["job_id"], alice_later]

    # An admin raises bob's priority: ahead of alice, who can no longer move above it.
    assert as_["token"].post(f"/api/runs/{bob['job_id']}/queue", json={"priority": 5}).status_code == 200
    assert queued_ids(as_["token"]) == [bob["job_id"], alice["job_id"], alice_later]
    outside = as_["alice"].post(f"/api/runs/{alice['job_id']}/queue", json={"position": 1})
    assert outside.status_code == 422 and outside.json()["error"]["field"] == "position"
    assert "positions 2 to 3" in outside.json()["error"]["message"]

    # Bad bodies name the field; a run that is not queued is a 409.
    empty = as_["alice"].post(f"/api/runs/{alice['job_id']}/queue", json={})
    assert empty.status_code == 422 and "position" in empty.text and "priority" in empty.text
    assert as_["alice"].post(f"/api/runs/{alice['job_id']}/queue", json={"position": 0}).status_code == 422
    busy = as_["token"].post(f"/api/runs/{running}/queue", json={"priority": 1})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "not_queued"
    assert "running" in busy.json()["error"]["message"]
    assert as_["token"].post("/api/runs/999999/queue", json={"priority": 1}).status_code == 404


def test_a_queued_run_is_cancelled_by_its_owner_and_the_cli_speaks_to_the_server(lab, demo_run):
    server, as_, secrets, running = lab
    carol = start(as_["alice"], demo_run(display_name="alice cancels"))["job_id"]
    assert carol in queued_ids(as_["viewer"])

    # `tunelab queue` finds the server through the home's server.json and sends the caller's key.
    as_bob = {"TUNELAB_HOME": str(server.home), "TUNELAB_TOKEN": secrets["bob"], "COLUMNS": "160"}
    listed = runner.invoke(app, ["queue", "list"], env=as_bob)
    assert listed.exit_code == 0 and "alice cancels" in listed.output, listed.output
    refused = runner.invoke(app, ["queue", "cancel", str(carol)], env=as_bob)
    assert refused.exit_code == 1 and "belongs to the key 'alice'" in refused.output
    assert carol in queued_ids(as_["viewer"])

    # A cancel names a queued run: one that trains is refused and left training.
    as_admin = {**as_bob, "TUNELAB_TOKEN": secrets["admin"]}
    training = runner.invoke(app, ["queue", "cancel", str(running)], env=as_admin)
    assert training.exit_code == 1 and "it has started" in training.output
    assert as_["viewer"].get(f"/api/runs/{running}").json()["status"] == "running"

    cancelled = runner.invoke(app, ["queue", "cancel", str(carol)], env={**as_bob, "TUNELAB_TOKEN": secrets["alice"]})
    assert cancelled.exit_code == 0, cancelled.output
    assert "the server at http://127.0.0.1" in cancelled.output
    assert carol not in queued_ids(as_["viewer"])
    assert as_["viewer"].get(f"/api/runs/{carol}").json()["status"] == "cancelled"
    again = as_["alice"].post(f"/api/runs/{carol}/queue", json={"position": 1})
    assert again.status_code == 409 and "cancelled" in again.json()["error"]["message"]


def test_a_keys_queued_runs_are_capped_and_the_cap_is_the_servers_setting(start_server, tmp_path, demo_run):
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, extra_env=one_gpu_env(tmp_path), extra_args=["--max-queued-per-key", "2"])
    as_ = {name: server.client(token=secret) for name, secret in secrets.items()}
    busy = start(server.client(), demo_run(max_steps=5000))["job_id"]
    try:
        waiting = [start(as_["alice"], demo_run())["job_id"] for _ in range(2)]
        refused = as_["alice"].post("/api/train/start", json=demo_run())
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_cap_reached", refused.text
        message = refused.json()["error"]["message"]
        assert "the key 'alice' already has 2 runs waiting" in message and "cap per key (2)" in message
        assert "--max-queued-per-key" in message and "TUNELAB_MAX_QUEUED_PER_KEY" in message
        assert queued_ids(as_["viewer"]) == waiting
        # The cap is per key: bob still queues; a place freed is alice's again.
        bob = start(as_["bob"], demo_run())["job_id"]
        assert as_["alice"].post(f"/api/runs/{waiting[0]}/stop", json={"save": False}).status_code == 200
        again = start(as_["alice"], demo_run())["job_id"]
        assert queued_ids(as_["viewer"]) == [waiting[1], bob, again]
    finally:
        for run_id in [*queued_ids(server.client()), busy]:
            server.client().post(f"/api/runs/{run_id}/stop", json={"save": False})


@pytest.mark.parametrize("flag, env", [(["--max-queued-per-key", "0"], {}), ([], {"TUNELAB_MAX_QUEUED_PER_KEY": "many"})])
def test_a_cap_that_is_not_a_whole_number_from_1_refuses_the_start(tmp_path, flag, env):
    home = tmp_path / "home"
    home.mkdir()
    ended = subprocess.run([sys.executable, "-m", "tunelab.server", "--port", "0", *flag], capture_output=True, text=True,
                           env={**os.environ, "TUNELAB_HOME": str(home), **env}, timeout=60)
    assert ended.returncode == 2, ended
    assert "must be a whole number from 1 to" in ended.stderr and (flag[0] if flag else "TUNELAB_MAX_QUEUED_PER_KEY") in ended.stderr
