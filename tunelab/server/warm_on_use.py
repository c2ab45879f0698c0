"""The warm children follow the people using the server, so an unused server holds only itself.

`tunelab serve` keeps two children with their heavy imports done so that a person's next
action does not wait for them: the training worker for the next run (the orchestrator's
prewarm, ~500 MB: torch, transformers, peft, trl, datasets) and the dataset-preview spare
(preview_spare.py). Both are worth their memory only while someone is at work:

- The warm training worker starts when a client with a key reads the lab (any GET under
  /api or /v1: the page polls the run status and the queue every few seconds while it is
  open, the CLI lists runs). A POST does not start it: a start request that races the
  warm child's spawn would have two processes importing torch on the cores the run needs
  (the run then starts cold, as with TUNELAB_PREWARM=0, and its end starts the warm child
  for the next one, as always).
- Both children are ended once nobody has made a request for TUNELAB_WARM_IDLE_S seconds
  (default 600) and no run is training. The next GET starts the training worker again,
  the next listing of the data files the preview spare.

A request from outside the token gate (/api/health, a refused key) counts for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from fastapi import Request

from tunelab.server.roles import NOBODY, caller_of

log = logging.getLogger("tunelab.server")

IDLE_ENV = "TUNELAB_WARM_IDLE_S"
DEFAULT_IDLE_S = 600.0
LONGEST_CHECK_S = 30.0


def idle_seconds() -> float:
    """TUNELAB_WARM_IDLE_S when it is a positive number of seconds, else the default (with a warning)."""
    raw = (os.environ.get(IDLE_ENV) or "").strip()
    if not raw:
        return DEFAULT_IDLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value > 0:
        return value
    log.warning("%s=%r is not a positive number of seconds; the warm children are ended after %g s without use",
                IDLE_ENV, raw, DEFAULT_IDLE_S)
    return DEFAULT_IDLE_S


class WarmOnUse:
    """Starts the warm training worker on use and ends the warm children when unused."""

    def __init__(self, orchestrator: Any | None, spare: Any, idle_s: float):
        self.orchestrator, self.spare, self.idle_s = orchestrator, spare, idle_s
        self.last_used = time.monotonic()

    def used(self, method: str) -> None:
        """A client with a key made a request (`method`)."""
        self.last_used = time.monotonic()
        if method in ("GET", "HEAD") and self.orchestrator is not None:
            status = self.orchestrator.prewarm_status()
            if status["enabled"] and status["pid"] is None:
                self.orchestrator.start_prewarm()  # returns at once; not while a run trains

    async def watch(self) -> None:
        """Runs for the server's life: ends the warm children after `idle_s` without use."""
        check_every = min(LONGEST_CHECK_S, self.idle_s / 3)
        while True:
            await asyncio.sleep(check_every)
            await self.end_if_unused()

    async def end_if_unused(self) -> None:
        if self.orchestrator is not None and self.orchestrator.is_training_active():
            self.last_used = time.monotonic()  # the idle time counts from the run's end
            return
        if time.monotonic() - self.last_used < self.idle_s:
            return
        ended = []
        if self.orchestrator is not None and self.orchestrator.prewarm_status()["pid"] is not None:
            await asyncio.to_thread(self.orchestrator.retire_prewarm)
            ended.append("the warm training worker")
        if self.spare.pid is not None:
            await self.spare.close()
            ended.append("the dataset-preview spare")
        if ended:
            log.info("nobody has used the server for %g s: %s ended; the next request starts them again",
                     self.idle_s, " and ".join(ended))


async def note_use(request: Request) -> None:
    """The app-wide dependency (after the role check): a request with a key keeps the warm
    children. Async, so that it costs no thread hop: `used` only reads a status and at most
    starts a thread."""
    watcher: WarmOnUse | None = getattr(request.app.state, "warm_on_use", None)
    if watcher is None or caller_of(request) is NOBODY or request.scope.get("path") == "/api/health":
        return
    watcher.used(request.method)
