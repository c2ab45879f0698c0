"""The per-run routes against a real server on a CPU-only machine (one device): a second
and third start are queued with their positions, a queued run is withdrawn through
/api/runs/{id}/stop, and each run's own status and progress stream follow that run. The
/api/train/* views follow the run that trains, never a queued one, and name it."""

from __future__ import annotations

from sse_helpers import final_event, scripted_worker_env, stream_until_end
from test_roles import add_keys


def test_runs_queue_behind_a_busy_device_and_each_has_its_own_status_stream_and_stop(start_server, demo_run):
    server = start_server(extra_env=scripted_worker_env(step_seconds=0.1))
    client = server.client()
    answers = [client.post("/api/train/start", json=demo_run(max_steps=steps)) for steps in (2000, 3, 3)]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    (busy, waits, withdrawn) = (a.json() for a in answers)
    assert (busy["status"], busy["queued"], busy["queue_position"]) == ("running", False, None)
    assert (waits["status"], waits["queued"], waits["queue_position"]) == ("queued", True, 1)
    assert withdrawn["queue_position"] == 2

    queued = client.get(f"/api/runs/{waits['job_id']}/status").json()
    assert (queued["phase"], queued["queue_position"], queued["is_training_running"]) == ("queued", 1, False)
    assert "queued at position 1" in queued["message"]

    cancel = client.post(f"/api/runs/{withdrawn['job_id']}/stop", json={"save": False})
    assert cancel.status_code == 200 and cancel.json()["outcome"] == "cancelled", cancel.text
    assert client.get(f"/api/runs/{withdrawn['job_id']}").json()["status"] == "cancelled"
    gone = final_event(stream_until_end(client, path=f"/api/runs/{withdrawn['job_id']}/progress"))
    assert (gone.event, gone.data["status"]) == ("complete", "cancelled")

    stop = client.post(f"/api/runs/{busy['job_id']}/stop", json={"save": True})
    assert stop.status_code == 200 and stop.json()["outcome"] == "stopping", stop.text
    # The queued run starts once the stopped one has let go of the CPU, and its stream follows it alone.
    events = stream_until_end(client, path=f"/api/runs/{waits['job_id']}/progress")
    assert final_event(events).data["status"] == "completed"
    assert {e.data["run_id"] for e in events if e.event in ("progress", "status", "complete")} == {waits["job_id"]}
    assert client.get(f"/api/runs/{busy['job_id']}/status").json()["phase"] == "stopped"
    assert client.get(f"/api/runs/{waits['job_id']}/status").json()["devices"] == ["cpu"]

    missing = client.get("/api/runs/999/status")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found", missing.text
    refused = client.post(f"/api/runs/{waits['job_id']}/stop", json={"save": False})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "no_active_run", refused.text


def test_the_train_routes_show_and_stop_the_run_that_trains_never_a_queued_one(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, extra_env=scripted_worker_env(step_seconds=0.1))
    as_ = {name: server.client(token=secret) for name, secret in secrets.items()}
    training = as_["alice"].post("/api/train/start", json=demo_run(max_steps=2000)).json()["job_id"]
    waiting = as_["bob"].post("/api/train/start", json=demo_run(max_steps=3)).json()
    assert waiting["status"] == "queued", waiting
    waiting = waiting["job_id"]
    stream_until_end(as_["viewer"], until_step=1)  # the training run has reported a step

    # Every view names the training run, not the newer queued one.
    status = as_["viewer"].get("/api/train/status").json()
    assert (status["run_id"], status["job_id"], status["phase"]) == (training, training, "training"), status
    metrics = as_["viewer"].get("/api/train/metrics").json()
    assert (metrics["run_id"], metrics["job_id"]) == (training, training) and metrics["histories"]["steps"]
    assert as_["viewer"].get("/api/train/plot.png").headers["X-Tunelab-Run-Id"] == str(training)
    events = stream_until_end(as_["viewer"], until_step=2)
    assert {e.data["run_id"] for e in events if e.event == "progress"} == {training}

    # bob's stop aims at alice's training run, which is not his: refused, and his queued run stays queued.
    for body in ({"save": False}, {"save": False, "expected_job_id": waiting}):
        refused = as_["bob"].post("/api/train/stop", json=body)
        assert refused.status_code == 403 and f"run {training} belongs to the key 'alice'" in refused.text, refused.text
    # alice may not name a run other than the one she was checked for.
    named = as_["alice"].post("/api/train/stop", json={"save": False, "expected_job_id": waiting})
    assert named.status_code == 409 and named.json()["error"]["code"] == "run_mismatch", named.text
    assert as_["viewer"].get(f"/api/runs/{waiting}").json()["status"] == "queued"
    assert as_["viewer"].get(f"/api/runs/{training}").json()["status"] == "running"

    stopped = as_["alice"].post("/api/train/stop", json={"save": False})
    assert stopped.status_code == 200 and (stopped.json()["run_id"], stopped.json()["job_id"]) == (training, training)
    # Once alice's run has ended, bob's starts from the queue and becomes the run these routes show.
    final = final_event(stream_until_end(as_["viewer"], path=f"/api/runs/{waiting}/progress"))
    assert final.data["status"] == "completed"
    assert as_["viewer"].get("/api/train/status").json()["run_id"] == waiting
    assert as_["viewer"].get(f"/api/runs/{training}").json()["status"] == "stopped"
