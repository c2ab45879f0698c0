"""The stop side of the Orchestrator: stopping one run, the most recent one, or all of
them when the process is told to end.

`RunStopper` is mixed into `Orchestrator` (core.py), whose state it shares. A stop with
save asks the run to save at its next step boundary; a cancel is recorded in the store
first, so a cancel that was not recorded never signals the worker. A queued run is
withdrawn from the queue (queueing.py) either way.
"""

from __future__ import annotations

import atexit

from tunelab.orchestrator.errors import NoActiveRun, PersistError, RunActive, RunMismatch
from tunelab.orchestrator.finalize import with_retries
from tunelab.store import RunNotFound

CANCEL_PERSIST_ATTEMPTS = 3


class RunStopper:
    """Stopping, cancelling and shutting down; see the module docstring for what it shares."""

    def stop(self, save: bool, expected_run_id: int | None = None) -> None:
        """Stop and save (`save=True`) or cancel the current run (core.py: never a queued one)."""
        with self._start_lock:  # a start in progress finishes spawning first
            latest = self._latest
        run = self._runs.get(latest) if latest is not None else None
        if run is None or run.finalized:
            raise NoActiveRun("no run is training here; withdraw a queued run by its id "
                              "(POST /api/runs/ID/stop, or `tunelab queue cancel ID`)")
        if expected_run_id is not None and expected_run_id != latest:
            raise RunMismatch(expected_run_id, latest)
        self.stop_run(latest, save)

    def stop_run(self, run_id: int, save: bool) -> str:
        """Stop and save, or cancel, run `run_id`; a queued run is cancelled either way.
        Returns what happened: "stopping" or "cancelled"."""
        with self._start_lock:  # a start in progress finishes spawning first
            run = self._runs.get(run_id)
        if run is None:
            if self.cancel_queued(run_id):
                return "cancelled"
            row = self.store.get_run(run_id)
            if row is None:
                raise RunNotFound(run_id)
            where = " by another server" if row["status"] == "running" else ""
            raise NoActiveRun(f"run {run_id} is {row['status']}{where}; only an active or queued run here can be stopped")
        if run.finalized:
            raise NoActiveRun(f"run {run_id} has already ended")
        if not save:
            try:
                with_retries(lambda: self.store.mark_cancel_requested(run.run_id), "recording the cancel",
                             attempts=CANCEL_PERSIST_ATTEMPTS)
            except Exception as exc:
                raise PersistError(f"the cancel could not be recorded ({exc}); the run was not signalled, try again") from exc
        run.request_stop(save)
        return "stopping"

    def reset(self) -> None:
        """Forget a finished run so the state reads idle again."""
        with self._start_lock:
            latest = self._latest
            run = self._runs.get(latest) if latest is not None else None
            if run is not None:
                if not run.finalized or run.worker_alive():
                    raise RunActive(f"run {run.run_id} is active; stop it or wait for it to finish")
                pump = run.pump_thread()
                if pump is not None and pump.is_alive():
                    raise RunActive(f"run {run.run_id} is still finishing; try again in a moment")
            with self._lock:
                self._latest = None

    def stop_for_shutdown(self, grace_s: float) -> int | None:
        """What SIGTERM means: start no new run, and have every active run stop at its next
        step boundary and save, finalized within `grace_s` (else it is ended and recorded
        `error`, resumable from its last valid checkpoint). Queued runs stay queued for the
        next server life. Returns at once, with the id of the most recent run that is
        stopping (None when none was active); `wait_idle` waits for all of them."""
        with self._start_lock:  # a start in progress finishes spawning first
            with self._lock:
                self._closed = True
                runs = [r for r in self._runs.values() if not r.finalized]
        self._wake.set()
        if self._warm is not None:
            self._warm.close()  # no next run to warm up for; its memory is better spent on the save
        for run in runs:
            run.stop_for_shutdown(grace_s)
        return max((r.run_id for r in runs), default=None)

    @property
    def closed(self) -> bool:
        """True once the orchestrator is shutting down: it starts no new runs."""
        return self._closed

    def shutdown(self) -> None:
        """End every active worker (recorded as an error, resumable from its checkpoint)."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
        self._wake.set()
        atexit.unregister(self._atexit)
        if self._warm is not None:
            self._warm.close()
        for run in runs:
            if not run.finalized:
                run.force_end("shutdown", failure="tunelab shut down during training")
        self.wait_idle(10)
        self._heartbeat.stop()
