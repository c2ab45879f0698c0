"""Resuming over HTTP a run that used secrets: the history never held them, so the
resume request gives them again, and without them the answer is a 422 naming each one
before anything starts. Runs use the scripted trainer worker on a live server."""

from __future__ import annotations

import pytest

from sse_helpers import final_event, scripted_worker_env, start_run, stream_until_end

pytestmark = pytest.mark.slow

TOKEN = "hf_http_resume_secret_9"


def test_resume_over_http_needs_the_token_again(start_server, demo_run):
    server = start_server(extra_env={**scripted_worker_env(), "HF_TOKEN": ""})
    client = server.client()
    job = start_run(client, demo_run(max_steps=100_000, save_steps=1, hf_token=TOKEN))
    stream_until_end(client, params={"last_event_id": 0}, until_step=2)
    assert client.post("/api/train/stop", json={"save": True, "expected_job_id": job}).status_code == 200
    assert final_event(stream_until_end(client)).data["status"] == "stopped"
    run = client.get(f"/api/runs/{job}").json()
    assert run["config"]["secrets_used"] == ["hf_token"] and TOKEN not in str(run)

    refused = client.post(f"/api/runs/{job}/resume")
    assert refused.status_code == 422, refused.text
    assert [f["field"] for f in refused.json()["error"]["fields"]] == ["hf_token"]
    assert client.get("/api/runs").json()["total"] == 1

    resumed = client.post(f"/api/runs/{job}/resume", json={"hf_token": TOKEN})
    assert resumed.status_code == 200, resumed.text
    new_job = resumed.json()["job_id"]
    assert client.post("/api/train/stop", json={"save": False, "expected_job_id": new_job}).status_code == 200
    assert final_event(stream_until_end(client)).data["status"] == "stopped"
