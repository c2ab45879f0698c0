"""End-to-end runs with the real worker (`tunelab.worker.entry:run_worker`) on the demo's
tiny Llama: a LoRA run from a fresh interpreter (which must never import torch & co),
and stop-and-save followed by resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from orch_helpers import EventRecorder, finished

from tunelab.checkpoints import validate_checkpoint
from tunelab.demos.text import demo_config
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.resume import check_resumable

pytestmark = pytest.mark.slow

HEAVY_MODULES = ("torch", "transformers", "peft", "trl", "datasets", "mlx", "ray")

PARENT_SCRIPT = textwrap.dedent("""
    import json, sys
    from tunelab import paths
    from tunelab.config.run_config import parse_config
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    def main():
        store = Store(paths.db_path())
        orchestrator = Orchestrator(store)
        logged = []
        orchestrator.subscribe(lambda e: logged.append(e["step"]) if e["type"] == "progress" else None)
        run_id = orchestrator.start(parse_config(json.loads(sys.argv[1])))
        assert orchestrator.wait_idle(300), "the run did not finish"
        heavy = sorted(m for m in {heavy} if m in sys.modules)
        print(json.dumps({{"run_id": run_id, "logged": logged, "heavy": heavy}}))
        orchestrator.shutdown()

    if __name__ == "__main__":
        main()
""").format(heavy=HEAVY_MODULES)


def test_real_lora_run_from_a_clean_parent(demo_assets, home, tmp_path):
    cfg = demo_config(demo_assets, steps=6, save_steps=6)
    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT)
    result = subprocess.run([sys.executable, str(script), json.dumps(cfg.public())], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TUNELAB_HOME": str(home)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["heavy"] == []  # the parent process never imported a training library

    from tunelab import paths
    from tunelab.store import Store

    with Store(paths.db_path()) as store:
        row = store.get_run(report["run_id"])
        stored_steps = [m["step"] for m in store.get_metrics(report["run_id"])]
    assert row["status"] == "completed", row["error_message"]
    assert report["logged"] == stored_steps == list(range(1, 7))
    # What HF Trainer itself logged agrees with what was stored.
    trainer_state = json.loads((Path(row["output_dir"]) / "checkpoint-6" / "trainer_state.json").read_text())
    hf_logged = sorted({entry["step"] for entry in trainer_state["log_history"] if "loss" in entry})
    assert hf_logged == stored_steps
    assert (Path(row["output_dir"]) / "adapter_model.safetensors").is_file()
    assert row["final_step"] == 6 and row["final_loss"] is not None and len(row["loss_sparkline"]) == 6


def test_real_stop_and_save_then_resume_continues_the_step_count(demo_assets, store):
    orchestrator = Orchestrator(store)
    recorder = EventRecorder()
    orchestrator.subscribe(recorder)
    try:
        first = orchestrator.start(demo_config(demo_assets, steps=400))
        recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 2, timeout=240)
        orchestrator.stop(save=True, expected_run_id=first)
        first_row = finished(orchestrator, first)
        assert first_row["status"] == "stopped", first_row["error_message"]
        stopped_at = first_row["final_step"]
        assert stopped_at < 400
        assert (Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").is_dir()

        second = orchestrator.resume(first)
        recorder.wait_for(lambda e: e["type"] == "progress" and e["run_id"] == second, timeout=240)
        orchestrator.stop(save=False, expected_run_id=second)  # no need to train all 400 steps
        second_row = finished(orchestrator, second)
        steps = [m["step"] for m in store.get_metrics(second)]
        assert steps and steps[0] == stopped_at + 1
        assert steps == list(range(stopped_at + 1, stopped_at + 1 + len(steps)))
        assert second_row["resumed_from_run_id"] == first and second_row["status"] == "stopped"
    finally:
        orchestrator.shutdown()


# logging_steps=1 without accumulation is the test above.
@pytest.mark.parametrize("logging_steps, accumulation", [(5, 1), (1, 4)])
def test_real_stop_and_save_is_stopped_whatever_the_logging_or_accumulation(demo_assets, store, logging_steps, accumulation):
    """The stop lands between logged steps (logging_steps 5) or after several micro-batches
    (accumulation 4): the run is `stopped` at the step the checkpoint holds."""
    orchestrator = Orchestrator(store)
    recorder = EventRecorder()
    orchestrator.subscribe(recorder)
    try:
        run_id = orchestrator.start(demo_config(demo_assets, steps=400, logging_steps=logging_steps,
                                                gradient_accumulation_steps=accumulation, batch_size=1))
        recorder.wait_for(lambda e: e["type"] == "progress", timeout=240)
        orchestrator.stop(save=True, expected_run_id=run_id)
        row = finished(orchestrator, run_id)
        assert row["status"] == "stopped", row["error_message"]
        step = row["final_step"]
        assert logging_steps <= step < 400
        assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{step}").step == step
        assert check_resumable(store, run_id)[1].name == f"checkpoint-{step}"
    finally:
        orchestrator.shutdown()


def test_a_sigterm_to_the_worker_itself_stops_and_saves(demo_assets, store):
    """A supervisor that signals every process of the job (systemd's control-group kill)
    reaches the worker directly: it stops at the next step and saves, and the run is
    `stopped` at that step and resumable, though the parent never asked for a stop."""
    orchestrator = Orchestrator(store)
    recorder = EventRecorder()
    orchestrator.subscribe(recorder)
    try:
        run_id = orchestrator.start(demo_config(demo_assets, steps=400))
        recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 2, timeout=240)
        os.kill(orchestrator.snapshot()["worker_pid"], signal.SIGTERM)
        row = finished(orchestrator, run_id)
        assert row["status"] == "stopped", row["error_message"]
        step = row["final_step"]
        assert 2 <= step < 400
        assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{step}").step == step
        assert check_resumable(store, run_id)[1].name == f"checkpoint-{step}"
    finally:
        orchestrator.shutdown()
