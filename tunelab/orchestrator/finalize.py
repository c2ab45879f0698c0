"""Ending a run exactly once: deciding its outcome and writing it to the store.

`decide_outcome` turns what the parent knows (the worker's last event, stop requests,
the last step, checkpoints on disk, the exit code) into the stored status. `FinalizeOnce`
makes sure only the first of the pump, the watchdog or a failed start gets to write it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tunelab.checkpoints import InvalidCheckpoint, validate_checkpoint

log = logging.getLogger("tunelab.orchestrator")

WRITE_ATTEMPTS = 4
WRITE_RETRY_DELAY_S = 0.5


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | stopped | error
    message: str
    error: str | None = None
    resume_blocked: bool = False
    keep_output_dir: bool = True


@dataclass(frozen=True)
class RunFacts:
    """What the parent knows about a run at its end."""

    last_event: dict[str, Any] | None  # the worker's `complete` or `error`, if any
    cancel_requested: bool
    save_requested: bool
    step: int | None
    total_steps: int | None
    output_dir: str | None
    exitcode: int | None
    failure: str | None = None  # a failure the parent itself saw (spawn, stalls, shutdown)


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"exit code {exitcode}, {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    return f"exit code {exitcode}"


def _checkpoint_of_step_is_valid(output_dir: str | None, step: int) -> bool:
    if not output_dir:
        return False
    try:
        validate_checkpoint(Path(output_dir) / f"checkpoint-{step}")
    except InvalidCheckpoint as exc:
        log.warning("stop-and-save check failed: %s", exc)
        return False
    return True


def decide_outcome(facts: RunFacts) -> Outcome:
    last = facts.last_event or {}
    if facts.cancel_requested:
        # A cancel wins over everything: the user asked for nothing to be kept.
        return Outcome("stopped", "cancelled; nothing was kept", keep_output_dir=False)
    if facts.failure:
        return Outcome("error", facts.failure, error=facts.failure)
    if last.get("type") == "error":
        return Outcome("error", last["error"], error=last["error"], resume_blocked=bool(last.get("resume_blocked")))
    finished_all_steps = facts.total_steps is not None and facts.step is not None and facts.step >= facts.total_steps
    if facts.save_requested and not (finished_all_steps and last.get("type") == "complete"):
        if facts.step is None:
            return Outcome("stopped", "stopped before the first training step; there was nothing to save")
        if _checkpoint_of_step_is_valid(facts.output_dir, facts.step):
            return Outcome("stopped", f"stopped and saved a checkpoint of step {facts.step}")
        message = f"stop-and-save did not land a valid checkpoint of step {facts.step}"
        return Outcome("error", message, error=message, resume_blocked=True)
    if last.get("type") == "complete":
        return Outcome("completed", last.get("status_message") or "training completed")
    message = f"worker exited unexpectedly ({describe_exit(facts.exitcode)})"
    return Outcome("error", message, error=message)


def with_retries(action: Callable[[], Any], what: str, attempts: int = WRITE_ATTEMPTS) -> Any:
    """Run a database write, retrying a few times; the last failure propagates."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as exc:
            if attempt == attempts:
                raise
            log.warning("%s failed (attempt %d of %d): %s; retrying", what, attempt, attempts, exc)
            time.sleep(WRITE_RETRY_DELAY_S * attempt)


class FinalizeOnce:
    """A lock and a flag: the first caller runs the finalizer, every later one returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = threading.Event()

    def run(self, finalizer: Callable[[], None]) -> bool:
        with self._lock:
            if self.done.is_set():
                return False
            try:
                finalizer()
            finally:
                # Even a finalizer that failed halfway ends the run: nothing may stay "active".
                self.done.set()
        return True
