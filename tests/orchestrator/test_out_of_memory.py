"""A run that runs out of GPU memory mid-training (the real worker on the demo model,
made to raise CUDA's out-of-memory error at step 3) ends `error` with the settings to
change, and stays resumable from the checkpoint it had saved."""

from __future__ import annotations

from pathlib import Path

import oom_worker
import pytest
from orch_helpers import finished

from tunelab.demos.text import demo_config

pytestmark = pytest.mark.slow

SETTINGS_NAMED = ("batch_size", "max_seq_length", "training_type=qlora", "more free memory")


def test_oom_mid_run_names_the_settings_and_stays_resumable(orchestrator_for, demo_assets, store):
    orch, recorder = orchestrator_for(oom_worker.oom_after_step_2)
    first = orch.start(demo_config(demo_assets, steps=4, save_steps=2, warmup_steps=0))
    row = finished(orch, first)
    assert row["status"] == "error" and not row["resume_blocked"]
    message = row["error_message"]
    assert message.startswith("out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert all(words in message for words in SETTINGS_NAMED), message
    assert "checkpoint-2 was kept" in message and "resume_from=" in message
    assert (Path(row["output_dir"]) / "checkpoint-2").is_dir()

    second = orch.resume(first)
    resumed = finished(orch, second)
    assert resumed["status"] == "completed", resumed["error_message"]
    assert [m["step"] for m in store.get_metrics(second)] == [3, 4]


def test_oom_as_runtime_error_without_a_checkpoint_says_to_save(orchestrator_for, demo_assets, monkeypatch):
    monkeypatch.setenv("OOM_AS_RUNTIME_ERROR", "1")
    orch, _ = orchestrator_for(oom_worker.oom_after_step_2)
    run_id = orch.start(demo_config(demo_assets, steps=4, save_steps=0, gradient_checkpointing=False))
    row = finished(orch, run_id)
    assert row["status"] == "error"
    assert "gradient_checkpointing=true" in row["error_message"] and "set save_steps" in row["error_message"]
    assert "RuntimeError" not in row["error_message"]
