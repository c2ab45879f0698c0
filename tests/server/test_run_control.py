"""Controlling runs through the API: idempotent start, cancel, stop-and-save, resume,
reconnecting mid-run, and deleting runs with their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from sse_helpers import final_event, progress_steps, start_run, stream_until_end

pytestmark = pytest.mark.slow  # each test trains through a real worker

# Long enough that a stop always lands mid-training; every test ends its run early.
LONG = 400


def test_mid_run_reconnect_gets_every_step_exactly_once(server, demo_run):
    client = server.client()
    start_run(client, demo_run(max_steps=20))
    first = stream_until_end(client, params={"last_event_id": 0}, until_step=3)
    seen = progress_steps(first)
    rest = stream_until_end(client, headers={"Last-Event-ID": first[-1].id})
    assert final_event(rest).data["status"] == "completed"
    assert seen + progress_steps(rest) == list(range(1, 21))


def test_same_request_id_starts_one_run_and_cancel_discards_it(server, demo_run):
    client = server.client()
    body = demo_run(max_steps=LONG, start_request_id="click-1")
    first = client.post("/api/train/start", json=body).json()
    again = client.post("/api/train/start", json=body).json()
    assert again["job_id"] == first["job_id"] and again["duplicate"] is True and first["duplicate"] is False
    job = first["job_id"]

    busy = client.post("/api/train/start", json=demo_run(max_steps=LONG, queue=False))
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "run_active"
    running_delete = client.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})
    assert running_delete.status_code == 409 and running_delete.json()["error"]["code"] == "run_active"

    stream_until_end(client, params={"last_event_id": 0}, until_step=2)
    stale = client.post("/api/train/stop", json={"save": False, "expected_job_id": job + 1})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "run_mismatch"
    stop = client.post("/api/train/stop", json={"save": False, "expected_job_id": job})
    assert stop.status_code == 200, stop.text
    end = final_event(stream_until_end(client))
    assert end.event == "complete" and end.data["status"] == "stopped"

    run = client.get(f"/api/runs/{job}").json()
    assert run["status"] == "stopped" and run["cancel_requested"] is True
    assert run["output_dir"] is None and run["can_resume"] is False
    assert client.post(f"/api/runs/{job}/resume").json()["error"]["code"] == "not_resumable"
    # The same click replayed after the run ended still names the same job.
    late = client.post("/api/train/start", json=body).json()
    assert late == {"job_id": job, "status": "stopped", "duplicate": True, "queued": False, "queue_position": None}
    assert client.get("/api/runs").json()["total"] == 1


def test_stop_and_save_then_resume_continues_the_step_count(server, demo_run):
    client = server.client()
    job = start_run(client, demo_run(max_steps=LONG))
    seen = stream_until_end(client, params={"last_event_id": 0}, until_step=3)
    assert client.post("/api/train/stop", json={"save": True, "expected_job_id": job}).status_code == 200
    rest = stream_until_end(client, headers={"Last-Event-ID": seen[-1].id})
    end = final_event(rest)
    assert end.event == "complete" and end.data["status"] == "stopped"
    stopped_at = end.data["final_step"]
    assert progress_steps(seen) + progress_steps(rest) == list(range(1, stopped_at + 1))

    run = client.get(f"/api/runs/{job}").json()
    assert run["status"] == "stopped" and run["final_step"] == stopped_at < LONG
    assert run["can_resume"] is True
    folder = Path(run["output_dir"])
    assert (folder / f"checkpoint-{stopped_at}" / "trainer_state.json").is_file()

    assert client.post("/api/train/reset").json()["phase"] == "idle"
    resumed = client.post(f"/api/runs/{job}/resume")
    assert resumed.status_code == 200, resumed.text
    new_job = resumed.json()["job_id"]
    assert new_job != job
    twice = client.post(f"/api/runs/{job}/resume")
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "not_resumable"

    continued = stream_until_end(client, params={"last_event_id": 0}, until_step=stopped_at + 2)
    assert progress_steps(continued)[0] == stopped_at + 1
    assert client.get(f"/api/runs/{new_job}").json()["resumed_from_run_id"] == job
    original = client.get(f"/api/runs/{job}").json()
    assert original["resumed_by_run_id"] == new_job and original["can_resume"] is False
    newest, older = (client.get("/api/runs", params={"limit": 1, "offset": n}).json() for n in (0, 1))
    assert [r["id"] for r in newest["runs"] + older["runs"]] == [new_job, job]
    assert newest["total"] == 2

    # Both runs use one folder: deleting it with either run is refused.
    shared = client.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})
    assert shared.status_code == 409, shared.text
    assert shared.json()["error"]["code"] == "output_dir_shared"
    assert shared.json()["error"]["field"] == "delete_artifacts"
    assert folder.is_dir()

    client.post("/api/train/stop", json={"save": False})
    assert final_event(stream_until_end(client)).data["status"] == "stopped"
    # The cancelled continuation gave up the folder, so the original may now take it along.
    gone = client.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"deleted": job, "artifacts_removed": True, "exports_removed": []}
    assert not folder.exists()
    assert client.get(f"/api/runs/{job}").status_code == 404


def test_delete_with_artifacts_refuses_a_folder_outside_the_outputs_root(start_server, demo_run, tmp_path):
    client = start_server(extra_args=["--allow-output-anywhere"]).client()
    outside = tmp_path / "kept-outside"
    job = start_run(client, demo_run(max_steps=2, output_dir=str(outside), allow_output_outside_root=True))
    assert final_event(stream_until_end(client, params={"last_event_id": 0})).data["status"] == "completed"
    assert outside.is_dir()

    refused = client.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "path_not_allowed" and error["field"] == "delete_artifacts"
    assert outside.is_dir() and client.get(f"/api/runs/{job}").status_code == 200

    kept = client.delete(f"/api/runs/{job}")
    assert kept.json() == {"deleted": job, "artifacts_removed": False, "exports_removed": []}
    assert outside.is_dir()
