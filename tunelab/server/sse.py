"""Live progress as Server-Sent Events, pushed by the orchestrator's event pump.

Each client gets its own bounded queue, fed from the pump thread through
`loop.call_soon_threadsafe` the moment an event arrives, so nothing polls. The stream:
  retry: <ms>                       first, so browsers reconnect quickly
  event: progress, id: <run>:<step> one per training step
  event: status                     stage changes ("loading model", ...)
  event: heartbeat                  after `heartbeat_seconds` with nothing new
  event: complete | error           the run's end, after which the stream closes
A client that reconnects with `Last-Event-ID: R:N` (or `?last_event_id=R:N`) first gets
every stored step of run R after N; when the stream now follows another run, it gets
that run from its first step (the id it holds says nothing about the new run). A bare
`N`, as clients before the run-qualified ids sent, means "the current run, after step
N". To leave no gap and send no step twice at the seam, the
stream subscribes *before* it reads the replay, then drops live steps it already sent.
A client too slow to keep up is dropped, not buffered without end: it reconnects with
its last id and the replay fills the hole. Events that are already waiting go out in one
write (up to BATCH_EVENTS): under a flood of fast steps one write per event, each through
the middleware and a send timeout, cost more server time than the rest of the event path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

log = logging.getLogger("tunelab.server")

RETRY_MS = 2000
QUEUE_LIMIT = 4096
# A send blocked this long means the client stopped reading; close its stream.
SEND_TIMEOUT_S = 30.0
FINAL_PHASES = frozenset({"completed", "stopped", "error", "cancelled"})  # cancelled: withdrawn while queued
FORWARDED_TYPES = frozenset({"progress", "status", "stall", "complete", "error"})
# Events held for one write at most; a flood is sent in writes of this many.
BATCH_EVENTS = 256
# Yielded by the stream when it is about to wait (or its client must hear now): send what is held.
_FLUSH = object()


def _encode(data: dict[str, Any]) -> str:
    # A worker's stack trace stays in the server log; clients get the message only.
    public = {k: v for k, v in data.items() if k != "stack"}
    return json.dumps(public, default=str, separators=(",", ":"))


@dataclass(frozen=True)
class ResumePoint:
    """The last event a reconnecting client holds: `run_id` None for a bare step number."""
    run_id: int | None
    step: int


def parse_event_id(text: str) -> ResumePoint:
    """`<run_id>:<step>` or a bare `<step>`; ValueError for anything else."""
    run_part, colon, step_part = text.strip().partition(":")
    if not colon:
        run_part, step_part = "", run_part
    if not step_part.isdigit() or (colon and not run_part.isdigit()):
        raise ValueError(text)
    return ResumePoint(int(run_part) if colon else None, int(step_part))


def requested_resume(header: str | None, query: str | None, expected: str) -> ResumePoint | None:
    """The resume point a progress stream's client asks for: the `Last-Event-ID` header, else
    the `last_event_id` query; None for neither. A malformed one is a 422 naming the field it
    came in and saying it must be `expected` (e.g. "an event id `<run_id>:<step>`, e.g. 7:40")."""
    from tunelab.server.errors import ApiError

    # The header wins: it is what EventSource sends on its own reconnects.
    field, given = ("Last-Event-ID", header) if header is not None else ("last_event_id", query)
    if given is None:
        return None
    try:
        return parse_event_id(given)
    except ValueError:
        raise ApiError(422, "invalid_input", f"{field} must be {expected}", field=field) from None


def event_id(event: dict[str, Any]) -> str:
    return f"{event['run_id']}:{event['step']}"


def progress_event(event: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(_encode(event), event="progress", id=event_id(event))


def final_event(event: dict[str, Any]) -> ServerSentEvent:
    # No id: the browser keeps its last step's id as its Last-Event-ID.
    return ServerSentEvent(_encode(event), event=event["type"])


def final_from_snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The end-of-run event for a client that connects after the run ended, in the shape
    of the orchestrator's own terminal event."""
    return {
        "type": "error" if snapshot.get("phase") == "error" else "complete",
        "ts": time.time(),
        "run_id": snapshot.get("run_id"),
        "final": True,
        "status": snapshot.get("status") or snapshot.get("phase"),
        "status_message": snapshot.get("message"),
        "error": snapshot.get("error"),
        "resume_blocked": snapshot.get("resume_blocked"),
        "output_dir": snapshot.get("output_dir"),
        "final_step": snapshot.get("step"),
        "final_loss": snapshot.get("final_loss"),
        "total_steps": snapshot.get("total_steps"),
    }


class ProgressStream:
    """One client's stream: subscribe, replay what it missed, then follow live events
    of one run (the current one, or the next to start when idle) until it ends."""

    def __init__(self, orchestrator: Any, resume_from: ResumePoint | None, heartbeat_seconds: float,
                 queue_limit: int = QUEUE_LIMIT):
        self.orchestrator = orchestrator
        self.resume_from = resume_from
        self.heartbeat_seconds = heartbeat_seconds
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=queue_limit)
        self.overflowed = False

    def response(self) -> EventSourceResponse:
        # ping=0: heartbeats are real events sent only when idle, not sse-starlette comments.
        return EventSourceResponse(self._writes(), ping=0, send_timeout=SEND_TIMEOUT_S,
                                   headers={"X-Accel-Buffering": "no"})

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The stream one event at a time."""
        async with aclosing(self._stream()) as stream:
            async for item in stream:
                if item is not _FLUSH:
                    yield item

    async def _writes(self) -> AsyncIterator[bytes]:
        """The stream as the response writes it: every event that is ready, encoded into one
        chunk, sent when the stream is about to wait or BATCH_EVENTS are held."""
        held: list[bytes] = []
        async with aclosing(self._stream()) as stream:
            async for item in stream:
                if item is not _FLUSH:
                    held.append(item.encode())
                    if len(held) < BATCH_EVENTS:
                        continue
                if held:
                    yield b"".join(held)
                    held = []
        if held:
            yield b"".join(held)

    def _offer(self, event: dict[str, Any]) -> None:
        """Runs on the event loop; never blocks the pump."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True

    async def _stream(self) -> AsyncIterator[Any]:
        """ServerSentEvents, with _FLUSH wherever what came before must reach the client now."""
        loop = asyncio.get_running_loop()
        # Events cross from the pump thread through this deque; the loop is woken (a write
        # to its self-pipe) only when no hand-over is already on its way, not once per event.
        arrived: deque[dict[str, Any]] = deque()
        hand_over_due = False

        def hand_over() -> None:  # on the event loop
            nonlocal hand_over_due
            hand_over_due = False  # first: an event appended from here on schedules another
            while arrived:
                self._offer(arrived.popleft())

        def deliver(event: dict[str, Any]) -> None:  # called on the pump thread
            nonlocal hand_over_due
            if event.get("type") in FORWARDED_TYPES:
                arrived.append(event)
                if not hand_over_due:
                    hand_over_due = True
                    try:
                        loop.call_soon_threadsafe(hand_over)
                    except RuntimeError:
                        pass  # the loop is closing: the server is shutting down

        unsubscribe = self.orchestrator.subscribe(deliver)
        try:
            yield ServerSentEvent(retry=RETRY_MS)
            yield _FLUSH  # the client may wait for this line to know it is subscribed
            async for sse in self._replay_then_live():
                yield sse
        finally:
            unsubscribe()

    async def _replay_then_live(self) -> AsyncIterator[ServerSentEvent]:
        snapshot = await asyncio.to_thread(self.orchestrator.snapshot)
        run_id = snapshot.get("run_id")
        # Replayed events may still arrive live (they were queued before the replay was
        # read); they are recognised by step and timestamp, since one step can carry two
        # distinct events (training numbers, then eval numbers).
        replayed: set[tuple[int, Any]] = set()
        if self.resume_from is not None and run_id is not None:
            same_run = self.resume_from.run_id in (None, run_id)
            after = self.resume_from.step if same_run else 0
            for event in await asyncio.to_thread(self.orchestrator.progress_since, after):
                if event.get("run_id") != run_id:
                    continue  # a newer run began between the snapshot and this read
                replayed.add((event["step"], event.get("ts")))
                yield progress_event(event)
        if run_id is not None and snapshot.get("phase") in FINAL_PHASES:
            yield final_event(final_from_snapshot(snapshot))
            return
        while not self.overflowed:
            if self.queue.empty():
                yield _FLUSH  # nothing more is ready: send what is held before waiting
            event = await self._next_event()
            if event is None:
                yield ServerSentEvent(_encode({"ts": time.time()}), event="heartbeat")
                continue
            if run_id is None:
                run_id = event.get("run_id")  # idle at connect: follow the run that starts
            elif event.get("run_id") != run_id:
                continue
            kind = event["type"]
            if kind == "progress":
                if (event["step"], event.get("ts")) not in replayed:
                    yield progress_event(event)
            elif event.get("final"):
                yield final_event(event)
                return
            elif kind in ("status", "stall"):
                yield ServerSentEvent(_encode(event), event=kind)
        log.warning("progress stream dropped a client that fell %d events behind; it can reconnect with Last-Event-ID",
                    self.queue.maxsize)

    async def _next_event(self) -> dict[str, Any] | None:
        """The next queued event, or None after `heartbeat_seconds` without one. A queued
        event is taken directly: `wait_for` costs a task per call, which under a flood of
        steps was a third of the stream's time."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        try:
            return await asyncio.wait_for(self.queue.get(), timeout=self.heartbeat_seconds)
        except TimeoutError:
            return None
