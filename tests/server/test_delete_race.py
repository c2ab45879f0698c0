"""DELETE with artifacts against a resume of the same run, fired at the same moment on a
live server: one of them wins whole. Either the run and its folder are gone and the
resume is refused without leaving a row behind, or the resume started and the delete is
refused because the new run uses the folder. Runs use the scripted trainer worker."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sse_helpers import final_event, scripted_worker_env, start_run, stream_until_end

pytestmark = pytest.mark.slow

# The delete follows the resume by these delays, so it lands before, during and after the
# resume's checks, whatever this machine's speed.
DELETE_DELAYS_S = (0.0, 0.5, 1.0, 1.5, 2.5)
# Higher-numbered checkpoint folders that are not valid: a resume spends a while looking
# past them for the valid one, which widens the window a race needs.
DECOYS = 4000


def _stopped_run_with_a_checkpoint(client, demo_run) -> tuple[int, Path]:
    job = start_run(client, demo_run(max_steps=100_000, save_steps=1))
    stream_until_end(client, params={"last_event_id": 0}, until_step=2)
    assert client.post("/api/train/stop", json={"save": True, "expected_job_id": job}).status_code == 200
    assert final_event(stream_until_end(client)).data["status"] == "stopped"
    folder = Path(client.get(f"/api/runs/{job}").json()["output_dir"])
    for n in range(10**6, 10**6 + DECOYS):
        (folder / f"checkpoint-{n}").mkdir()
    return job, folder


def test_delete_with_artifacts_and_resume_of_the_same_run_never_interleave(start_server, demo_run):
    server = start_server(extra_env=scripted_worker_env())
    client = server.client()
    for delay in DELETE_DELAYS_S:
        job, folder = _stopped_run_with_a_checkpoint(client, demo_run)
        assert client.post("/api/train/reset").status_code == 200
        answers: dict[str, object] = {}

        def delete() -> None:
            with server.client() as own:
                answers["delete"] = own.delete(f"/api/runs/{job}", params={"delete_artifacts": "true"})

        def resume() -> None:
            with server.client() as own:
                answers["resume"] = own.post(f"/api/runs/{job}/resume")

        threads = [threading.Thread(target=resume), threading.Thread(target=delete)]
        threads[0].start()
        threading.Event().wait(delay)
        threads[1].start()
        for thread in threads:
            thread.join(120)
        deleted, resumed = answers["delete"], answers["resume"]
        runs = client.get("/api/runs", params={"limit": 500}).json()["runs"]
        if deleted.status_code == 200:
            assert resumed.status_code in (400, 404, 409), resumed.text
            assert not folder.exists()
            assert not any(r["resumed_from_run_id"] == job for r in runs), "a resume half-started after the delete"
        else:
            assert (deleted.status_code, resumed.status_code) == (409, 200), (deleted.text, resumed.text)
            assert folder.is_dir()
            new_job = resumed.json()["job_id"]
            assert client.post("/api/train/stop", json={"save": False, "expected_job_id": new_job}).status_code == 200
            assert final_event(stream_until_end(client)).data["status"] == "stopped"
        assert client.post("/api/train/reset").status_code == 200
