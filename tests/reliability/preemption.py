"""Preemption: SIGTERM to `tunelab serve` or `tunelab train` in the middle of a real run,
as docker stop, systemd, Kubernetes and Slurm send it. Shared by the suite
(test_preemption.py) and bench/reliability.py, which measures the same at full size.

The run must stop at its next step, save a checkpoint of that step and be recorded
`stopped` before the process exits; resuming continues at the next step, so the stored
metrics of the two runs join without a gap or a duplicate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from harness import (is_final, is_step_at_least, run_row, start_run, wait_run_ended, wait_until,
                     watch_next_run)
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.store import Store

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]
# save_steps far beyond the steps reached: any checkpoint on disk is the one the stop wrote.
SAVE_STEPS = 1000


@dataclass
class Preempted:
    run_id: int
    step_at_signal: int  # the last step reported before the signal
    exit_code: int | None
    signal_to_stored_s: float | None  # signal -> the run's end written to the database
    signal_to_exit_s: float
    row: dict[str, Any]  # as stored (Store.get_run)
    stored_steps: list[int]
    checkpoint_step: int | None  # the latest valid checkpoint

    @property
    def steps_lost(self) -> int | None:
        """Steps reported (before the signal, or while stopping) that no checkpoint holds."""
        if self.checkpoint_step is None:
            return None
        return max(0, self.step_at_signal - self.checkpoint_step, (self.row["final_step"] or 0) - self.checkpoint_step)


def _outcome(home: Path, run_id: int, step: int, code: int | None, signalled: float, exited: float) -> Preempted:
    with Store(home / "tunelab.db") as store:
        row = store.get_run(run_id)
        steps = [m["step"] for m in store.get_metrics(run_id)]
    found = latest_valid_checkpoint(row["output_dir"]) if row["output_dir"] else None
    stored_s = row["ended_at"] - signalled if row["ended_at"] else None
    return Preempted(run_id, step, code, stored_s, exited - signalled, row, steps,
                     int(Path(found).name.split("-")[1]) if found else None)


def sigterm_server_mid_run(server: Any, make_body: Callable[..., dict[str, Any]], after_step: int = 5) -> Preempted:
    """Start a long real run on `server`, SIGTERM the server after `after_step` steps."""
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, make_body(max_steps=400, save_steps=SAVE_STEPS))
    assert stream.wait_for(is_step_at_least(after_step)), "the run never reached its first steps"
    step = stream.progress_steps()[-1]
    signalled = time.time()
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(timeout=120)
    exited = time.time()
    return _outcome(server.home, run_id, step, code, signalled, exited)


def resume_two_steps(server: Any, run_id: int) -> list[int]:
    """Resume `run_id` on a (restarted) server, let it train two steps, cancel it; the
    resumed run's stored steps."""
    client = server.client()
    stream = watch_next_run(server)
    answer = client.post(f"/api/runs/{run_id}/resume")
    assert answer.status_code == 200, answer.text
    resumed_id = answer.json()["job_id"]
    assert stream.wait_for(is_step_at_least(1)), "the resumed run reported no step"
    stream.wait_for(is_step_at_least(stream.progress_steps()[0] + 1))
    client.post("/api/train/stop", json={"save": False, "expected_job_id": resumed_id})
    stream.wait_for(is_final)
    wait_run_ended(client, resumed_id)
    return run_row(client, resumed_id)["metrics"]["steps"]


def write_train_config(path: Path, demo_assets: Any, **overrides: Any) -> Path:
    cfg = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
           "max_steps": 400, "max_seq_length": 128, "batch_size": 2, "gradient_accumulation_steps": 1,
           "learning_rate": 2e-3, "save_steps": SAVE_STEPS, **overrides}
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_train(home: Path, config: Path, **env: str) -> subprocess.Popen:
    """`tunelab train CONFIG` as a terminal would run it, output to home/train.log."""
    full_env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160", **env}
    return subprocess.Popen(TUNELAB + ["train", "--local", str(config)], env=full_env, stdout=(home / "train.log").open("w"),
                            stderr=subprocess.STDOUT, text=True)


def stored_step(home: Path) -> int:
    """The highest step stored for any run of this home (0 while there is none)."""
    try:
        with Store(home / "tunelab.db", retry_seconds=1) as store:
            runs = store.list_runs(limit=1)
            return max((m["step"] for m in store.get_metrics(runs[0]["id"])), default=0) if runs else 0
    except Exception:
        return 0


def wait_stored_step(home: Path, step: int, timeout: float = 120) -> int:
    reached = wait_until(lambda: stored_step(home) >= step, timeout=timeout, poll=0.1)
    assert reached, f"no step {step} stored within {timeout} s; train.log: {(home / 'train.log').read_text()[-2000:]}"
    return stored_step(home)


def sigterm_train(process: subprocess.Popen, home: Path) -> Preempted:
    """SIGTERM a running `tunelab train` (only the CLI process, as `kill PID` does)."""
    with Store(home / "tunelab.db") as store:
        run_id = store.list_runs(limit=1)[0]["id"]
    step = stored_step(home)  # a lower bound of the step reached: metrics lag the stream
    signalled = time.time()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)
    return _outcome(home, run_id, step, code, signalled, time.time())
