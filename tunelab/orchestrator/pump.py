"""The event pump: one thread per run that reads the worker's queue and applies events.

It never lets one bad message stop a run: a malformed event is counted and skipped
(by `ActiveRun.apply`), bytes that cannot even be unpickled likewise, and a queue
error is retried while the worker lives. Once the worker has exited, whatever it sent
before dying is drained, and then the run is finalized. The pump re-reads
`run.worker` on every turn, so a worker respawned after a download stall is followed
without a restart. While the queue is quiet (a slow step) it lets the run store metric
rows that have waited the flush interval.
"""

from __future__ import annotations

import logging
import queue
import threading
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: run.py starts the pump, so a run-time import would go round
    from tunelab.orchestrator.run import ActiveRun

log = logging.getLogger("tunelab.orchestrator")

POLL_S = 0.2
DRAIN_POLL_S = 0.05


class UnreadableEvent(Exception):
    """A message that arrived whole but whose bytes do not unpickle."""


def read_event(events: Any, timeout: float) -> Any:
    """The next message on a worker's event queue.

    `multiprocessing.Queue.get` raises EOFError both when the pipe is closed and when a
    message's bytes unpickle to "ran out of input", so one garbage message could pass for
    the end of the stream and cut off everything after it. Reading the frame and
    unpickling it as two steps tells them apart: EOFError/OSError here always mean the
    pipe, UnreadableEvent a bad message. Raises queue.Empty after `timeout` seconds."""
    with events._rlock:
        if not events._reader.poll(timeout):  # also true at end of file: recv_bytes then says so
            raise queue.Empty
        data = events._reader.recv_bytes()
        events._sem.release()  # as Queue.get does: one slot back for the writer
    try:
        return ForkingPickler.loads(data)
    except Exception as exc:
        raise UnreadableEvent(f"{type(exc).__name__}: {exc}") from exc


def start_pump(run: "ActiveRun") -> threading.Thread:
    thread = threading.Thread(target=pump_events, args=(run,), name=f"tunelab-pump-{run.run_id}", daemon=True)
    thread.start()
    return thread


def pump_events(run: "ActiveRun") -> None:
    queue_errors = 0
    while not run.finalized:
        worker = run.worker
        try:
            raw = read_event(worker.events, POLL_S)
        except queue.Empty:
            if not worker.alive() and worker is run.worker:
                _drain_and_finish(run, worker)
            else:
                run.flush_if_due()  # a slow step sends nothing for a while; its metrics still go out
            continue
        except (EOFError, OSError) as exc:
            # EOF is also the normal "the worker closed its end and is exiting": wait for the exit.
            if worker.alive() or worker is not run.worker:
                queue_errors += 1
                if queue_errors == 1 and not isinstance(exc, EOFError):
                    log.warning("run %s: event queue read failed (%s); retrying while the worker lives", run.run_id, exc)
                # Not a plain sleep: a worker that just closed its queue exits within
                # moments, and finalizing should not wait out the whole poll interval.
                worker.process.join(POLL_S)
                continue
            _drain_and_finish(run, worker)
            continue
        except UnreadableEvent as exc:
            run.count_malformed(f"unreadable event ({exc})")
            continue
        _apply_safely(run, raw)


def _apply_safely(run: "ActiveRun", raw: object) -> None:
    try:
        run.apply(raw)
    except Exception:
        # A bug in applying one event must not end the pump (and with it the run's record).
        log.exception("run %s: applying an event failed; skipping it", run.run_id)


def _drain_and_finish(run: "ActiveRun", worker) -> None:
    """The worker is gone: apply everything it managed to send, then finalize."""
    while not run.finalized:
        try:
            raw = read_event(worker.events, DRAIN_POLL_S)
        except (queue.Empty, EOFError, OSError):
            break
        except UnreadableEvent as exc:
            run.count_malformed(f"unreadable event ({exc})")
            continue
        _apply_safely(run, raw)
    if worker is run.worker:  # not replaced by a respawn while draining
        run.finish()
