"""The run database locked by another process for 3 s during training and again while
the run is being finalized: every step is still stored, the run is finalized, and the
live state and status keep answering meanwhile (metric writes wait on their own thread)."""

from __future__ import annotations

from harness import worker_env
from scenarios import run_with_locked_database
from tunelab.orchestrator.metric_buffer import FLUSH_AT

STEPS = 60
LOCK_S = 3.0


def test_a_locked_database_loses_no_metric_and_the_run_is_finalized(start_server, demo_run, tmp_path):
    release = tmp_path / "release"
    server = start_server(extra_env=worker_env("scripted_workers:trainer", SCRIPTED_STEP_SECONDS="0.05",
                                               SCRIPTED_RELEASE_FILE=str(release)))
    locked = run_with_locked_database(server, demo_run(max_steps=STEPS), release, LOCK_S)
    row = locked.ending.row
    assert row["status"] == "completed", row["error_message"]
    assert row["final_step"] == STEPS
    assert row["metrics"]["steps"] == locked.expected_steps
    assert None not in row["metrics"]["loss"]
    assert locked.ending.streamed_steps == locked.expected_steps
    # The pump went on applying steps (more than a batch's worth) while the lock was held.
    assert locked.status_answers_while_locked > 0
    assert locked.steps_applied_while_locked >= 2 * FLUSH_AT
