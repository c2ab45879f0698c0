"""An MLX worker gets the orchestrator's treatment like a torch one: when it dies in the
middle of training, the run is finalized as an error that keeps every metric received."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")

from tunelab import paths  # noqa: E402
from tunelab.checkpoints import validate_checkpoint  # noqa: E402
from tunelab.orchestrator import Orchestrator  # noqa: E402
from tunelab.store import Store  # noqa: E402

pytestmark = [pytest.mark.mlx, pytest.mark.slow]


def test_killed_mlx_worker_is_finalized_as_an_error_with_its_metrics(home, demo_assets):
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        reached = threading.Event()
        seen: list[int] = []

        def on_event(event):
            if event.get("type") == "progress":
                seen.append(event["step"])
                if event["step"] >= 3:
                    reached.set()

        orchestrator.subscribe(on_event)
        try:
            run_id = orchestrator.start({
                "model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
                "backend": "mlx", "max_steps": 2000, "batch_size": 2, "gradient_accumulation_steps": 1,
                "max_seq_length": 128,
            })
            assert reached.wait(180), "the mlx worker never reported step 3"
            pid = orchestrator.snapshot()["worker_pid"]
            os.kill(pid, signal.SIGKILL)
            assert orchestrator.wait_idle(120)
            row = store.get_run(run_id)
            assert row["status"] == "error" and "SIGKILL" in row["error_message"]
            stored = [m["step"] for m in store.get_metrics(run_id)]
            assert stored == sorted(set(seen)) and len(stored) >= 3
            assert row["final_step"] == stored[-1]
        finally:
            orchestrator.shutdown()


@pytest.mark.parametrize("logging_steps, accumulation", [(1, 1), (5, 1), (1, 4)])
def test_mlx_stop_and_save_is_stopped_whatever_the_logging_or_accumulation(home, demo_assets, logging_steps, accumulation):
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        reported = threading.Event()
        orchestrator.subscribe(lambda e: reported.set() if e.get("type") == "progress" else None)
        try:
            run_id = orchestrator.start({
                "model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
                "backend": "mlx", "max_steps": 2000, "batch_size": 1, "gradient_accumulation_steps": accumulation,
                "logging_steps": logging_steps, "max_seq_length": 128,
            })
            assert reported.wait(180), "the mlx worker never reported a step"
            orchestrator.stop(save=True, expected_run_id=run_id)
            assert orchestrator.wait_idle(120)
            row = store.get_run(run_id)
            assert row["status"] == "stopped", row["error_message"]
            step = row["final_step"]
            assert logging_steps <= step < 2000
            assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{step}").step == step
        finally:
            orchestrator.shutdown()
