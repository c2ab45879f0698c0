"""Smaller fault scenarios on a live server, each returning what happened: shared by the
suite (which asserts) and bench/reliability.py (which reports). The bigger ones have
their own modules (kill_trials, server_kill, sse_load, fuzzing, path_attacks, secret_leaks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (all_gone, hold_database_lock, is_step_at_least, leftover_workers, process_tree, run_row,
                     start_run, wait_run_ended, wait_until, watch_next_run, worker_pid)


@dataclass
class Ending:
    """How one run ended, and whether it left anything behind."""

    row: dict[str, Any]
    streamed_steps: list[int]
    final_event: dict[str, Any] | None
    worker_gone: bool
    leftovers: list[int]
    seconds: float  # from the stop request (or the start) to the stored end
    status_answer: dict[str, Any]

    @property
    def unstored_streamed_steps(self) -> list[int]:
        return sorted(set(self.streamed_steps) - set(self.row["metrics"]["steps"]))


def run_to_end(server: Any, body: dict[str, Any], stop_at_step: int | None = None, save: bool = True) -> Ending:
    """Start `body`; optionally ask for a stop once step `stop_at_step` streamed; wait for
    the stored end, the worker's exit and the stream's last event."""
    client = server.client()
    stream = watch_next_run(server)
    job = start_run(client, body)
    pid = worker_pid(client)
    worker = process_tree(pid) if pid else []
    began = time.monotonic()
    if stop_at_step is not None:
        assert stream.wait_for(is_step_at_least(stop_at_step)), "the run never reached the step to stop at"
        began = time.monotonic()
        answer = client.post("/api/train/stop", json={"save": save, "expected_job_id": job})
        assert answer.status_code == 200, answer.text
    wait_run_ended(client, job)
    seconds = time.monotonic() - began
    stream.join()
    gone = bool(wait_until(lambda: all_gone(worker), timeout=30))
    final = stream.final()
    return Ending(run_row(client, job), stream.progress_steps(), final.data if final else None, gone,
                  [p.pid for p in leftover_workers(server.pid, {pid} if pid else set())], seconds,
                  client.get("/api/train/status").json())


# --- a locked database -------------------------------------------------------------------
@dataclass
class LockedRun:
    ending: Ending
    expected_steps: list[int]
    step_at_lock: int
    steps_applied_while_locked: int  # how far the live state moved while the lock was held
    status_answers_while_locked: int
    slowest_status_s: float
    finalize_wait_s: float  # from releasing the worker to the run's stored end
    slowest_status_at_finalize_s: float


def run_with_locked_database(server: Any, body: dict[str, Any], release_file: Path, lock_s: float) -> LockedRun:
    """The database locked by another process for `lock_s` once during training and again
    when the run finalizes. The server's worker must be `scripted_workers:trainer` with
    SCRIPTED_RELEASE_FILE=`release_file` (it waits for that file before `complete`)."""
    client = server.client()
    stream = watch_next_run(server)
    job = start_run(client, body)
    total = body["max_steps"]
    assert stream.wait_for(is_step_at_least(5))
    locker = hold_database_lock(server.home / "tunelab.db", lock_s)
    step_at_lock = client.get("/api/train/status").json()["step"]
    seen, slowest = [], 0.0
    while locker.poll() is None:
        began = time.monotonic()
        status = client.get("/api/train/status")
        slowest = max(slowest, time.monotonic() - began)
        assert status.status_code == 200, status.text
        if locker.poll() is None:  # answered while the lock was still held
            seen.append(status.json()["step"])
    assert locker.returncode == 0
    assert stream.wait_for(is_step_at_least(total))
    at_finalize = hold_database_lock(server.home / "tunelab.db", lock_s)
    released = time.monotonic()
    release_file.touch()
    slowest_at_finalize = 0.0
    while client.get(f"/api/runs/{job}").json()["status"] == "running":
        began = time.monotonic()
        client.get("/api/train/status")
        slowest_at_finalize = max(slowest_at_finalize, time.monotonic() - began)
    wait_run_ended(client, job)
    finalize_wait = time.monotonic() - released
    assert at_finalize.wait(60) == 0
    stream.join()
    final = stream.final()
    ending = Ending(run_row(client, job), stream.progress_steps(), final.data if final else None, True, [],
                    finalize_wait, client.get("/api/train/status").json())
    return LockedRun(ending, list(range(1, total + 1)), step_at_lock, max(seen, default=step_at_lock) - step_at_lock,
                     len(seen), slowest, finalize_wait, slowest_at_finalize)
