"""What a backend gets from the worker entry: an event sender and the stop state.

Every backend is a module with `run(config: WorkerConfig, ctx: WorkerContext) -> None`. It
announces each stage with `ctx.stage(...)` (which ends the run early, by raising
`StopRequested`, when a stop arrived before training began), sends its events through
`ctx.emit`, watches `ctx.stop` at step boundaries, and ends by sending exactly one
`complete` (via `ctx.complete`) — or by raising, which the entry turns into an `error`.

The stop state is fed by a thread reading the parent's stop queue. A cancel, once
received, is never downgraded by a later stop-and-save. Torch-free.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from tunelab import events
from tunelab.checkpoints import InvalidCheckpoint, validate_checkpoint

STAGES = ("loading_model", "loading_dataset", "formatting", "configuring", "training", "saving", "exporting")
# Stages after training, which a stop does not prevent: the run has trained already.
AFTER_TRAINING = ("saving", "exporting")


class RunSettingError(ValueError):
    """A setting the data, model or machine cannot honour; the message names the field and fix."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class StopRequested(Exception):
    """The parent asked to stop before training began; the run ends without training."""

    def __init__(self, save: bool):
        self.save = save
        super().__init__("stop requested before training")


class WorkerContext:
    def __init__(self, event_queue: Any):
        self._queue = event_queue
        self._lock = threading.Lock()
        self._stop: str | None = None  # None | "save" | "cancel"
        self.finished = False  # set once a complete or error event has been sent
        self.current_stage: str | None = None
        self._stop_listeners: list[Any] = []
        self.stop_requested_at: float | None = None  # time.monotonic() of the first stop

    # --- events ------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        if event.get("type") in (events.COMPLETE, events.ERROR):
            self.finished = True
        self._queue.put(event)

    def stage(self, stage: str, message: str, **facts: float) -> None:
        """Announce a stage, unless a stop arrived: then end the run before it starts.
        `facts` ride along in the status event (e.g. the memory held as training begins)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        if stage not in AFTER_TRAINING and self.stop is not None:
            raise StopRequested(save=self.stop == "save")
        self.current_stage = stage
        self.emit(events.make(events.STATUS, message=message, stage=stage, **facts))

    def complete(self, output_dir: str | None, status_message: str, checkpoint: Path | None = None,
                 stopped: bool = False) -> None:
        """`checkpoint`: the checkpoint-N folder this run saved last, named in the event."""
        self.emit(events.complete(output_dir, status_message, checkpoint, stopped))

    def complete_stopped(self, output_dir: Any, step: int) -> None:
        """End a stop-and-save: `complete` naming checkpoint-<step> only when it validates;
        otherwise an error that blocks resume, since there is nothing trustworthy to resume from."""
        checkpoint = Path(output_dir) / f"checkpoint-{step}"
        try:
            validate_checkpoint(checkpoint)
        except InvalidCheckpoint as exc:
            self.emit(events.error(f"the stop was requested but the checkpoint did not land: {exc.reason}", resume_blocked=True))
            return
        self.complete(str(output_dir), f"stopped at step {step}; checkpoint saved", checkpoint, stopped=True)

    # --- stop state ----------------------------------------------------------------
    @property
    def stop(self) -> str | None:
        """None while training should go on, else "save" or "cancel"."""
        with self._lock:
            return self._stop

    def request_stop(self, save: bool) -> None:
        with self._lock:
            before = self._stop
            if self._stop != "cancel":  # a cancel is final
                self._stop = "save" if save else "cancel"
            after, listeners = self._stop, list(self._stop_listeners)
            if before is None and after is not None:
                self.stop_requested_at = time.monotonic()
        if after != before:
            for listener in listeners:
                listener(after)

    def on_stop(self, listener: Any) -> None:
        """Call `listener(stop)` whenever the stop state changes (the launcher of a
        distributed run passes each change on to the reporting rank)."""
        with self._lock:
            self._stop_listeners.append(listener)

    def read_stops(self, stop_queue: Any) -> threading.Thread:
        """Start the daemon thread that applies the parent's stop messages as they arrive."""

        def loop() -> None:
            while True:
                try:
                    message = stop_queue.get()
                except (EOFError, OSError, ValueError):
                    return  # the queue is gone: the parent watchdog takes it from here
                if isinstance(message, dict) and message.get("type") == "stop":
                    self.request_stop(bool(message.get("save")))
                else:
                    print(f"tunelab worker: ignoring unknown stop message {message!r}", file=sys.stderr)

        thread = threading.Thread(target=loop, name="tunelab-stop-reader", daemon=True)
        thread.start()
        return thread
