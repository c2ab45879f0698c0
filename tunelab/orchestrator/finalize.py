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
    step: int | None = None  # the step the worker saved, when it is newer than the last one reported


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


def _valid_checkpoint(folder: Path | None, step: int) -> bool:
    if folder is None:
        return False
    try:
        found = validate_checkpoint(folder)
    except InvalidCheckpoint as exc:
        log.warning("checkpoint check failed: %s", exc)
        return False
    return found.step == step


def _named_checkpoint(last: dict[str, Any], output_dir: str | None) -> tuple[Path | None, int | None]:
    """The checkpoint a `complete` names, if it lies directly in the run's folder."""
    step, folder = last.get("checkpoint_step"), last.get("checkpoint_dir")
    if last.get("type") != "complete" or step is None or not folder or not output_dir:
        return None, None
    if Path(folder).parent.resolve() != Path(output_dir).resolve():
        log.warning("the worker named %s, which is not in the run's folder %s", folder, output_dir)
        return None, step
    return Path(folder), step


def decide_outcome(facts: RunFacts) -> Outcome:
    last = facts.last_event or {}
    if facts.cancel_requested:
        # A cancel wins over everything: the user asked for nothing to be kept.
        return Outcome("stopped", "cancelled; nothing was kept", keep_output_dir=False)
    checkpoint, saved_step = _named_checkpoint(last, facts.output_dir)
    saved = checkpoint is not None and _valid_checkpoint(checkpoint, saved_step)
    # A parent-side failure after the worker's `complete` with a valid save (e.g. a shutdown
    # before finalize ran) changes nothing about what the worker finished.
    if facts.failure and not saved:
        return Outcome("error", facts.failure, error=facts.failure)
    if last.get("type") == "error":
        return Outcome("error", last["error"], error=last["error"], resume_blocked=bool(last.get("resume_blocked")))
    step = saved_step if saved_step is not None else facts.step
    finished_all_steps = facts.total_steps is not None and step is not None and step >= facts.total_steps
    # The worker may have stopped and saved on its own: a supervisor's SIGTERM reaches it too.
    stop_saved = facts.save_requested or bool(last.get("stopped"))
    if stop_saved and not (finished_all_steps and last.get("type") == "complete"):
        if step is None:
            return Outcome("stopped", "stopped before the first training step; there was nothing to save")
        if saved_step is None and facts.output_dir:
            # The worker named no checkpoint (it never answered): look for the last step reported.
            checkpoint = Path(facts.output_dir) / f"checkpoint-{step}"
            saved = _valid_checkpoint(checkpoint, step)
        if saved:
            return Outcome("stopped", f"stopped and saved a checkpoint of step {step}", step=step)
        message = f"stop-and-save did not land a valid checkpoint of step {step}"
        return Outcome("error", message, error=message, resume_blocked=True, step=step)
    if last.get("type") == "complete":
        return Outcome("completed", last.get("status_message") or "training completed", step=saved_step)
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
