"""The bare transport under the event path: the same scripted worker (a real spawn child,
`event_workers.scripted`) sending into a multiprocessing queue, read by a bare loop that
only unpickles (`tunelab.orchestrator.pump.read_event`, as the pump reads). No state, no
store, no server, no client: what the worker → parent hop alone carries on this machine,
the ceiling of everything built on it."""

from __future__ import annotations

import multiprocessing
import queue
import time

import event_workers
from tunelab.orchestrator.pump import read_event


def bare_rate(events_to_send: int) -> float:
    """Events per second read by the parent, from the first to the last progress event."""
    context = multiprocessing.get_context("spawn")
    events, stops = context.Queue(), context.Queue()
    worker = context.Process(target=event_workers.scripted,
                             args=({"max_steps": events_to_send, "output_dir": None}, events, stops))
    worker.start()
    arrived = []
    try:
        while True:
            try:
                event = read_event(events, 30)
            except (queue.Empty, EOFError, OSError):
                break
            if event.get("type") == "progress":
                arrived.append(time.perf_counter())
            elif event.get("type") == "complete":
                break
    finally:
        worker.join(10)
        if worker.is_alive():
            worker.kill()
    if len(arrived) != events_to_send:
        raise RuntimeError(f"the bare transport delivered {len(arrived)} of {events_to_send} events")
    return (len(arrived) - 1) / (arrived[-1] - arrived[0])
