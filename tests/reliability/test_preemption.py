"""SIGTERM means stop-and-save, for `tunelab serve` and `tunelab train` alike; a run that
cannot save in time is recorded `error`, resumable from its last valid checkpoint; a second
signal cancels; metrics reach the database within the flush interval however slow the
steps are; and a server starting on the home of a live `tunelab train` leaves its run
alone. Real servers, real `tunelab train` processes, real workers (the demo Llama) or
scripted ones where a fault must be caused on purpose."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from harness import is_step_at_least, run_row, start_run, wait_until, watch_next_run, worker_env
from preemption import (TUNELAB, resume_two_steps, sigterm_server_mid_run, sigterm_train, start_train,
                        wait_stored_step, write_train_config)
from tunelab.checkpoints import latest_valid_checkpoint, validate_checkpoint
from tunelab.store import Store

pytestmark = pytest.mark.slow

NO_PREWARM = {"TUNELAB_PREWARM": "0"}  # a spare worker importing torch would only slow these down


def _stored(home: Path, run_id: int) -> tuple[dict, list[int]]:
    with Store(home / "tunelab.db") as store:
        return store.get_run(run_id), [m["step"] for m in store.get_metrics(run_id)]


def test_sigterm_to_tunelab_train_saves_and_a_server_on_its_home_leaves_the_run_alone(start_server, demo_run,
                                                                                       demo_assets, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    config = write_train_config(tmp_path / "run.yaml", demo_assets)
    train = start_train(home, config)
    try:
        wait_stored_step(home, 3)
        # A server starting on the same home closes orphaned runs; this one has a live owner.
        server = start_server(home=home, extra_env=NO_PREWARM)
        client = server.client()
        run_id = client.get("/api/runs").json()["runs"][0]["id"]
        assert run_row(client, run_id)["status"] == "running"

        # Nobody else may train on the same device meanwhile: not the server, not another CLI.
        answer = client.post("/api/train/start", json=demo_run(max_steps=4, queue=False))
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "device_busy"
        assert f"run {run_id} (process {train.pid}) is training on cpu" in answer.json()["error"]["message"]
        env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "200"}
        # --local: without it the CLI would hand the run to the server, which refuses it as above.
        second = subprocess.run(TUNELAB + ["train", "--local", str(config)], env=env, capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"run {run_id} (process {train.pid}) is training on cpu" in " ".join((second.stdout + second.stderr).split())
        assert len(client.get("/api/runs").json()["runs"]) == 1

        outcome = sigterm_train(train, home)
    finally:
        if train.poll() is None:
            train.kill()
    log = (home / "train.log").read_text()
    assert outcome.exit_code == 130, log
    row = outcome.row
    assert row["status"] == "stopped" and row["error_message"] is None, row
    # The run's own finalize landed: the checkpoint of the step it reached, every metric up to it.
    assert outcome.checkpoint_step == row["final_step"] and outcome.steps_lost == 0
    validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{row['final_step']}")
    assert outcome.stored_steps == list(range(1, row["final_step"] + 1))
    assert "SIGTERM" in log
    assert run_row(client, run_id)["can_resume"] is True


def test_sigterm_to_the_server_saves_and_resume_continues_without_a_gap(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    outcome = sigterm_server_mid_run(start_server(home=home, extra_env=NO_PREWARM), demo_run)
    assert outcome.exit_code == 0
    row = outcome.row
    assert row["status"] == "stopped" and row["error_message"] is None, row
    assert outcome.checkpoint_step == row["final_step"] >= outcome.step_at_signal and outcome.steps_lost == 0
    assert outcome.stored_steps == list(range(1, row["final_step"] + 1))

    restarted = start_server(home=home, extra_env=NO_PREWARM)
    detail = run_row(restarted.client(), outcome.run_id)
    assert detail["status"] == "stopped" and detail["can_resume"] is True
    resumed = resume_two_steps(restarted, outcome.run_id)
    assert resumed[0] == row["final_step"] + 1, "the resumed run must continue at the saved step + 1"
    assert resumed == list(range(resumed[0], resumed[-1] + 1)) and len(resumed) >= 2


def test_sigterm_while_the_model_loads_stops_with_nothing_half_written(start_server, demo_run, tmp_path):
    # No prewarmed worker: the run spends seconds importing and loading, so the signal lands there.
    server = start_server(extra_env={**NO_PREWARM, "TUNELAB_SHUTDOWN_GRACE_S": "90"})
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, demo_run(max_steps=400))
    assert client.get("/api/train/status").json()["phase"] == "loading_model"
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=120) == 0
    final = stream.final()
    assert final is not None and final.data["status"] == "stopped"
    assert "nothing to save" in final.data["status_message"]
    row, steps = _stored(server.home, run_id)
    assert (row["status"], row["error_message"], row["final_step"], steps) == ("stopped", None, None, [])
    if row["output_dir"]:
        folder = Path(row["output_dir"])
        assert not folder.exists() or not any(folder.iterdir()), list(folder.iterdir())


def test_sighup_to_the_server_also_stops_and_saves(start_server, demo_run, tmp_path):
    # A closed terminal or a dropped SSH session: uvicorn alone would not even catch it.
    server = start_server(extra_env=worker_env("scripted_workers:trainer", SCRIPTED_STEP_SECONDS="0.1"))
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, demo_run(max_steps=5000))
    assert stream.wait_for(is_step_at_least(3))
    server.process.send_signal(signal.SIGHUP)
    assert server.process.wait(timeout=60) == 0
    row, steps = _stored(server.home, run_id)
    assert row["status"] == "stopped" and row["error_message"] is None, row
    validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{row['final_step']}")
    assert steps == list(range(1, row["final_step"] + 1))


def test_a_run_that_cannot_save_within_the_grace_ends_error_and_resumable(start_server, demo_run, tmp_path):
    env = worker_env("fault_workers:checkpoints_then_hangs_while_saving", SCRIPTED_STEP_SECONDS="0.05",
                     TUNELAB_SHUTDOWN_GRACE_S="4")
    home = tmp_path / "home"
    server = start_server(home=home, extra_env=env)
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, demo_run(max_steps=5000, save_steps=2))
    assert stream.wait_for(is_step_at_least(5))
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    # While it waits for the save, the server says so: a load balancer stops sending work.
    health = wait_until(lambda: _health_if_shutting_down(server.base_url), timeout=10, poll=0.05)
    assert health is not None and health.status_code == 503 and health.json()["status"] == "shutting_down"
    refused = client.post("/api/train/start", json=demo_run())
    assert refused.status_code == 409 and "shutting down" in refused.json()["error"]["message"]
    assert server.process.wait(timeout=60) == 0
    assert time.monotonic() - signalled < 4 + 10  # the grace, and a little for the process to end

    row, _ = _stored(home, run_id)
    assert row["status"] == "error" and "could not save within 3 s" in row["error_message"], row
    assert row["resume_blocked"] is False
    checkpoint = latest_valid_checkpoint(row["output_dir"])
    assert checkpoint is not None
    restarted = start_server(home=home, extra_env=env)
    assert run_row(restarted.client(), run_id)["can_resume"] is True


def _health_if_shutting_down(base_url: str) -> httpx.Response | None:
    try:
        answer = httpx.get(base_url + "/api/health", timeout=2)
    except httpx.TransportError:
        return None
    return answer if answer.status_code != 200 else None


def test_a_second_sigterm_cancels(start_server, demo_run, tmp_path):
    server = start_server(extra_env=worker_env("scripted_workers:trainer", SCRIPTED_STEP_SECONDS="1.5"))
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, demo_run(max_steps=100, save_steps=2))
    # Right after a step: both signals land inside the next 1.5 s step, before it could save.
    assert stream.wait_for(is_step_at_least(3))
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    row, _ = _stored(server.home, run_id)
    assert (row["status"], row["cancel_requested"], row["output_dir"]) == ("stopped", True, None), row


def test_slow_steps_reach_the_database_before_a_sigkill(start_server, demo_run, tmp_path):
    # Steps slower than the 2 s flush interval: without a time rule, ten of them (25 s)
    # would live only in the server's memory.
    server = start_server(extra_env=worker_env("scripted_workers:trainer", SCRIPTED_STEP_SECONDS="2.5"))
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, demo_run(max_steps=100))
    assert stream.wait_for(is_step_at_least(4), timeout=60)
    killed_at = time.time()
    server.process.kill()
    server.process.wait()
    _, stored = _stored(server.home, run_id)
    arrivals = [(at, event.data["step"]) for at, event in stream.events if event.event == "progress"]
    # Older than the interval plus a second for the write itself: these must be stored.
    old = [step for at, step in arrivals if killed_at - at > 2.0 + 1.0]
    assert old, arrivals
    assert set(old) <= set(stored), f"steps {sorted(set(old) - set(stored))} were lost; stored {stored}"
