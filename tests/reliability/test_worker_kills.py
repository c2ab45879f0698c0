"""The real worker killed with SIGKILL at a random moment of each stage — loading the
model, loading the data, training, writing a checkpoint, saving the final model: every
run reaches a final state, every step the server streamed is stored, no process of the
worker is left, and a run is resumable exactly when a valid checkpoint survived."""

from __future__ import annotations

import random

import pytest

from kill_trials import STAGES, run_kill_trial

pytestmark = pytest.mark.slow
SEED = 20251130


def test_a_worker_killed_in_any_stage_leaves_a_finalized_run_and_nothing_else(start_server, demo_run):
    server = start_server(prewarm=True)  # as `tunelab serve` runs: the kills are aimed at a warm worker's stages
    rng = random.Random(SEED)
    for stage in STAGES:
        trial = run_kill_trial(server, demo_run, stage, rng)
        where = f"{stage} ({trial.moment}), run {trial.run_id}"
        assert trial.status in ("error", "completed"), where
        if trial.status == "error":
            assert "SIGKILL" in trial.error_message, where
            assert trial.can_resume == trial.has_valid_checkpoint, where
        assert trial.unstored_streamed_steps == [], where
        assert trial.leftovers == [], where
