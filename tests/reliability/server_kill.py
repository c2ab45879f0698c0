"""Killing the server (SIGKILL) in the middle of a real run, then starting it again on the
same home: shared by the suite and bench/reliability.py.

The worker must notice its parent is gone and exit by itself (it polls its parent id),
taking every process of the old server with it; the restarted server closes the
orphaned run as `error`, resumable from the last valid checkpoint the worker wrote
(save_steps=2), and resuming continues the step count from that checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness import (all_gone, is_step_at_least, is_final, process_tree, run_row, start_run, wait_run_ended,
                     wait_until, watch_next_run, worker_pid)
from tunelab.checkpoints import latest_valid_checkpoint

SAVE_STEPS = 2


@dataclass
class ServerKill:
    run_id: int
    killed_at_step: int
    worker_exit_s: float | None  # server kill -> worker gone
    all_exit_s: float | None  # server kill -> every process of the old server gone
    row_after_restart: dict[str, Any]
    resume_checkpoint_step: int | None
    resumed_run_id: int | None
    resumed_first_step: int | None
    resumed_steps: list[int]


def kill_server_mid_run(start_server: Callable[..., Any], home: Path, make_body: Callable[..., dict[str, Any]],
                        kill_after_step: int = 5) -> ServerKill:
    server = start_server(home=home)
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, make_body(max_steps=400, save_steps=SAVE_STEPS))
    assert stream.wait_for(is_step_at_least(kill_after_step)), "the run never reached its first steps"
    killed_at_step = client.get("/api/train/status").json()["step"]
    worker = process_tree(worker_pid(client))
    everything = process_tree(server.pid)[1:]  # the worker, any prewarmed spare, the resource tracker
    assert worker, "the worker was not running"
    server.process.kill()
    killed_at = time.monotonic()
    server.process.wait()
    worker_exit = _seconds_until(lambda: all_gone(worker), killed_at)
    all_exit = _seconds_until(lambda: all_gone(everything), killed_at)

    restarted = start_server(home=home)
    client = restarted.client()
    row = run_row(client, run_id)
    checkpoint = latest_valid_checkpoint(row["output_dir"]) if row["output_dir"] else None
    checkpoint_step = int(Path(checkpoint).name.split("-")[1]) if checkpoint else None
    resumed_id = first_step = None
    resumed_steps: list[int] = []
    if row["can_resume"]:
        stream = watch_next_run(restarted)
        answer = client.post(f"/api/runs/{run_id}/resume")
        assert answer.status_code == 200, answer.text
        resumed_id = answer.json()["job_id"]
        assert stream.wait_for(is_step_at_least(1)), "the resumed run reported no step"
        first_step = stream.progress_steps()[0]
        # Two steps are proof enough; cancel rather than train the other ~390.
        stream.wait_for(is_step_at_least(first_step + 1))
        client.post("/api/train/stop", json={"save": False, "expected_job_id": resumed_id})
        stream.wait_for(is_final)
        wait_run_ended(client, resumed_id)
        resumed_steps = run_row(client, resumed_id)["metrics"]["steps"]
    return ServerKill(run_id, killed_at_step, worker_exit, all_exit, row, checkpoint_step, resumed_id, first_step,
                      resumed_steps)


def _seconds_until(condition: Callable[[], bool], since: float, timeout: float = 60) -> float | None:
    return time.monotonic() - since if wait_until(condition, timeout=timeout, poll=0.02) else None
