"""Stop-and-save, resume, cancel, early stop and parent death, on real spawned workers."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time

import psutil
import pytest
from spawned_worker import SpawnedWorker, demo_config, run_to_end, run_worker_in_middleman

from tunelab import events as ev
from tunelab.checkpoints import validate_checkpoint

pytestmark = pytest.mark.slow

TOTAL_STEPS = 30
# Long enough that a stop sent at step 2 always lands well before the end.
RUN = {"max_steps": TOTAL_STEPS, "max_seq_length": 64, "batch_size": 2}


def _is_training_progress(event: dict) -> bool:
    return event["type"] == ev.PROGRESS and event["loss"] is not None


@pytest.fixture(scope="module")
def uninterrupted(demo_assets, tmp_path_factory):
    """Per-step losses of a run that nobody stops."""
    final, worker = run_to_end(demo_config(demo_assets, tmp_path_factory.mktemp("whole") / "out", **RUN))
    assert final["type"] == ev.COMPLETE, final
    return {p["step"]: p["loss"] for p in worker.progress()}


@pytest.fixture(scope="module")
def stopped(demo_assets, tmp_path_factory):
    """A run stopped with save at a step boundary soon after step 2."""
    out = tmp_path_factory.mktemp("stopped") / "out"
    worker = SpawnedWorker(demo_config(demo_assets, out, **RUN))
    try:
        worker.wait_for(lambda e: _is_training_progress(e) and e["step"] >= 2)
        worker.stop(save=True)
        return worker.finish(), worker, out
    finally:
        worker.kill()


def test_stop_and_save_writes_a_valid_checkpoint_of_the_current_step(stopped):
    final, worker, out = stopped
    assert final["type"] == ev.COMPLETE and final["output_dir"] == str(out)
    last_step = worker.progress()[-1]["step"]
    assert 2 <= last_step < TOTAL_STEPS
    assert final["status_message"] == f"stopped at step {last_step}; checkpoint saved"
    checkpoint = out / f"checkpoint-{last_step}"
    assert validate_checkpoint(checkpoint).step == last_step
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == last_step
    assert not (out / "adapter_model.safetensors").exists()  # no final model for a stopped run
    assert not any(e["type"] == ev.STATUS and e["stage"] == "saving" for e in worker.events)


def test_resume_continues_the_step_count_with_the_same_losses(demo_assets, tmp_path, stopped, uninterrupted):
    _, first_part, out = stopped
    stop_step = first_part.progress()[-1]["step"]
    config = demo_config(demo_assets, tmp_path / "resumed", resume_from=str(out / f"checkpoint-{stop_step}"), **RUN)
    final, worker = run_to_end(config)

    assert final["type"] == ev.COMPLETE, final
    training_status = next(e for e in worker.events if e["type"] == ev.STATUS and e["stage"] == "training")
    assert str(stop_step) in training_status["message"]
    resumed = {p["step"]: p["loss"] for p in worker.progress()}
    assert sorted(resumed) == list(range(stop_step + 1, TOTAL_STEPS + 1))
    for step, loss in resumed.items():
        assert loss == pytest.approx(uninterrupted[step], abs=1e-4), step
    # The stopped run's own steps matched the uninterrupted run as well.
    for p in first_part.progress():
        assert p["loss"] == pytest.approx(uninterrupted[p["step"]], abs=1e-4)
    assert validate_checkpoint(tmp_path / "resumed" / f"checkpoint-{TOTAL_STEPS}").step == TOTAL_STEPS


def test_cancel_saves_nothing_and_a_later_save_does_not_undo_it(demo_assets, tmp_path):
    out = tmp_path / "out"
    worker = SpawnedWorker(demo_config(demo_assets, out, **RUN))
    try:
        worker.wait_for(lambda e: _is_training_progress(e) and e["step"] >= 2)
        worker.stop(save=False)
        worker.stop(save=True)
        final = worker.finish()
    finally:
        worker.kill()
    assert final["type"] == ev.COMPLETE
    assert final["output_dir"] is None and final["status_message"] == "cancelled"
    assert worker.progress()[-1]["step"] < TOTAL_STEPS
    assert not (out / "adapter_model.safetensors").exists()
    assert not [p for p in out.iterdir() if "checkpoint" in p.name]


def test_stop_before_training_ends_without_training(demo_assets, tmp_path):
    worker = SpawnedWorker(demo_config(demo_assets, tmp_path / "out", **RUN))
    try:
        worker.stop(save=True)
        final = worker.finish()
    finally:
        worker.kill()
    assert final["type"] == ev.COMPLETE and final["output_dir"] is None
    assert final["status_message"].startswith("stopped before training started")
    assert not [e for e in worker.events if e["type"] == ev.PROGRESS]
    assert not any(e["type"] == ev.STATUS and e["stage"] == "training" for e in worker.events)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_worker_exits_when_its_parent_dies(demo_assets, tmp_path):
    context = mp.get_context("spawn")
    report = context.Queue()
    config = demo_config(demo_assets, tmp_path / "out", **{**RUN, "max_steps": 100_000})
    middleman = context.Process(target=run_worker_in_middleman, args=(config, report))
    middleman.start()
    worker_pid = None
    try:
        worker_pid = report.get(timeout=120)
        assert not _gone(worker_pid)
        os.kill(middleman.pid, signal.SIGKILL)
        middleman.join(timeout=10)
        deadline = time.monotonic() + 10
        while not _gone(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(worker_pid), "the orphaned worker kept running"
    finally:
        if worker_pid and not _gone(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)
        if middleman.is_alive():
            middleman.kill()


def test_a_payload_that_does_not_validate_is_reported_field_by_field(demo_assets, tmp_path):
    """The worker's last word must arrive even when its payload is not a valid run config
    (an unknown backend, an output folder name too long for the filesystem): the worker
    validates it once at its entry and ends with an `error` event naming each field."""
    config = demo_config(demo_assets, tmp_path / ("o" * 300), backend="no-such-backend")
    final, _ = run_to_end(config)
    assert final["type"] == ev.ERROR
    assert "backend: must be one of" in final["error"] and "output_dir: has a part of 300 bytes" in final["error"]
