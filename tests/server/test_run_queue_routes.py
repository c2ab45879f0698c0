"""The per-run routes against a real server on a CPU-only machine (one device): a second
and third start are queued with their positions, a queued run is withdrawn through
/api/runs/{id}/stop, and each run's own status and progress stream follow that run."""

from __future__ import annotations

from sse_helpers import final_event, scripted_worker_env, stream_until_end


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
