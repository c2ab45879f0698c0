"""FSDP2 on CPU (gloo): full fine-tuning sharded over 2 ranks through the Trainer's own
FSDP integration, with FSDP's own activation checkpointing (fsdp_config), stops and saves
one checkpoint the ordinary validator accepts (whole weights gathered at each save), and
resumes to the end. (Its losses equal one process's
to within 0.001: bench/distributed.py's notes in docs/PERFORMANCE.md; the suite checks
loss equality once, for DDP, in test_torchrun_runs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.config.run_config import parse_config
from tunelab.demos.text import demo_config
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

pytestmark = pytest.mark.slow

RUN_WAIT_S = 240
STEPS = 30


def _config(demo_assets, **changes):
    data = demo_config(demo_assets, steps=STEPS, save_steps=STEPS).public()
    data.update(training_type="full", learning_rate=1e-4, gradient_accumulation_steps=1, **changes)
    return parse_config(data)


def test_fsdp_full_fine_tuning_stops_saves_and_resumes(demo_assets, home):
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    events: list = []
    orchestrator.subscribe(events.append)
    try:
        first = orchestrator.start(_config(demo_assets, num_processes=2, batch_size=2, gradient_checkpointing=True))
        while not any(e["type"] == "progress" and e.get("run_id") == first and e["step"] >= 2 for e in events):
            assert orchestrator.is_training_active(), store.get_run(first)["error_message"]
            orchestrator.wait_idle(0.1)
        orchestrator.stop(save=True, expected_run_id=first)
        assert orchestrator.wait_idle(RUN_WAIT_S)
        row = store.get_run(first)
        assert row["status"] == "stopped", row["error_message"]
        stopped_at = row["final_step"]
        assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{stopped_at}").kind == "full"
        statuses = [e["message"] for e in events if e["type"] == "status" and e.get("run_id") == first]
        assert any("fsdp, world size 2" in s for s in statuses)

        second = orchestrator.resume(first)
        assert orchestrator.wait_idle(RUN_WAIT_S)
        assert store.get_run(second)["status"] == "completed", store.get_run(second)["error_message"]
        steps = [m["step"] for m in store.get_metrics(first)] + [m["step"] for m in store.get_metrics(second)]
        assert steps == list(range(1, STEPS + 1))
    finally:
        orchestrator.shutdown()
