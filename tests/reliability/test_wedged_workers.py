"""Workers that will not end: one wedges while saving a checkpoint, one ignores every
stop (and SIGTERM). The stop watchdog (caps shortened to 2 s here) kills each, and the
run is recorded truthfully: a stop-and-save without a checkpoint is an `error` whose
resume is blocked; a cancel is `stopped` and keeps nothing."""

from __future__ import annotations

import pytest

from harness import worker_env
from scenarios import run_to_end

SHORT_CAPS = {"TUNELAB_STOP_SAVE_CAP_S": "2", "TUNELAB_STOP_CANCEL_CAP_S": "2", "TUNELAB_STOP_GRACE_S": "2",
              "SCRIPTED_STEP_SECONDS": "0.05"}


def wedge(start_server, demo_run, target: str, save: bool):
    server = start_server(extra_env=worker_env(target, **SHORT_CAPS))
    ending = run_to_end(server, demo_run(max_steps=5000), stop_at_step=3, save=save)
    assert ending.worker_gone and ending.leftovers == []
    assert ending.unstored_streamed_steps == []
    return server, ending


@pytest.mark.parametrize("target", ["fault_workers:hangs_while_saving", "scripted_workers:ignores_stop"])
def test_a_wedged_stop_and_save_is_an_error_that_cannot_be_resumed(start_server, demo_run, target):
    server, ending = wedge(start_server, demo_run, target, save=True)
    row = ending.row
    assert row["status"] == "error"
    assert row["resume_blocked"] is True and row["can_resume"] is False
    assert "did not land a valid checkpoint" in row["error_message"]
    assert ending.final_event["status"] == "error"
    refused = server.client().post(f"/api/runs/{row['id']}/resume")
    assert refused.status_code in (400, 409) and refused.json()["error"]["code"] == "not_resumable"


def test_a_cancel_the_worker_ignores_still_ends_stopped_and_keeps_nothing(start_server, demo_run):
    _, ending = wedge(start_server, demo_run, "scripted_workers:ignores_stop", save=False)
    row = ending.row
    assert row["status"] == "stopped" and row["cancel_requested"] is True
    assert row["output_dir"] is None and row["can_resume"] is False
    assert ending.final_event["status"] == "stopped"
