"""The server killed with SIGKILL during a real run: its worker exits by itself, the next
server closes the run as `error`, resumable from its checkpoint, and the resumed run
continues the step count."""

from __future__ import annotations

import pytest

from server_kill import kill_server_mid_run
from tunelab.store import ORPHAN_MESSAGE

pytestmark = pytest.mark.slow


def test_a_killed_server_leaves_no_worker_and_its_run_resumes(start_server, demo_run, tmp_path):
    # Prewarmed, as `tunelab serve` runs: the spare worker must die with the killed server too.
    outcome = kill_server_mid_run(lambda home: start_server(home=home, prewarm=True), tmp_path / "home", demo_run)
    assert outcome.worker_exit_s is not None, "the worker outlived its server"
    assert outcome.all_exit_s is not None, "a process of the killed server is still alive"

    row = outcome.row_after_restart
    assert row["status"] == "error" and row["error_message"] == ORPHAN_MESSAGE
    assert outcome.resume_checkpoint_step is not None  # save_steps=2 and it was killed past step 5
    assert row["can_resume"] is True and row["resume_blocked"] is False
    # Everything up to the last flush is kept, and nothing beyond what was trained.
    assert row["metrics"]["steps"] == list(range(1, len(row["metrics"]["steps"]) + 1))

    assert outcome.resumed_first_step == outcome.resume_checkpoint_step + 1
    assert outcome.resumed_steps[0] == outcome.resume_checkpoint_step + 1
    assert outcome.resumed_steps == list(range(outcome.resumed_steps[0], outcome.resumed_steps[-1] + 1))
