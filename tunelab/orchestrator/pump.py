"""The event pump: one thread per run that reads the worker's queue and applies events.

It never lets one bad message stop a run: a malformed event is counted and skipped
(by `ActiveRun.apply`), bytes that cannot even be unpickled likewise, and a queue
error is retried while the worker lives. Once the worker has exited, whatever it sent
before dying is drained, and then the run is finalized. The pump re-reads
`run.worker` on every turn, so a worker respawned after a download stall is followed
without a restart.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunelab.orchestrator.run import ActiveRun

log = logging.getLogger("tunelab.orchestrator")

POLL_S = 0.2
DRAIN_POLL_S = 0.05


def start_pump(run: "ActiveRun") -> threading.Thread:
    thread = threading.Thread(target=pump_events, args=(run,), name=f"tunelab-pump-{run.run_id}", daemon=True)
    thread.start()
    return thread


def pump_events(run: "ActiveRun") -> None:
    queue_errors = 0
    while not run.finalized:
        worker = run.worker
        try:
            raw = worker.events.get(timeout=POLL_S)
        except queue.Empty:
            if not worker.alive() and worker is run.worker:
                _drain_and_finish(run, worker)
            continue
        except (EOFError, OSError) as exc:
            # EOF is also the normal "the worker closed its end and is exiting": wait for the exit.
            if worker.alive() or worker is not run.worker:
                queue_errors += 1
                if queue_errors == 1 and not isinstance(exc, EOFError):
                    log.warning("run %s: event queue read failed (%s); retrying while the worker lives", run.run_id, exc)
                time.sleep(POLL_S)
                continue
            _drain_and_finish(run, worker)
            continue
        except Exception as exc:  # the bytes arrived whole but would not unpickle
            run.count_malformed(f"unreadable event ({type(exc).__name__}: {exc})")
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
            raw = worker.events.get(timeout=DRAIN_POLL_S)
        except (queue.Empty, EOFError, OSError):
            break
        except Exception as exc:
            run.count_malformed(f"unreadable event ({type(exc).__name__}: {exc})")
            continue
        _apply_safely(run, raw)
    if worker is run.worker:  # not replaced by a respawn while draining
        run.finish()
