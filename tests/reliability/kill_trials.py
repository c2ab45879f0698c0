"""Killing the real worker (SIGKILL) at a random moment of a chosen stage, through a live
server, and checking what is left: shared by the suite (a few trials) and
bench/reliability.py (many).

With a prewarmed worker the tiny demo model spends only tens of milliseconds in each
stage before training, so a kill is aimed from the stream: at the stage's `status`
event (or the moment a `checkpoint-N` folder appears), a few random milliseconds later.
Where it really landed is read afterwards from the worker's own timestamps: the last
status event and step it sent before the kill (a kill that leaves a half-written
checkpoint behind landed in that save).
  loading_model    the `loading_model` status, then 0-20 ms
  loading_dataset  the `loading_dataset` or `formatting` status, then 0-10 ms
  training         a progress event of a random step 1-5, then 0-10 ms
  checkpoint_save  the moment a `checkpoint-N` folder appears (save_steps=2), then 0-5 ms
  final_save       the `saving` status (the final model being written), then 0-3 ms
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

from harness import (StreamRecorder, all_gone, is_alive, is_stage, is_step_at_least, leftover_workers, process_tree,
                     run_row, start_run, wait_run_ended, wait_until, watch_next_run, worker_pid)
from tunelab.checkpoints import InvalidCheckpoint, latest_valid_checkpoint, validate_checkpoint

STAGES = ("loading_model", "loading_dataset", "training", "checkpoint_save", "final_save")
SAVE_STEPS = 2


@dataclass
class KillTrial:
    stage: str  # the stage aimed at
    run_id: int
    moment: str  # the aim, in words
    landed: str  # the stage the worker was in at the kill, by its own timestamps
    status: str
    error_message: str | None
    kill_to_end_s: float
    streamed_steps: list[int]
    stored_steps: list[int]
    leftovers: list[int] = field(default_factory=list)
    can_resume: bool = False
    has_valid_checkpoint: bool = False
    partial_checkpoint_left: bool = False

    @property
    def unstored_streamed_steps(self) -> list[int]:
        return sorted(set(self.streamed_steps) - set(self.stored_steps))


def trial_body(stage: str, make_body: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    # A run that ends on its own soon after the stage in question, so every stage is reached.
    steps = 6 if stage == "final_save" else 40
    return make_body(max_steps=steps, save_steps=SAVE_STEPS)


def _reach_moment(stage: str, stream: StreamRecorder, client: httpx.Client, rng: random.Random) -> str | None:
    """Wait until a random moment inside `stage`; describe the aim (None: the run never got there)."""
    if stage == "checkpoint_save":
        target = SAVE_STEPS * rng.randint(1, 3)
        folder = Path(client.get("/api/train/status").json()["output_dir"]) / f"checkpoint-{target}"
        if not wait_until(folder.exists, timeout=120, poll=0.001):
            return None
        return _after(rng.uniform(0, 0.005), f"checkpoint-{target}/ appeared")
    if stage == "training":
        step = rng.randint(1, 5)
        return _after(rng.uniform(0, 0.01), f"step {step}") if stream.wait_for(is_step_at_least(step)) else None
    aims = {"loading_model": (("loading_model",), 0.02), "loading_dataset": (("loading_dataset", "formatting"), 0.01),
            "final_save": (("saving",), 0.003)}  # the tiny model's final save takes a few ms
    stages, longest = aims[stage]
    event = stream.wait_for(is_stage(*stages))
    return _after(rng.uniform(0, longest), f"the {event.data['stage']} status") if event else None


def _after(delay: float, what: str) -> str:
    time.sleep(delay)
    return f"{delay * 1000:.0f} ms after {what}"


def landed_in(stream: StreamRecorder, killed_ts: float, partial_checkpoint: bool) -> str:
    """The stage the worker was in when it was killed, by its own clock."""
    sent = [event.data for _, event in stream.events if event.data and event.data.get("ts", killed_ts) < killed_ts]
    stages = [data["stage"] for data in sent if data.get("stage")]
    stage = stages[-1] if stages else "starting"
    if stage == "training" and partial_checkpoint:
        return "checkpoint save"
    return {"loading_dataset": "loading data", "formatting": "loading data", "saving": "final save",
            "loading_model": "loading model"}.get(stage, stage)


def run_kill_trial(server: Any, make_body: Callable[..., dict[str, Any]], stage: str, rng: random.Random) -> KillTrial:
    """One run on `server` (real worker), its worker killed with SIGKILL aiming at `stage`."""
    client = server.client()
    stream = watch_next_run(server)
    run_id = start_run(client, trial_body(stage, make_body))
    pid = worker_pid(client)
    moment = _reach_moment(stage, stream, client, rng)
    assert moment is not None, f"run {run_id} ended before reaching {stage}"
    worker = process_tree(pid)
    assert worker, f"the worker {pid} was gone before the kill ({stage})"
    killed_ts = time.time()
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_run_ended(client, run_id)
    ended_at = time.monotonic()
    stream.join()
    wait_until(lambda: all_gone(worker), timeout=10)
    row = run_row(client, run_id)
    output_dir = row["output_dir"]
    partial = _has_partial_checkpoint(output_dir)
    return KillTrial(
        stage=stage, run_id=run_id, moment=moment, status=row["status"],
        landed="after it sent complete" if row["status"] == "completed" else landed_in(stream, killed_ts, partial),
        error_message=row["error_message"], kill_to_end_s=ended_at - killed_at, streamed_steps=stream.progress_steps(),
        stored_steps=row["metrics"]["steps"],
        leftovers=[p.pid for p in worker if is_alive(p)] + [p.pid for p in leftover_workers(server.pid, {pid})],
        can_resume=row["can_resume"],
        has_valid_checkpoint=bool(output_dir) and latest_valid_checkpoint(output_dir) is not None,
        partial_checkpoint_left=partial,
    )


def _has_partial_checkpoint(output_dir: str | None) -> bool:
    if not output_dir or not Path(output_dir).is_dir():
        return False
    for folder in Path(output_dir).glob("checkpoint-*"):
        try:
            validate_checkpoint(folder)
        except InvalidCheckpoint:
            return True
    return False
