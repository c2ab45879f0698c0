"""What every engine of a distributed run shares (`launcher`'s torchrun, `ray/engine`'s Ray
Train): `ProcessEngine`, the one process of ours the ranks hang off, and `Launch`, one
engine's ranks and what their reporting rank has said over the event channel."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tunelab import events
from tunelab.channel import ChannelListener
from tunelab.pdeathsig import die_with_parent
from tunelab.worker.context import WorkerContext

LOG_TAIL_LINES = 15


class ProcessEngine:
    """An engine whose ranks hang off one process of ours (torchrun, or the Ray driver),
    started in its own session and killed with this worker. Subclasses say how to start
    it (`start`) and which rank failed first (`first_failure`)."""

    what = "the engine"

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.log_start = 0  # where this launch's part of the log begins

    def popen(self, argv: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen:
        with open(self.log_path, "ab") as log:
            # A resumed run appends to its parent's log; only what this launch writes is read.
            self.log_start = log.tell()
            self.process = subprocess.Popen(argv, env=env, stderr=log, stdout=kwargs.pop("stdout", log),
                                            start_new_session=True, preexec_fn=die_with_parent, **kwargs)
        return self.process

    def poll(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def end(self) -> None:
        """Ask it to end (torchrun passes SIGTERM on to every rank and waits for them)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass

    def first_failure(self) -> tuple[int, str] | None:
        """(rank, why) of the rank that failed first, when the engine says."""
        return None

    def start_failure(self) -> str | None:
        """Why the ranks never started (e.g. a node that never joined), when the engine says."""
        return None

    def log_tail(self) -> str:
        return "\n".join(self.own_log().splitlines()[-LOG_TAIL_LINES:])

    def own_log(self) -> str:
        """What this launch wrote to the log."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_start)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        self.kill()


class Launch:
    """One engine's ranks and what their reporting rank has said."""

    def __init__(self, ctx: WorkerContext, engine: Any):
        self.ctx = ctx
        self.engine = engine
        self.listener: ChannelListener | None = None
        self.final: dict[str, Any] | None = None  # the reporting rank's complete or error
        self.final_at: float | None = None
        self.reporter_gone = threading.Event()
        self.cancelled_at: float | None = None
        self.ended_because: str | None = None

    def open_channel(self, host: str) -> dict[str, str]:
        """Listen on `host` (an address of this machine the ranks can reach); returns the
        ranks' environment that finds and authenticates to it."""
        self.listener = ChannelListener(host)
        self.listener.serve(self.on_message, self.reporter_gone.set)
        return self.listener.environment()

    def on_message(self, message: dict[str, Any]) -> None:
        if message.get("type") == events.STATUS and message.get("stage"):
            # What a SIGTERM to this process means follows the ranks' stage (entry.py).
            self.ctx.current_stage = str(message["stage"])
        if message.get("type") in (events.COMPLETE, events.ERROR):
            if self.final is None:
                self.final, self.final_at = message, time.monotonic()
            return
        self.ctx.emit(message)

    def on_stop(self, stop: str | None) -> None:
        if stop is None:
            return
        listener = self.listener
        if listener is None or not listener.connected.is_set():
            # No rank is training yet (still importing, waiting for nodes or for the
            # cluster): nothing to save; end the launch, as a one-process run ends before training.
            self.end("stop before the ranks started training")
            return
        listener.send(events.stop_message(stop == "save"))
        if stop == "cancel":
            self.cancelled_at = time.monotonic()

    def end(self, why: str) -> None:
        self.ended_because = why
        self.engine.end()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        self.engine.cleanup()
