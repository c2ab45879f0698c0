"""The reading side of the Orchestrator: what a surface shows of a run, and waiting for runs.

`RunReader` is mixed into `Orchestrator` (core.py), whose state it shares. A run that
trains (or trained) here is read live from its `ActiveRun`; any other run from its row.
The methods without a run id are about the most recent run; `RunView` gives one run
the same reading interface, for a progress stream that follows it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from tunelab.orchestrator.run import ActiveRun
from tunelab.orchestrator.scheduler import queued_snapshot
from tunelab.orchestrator.state import ProgressState
from tunelab.orchestrator.plots import loss_plot_png, plot_title
from tunelab.store import RunNotFound

if TYPE_CHECKING:  # for annotations only: core.py builds Orchestrator from this mixin, so a run-time import would go round
    from tunelab.orchestrator.core import Orchestrator


class RunReader:
    """Snapshots, metrics, progress, plots and waiting; see the module docstring for what it shares."""

    def is_training_active(self) -> bool:
        with self._lock:
            spawning = self._spawning
        return spawning or bool(self._live_runs())

    def prewarm_status(self) -> dict[str, Any]:
        """{"enabled", "pid", "ready"}: the worker waiting for the next run, if any."""
        if self._warm is None:
            return {"enabled": False, "pid": None, "ready": False}
        return {"enabled": True, **self._warm.status()}

    def active_run_ids(self) -> list[int]:
        """The runs this server trains now, oldest first."""
        return sorted(r.run_id for r in self._live_runs())

    def snapshot(self) -> dict[str, Any]:
        """The most recent run's state (idle when there is none)."""
        latest = self._latest
        if latest is None:
            data = {**ProgressState().as_dict(), "run_id": None, "started_at": None, "model_name": None,
                    "dataset_name": None, "display_name": None, "final_loss": None, "worker_pid": None,
                    "world_size": None}
        else:
            data = self.run_snapshot(latest, deleted_too=True)
        data["is_training_running"] = self.is_training_active()
        return data

    def run_snapshot(self, run_id: int, *, deleted_too: bool = False) -> dict[str, Any]:
        """One run's state: live when it trains (or trained) here, else from its row;
        RunNotFound when there is no such run — also for a finished run held here whose row
        was deleted since, unless `deleted_too` (/api/train/status keeps showing the last run)."""
        run = self._runs.get(run_id)
        if (run is not None and not deleted_too and run.finalized and not run.worker_alive()
                and self.store.get_run(run_id) is None):
            raise RunNotFound(run_id)
        if run is None:
            row = self.store.get_run(run_id)
            if row is None:
                raise RunNotFound(run_id)
            data = queued_snapshot(row, self.queue_position(run_id) if row["status"] == "queued" else None)
            data["histories"] = ProgressState().histories()
        else:
            run.ensure_pump()
            data = {**run.snapshot(), "devices": list(run.devices), "queue_position": None}
        data["is_training_running"] = run is not None and (not run.finalized or run.worker_alive())
        return data

    def metrics(self) -> dict[str, Any]:
        return self.run_metrics(self._latest) if self._latest is not None else ProgressState().histories()

    def run_metrics(self, run_id: int) -> dict[str, Any]:
        run = self._runs.get(run_id)
        if run is None:
            return ProgressState().histories()
        with run.lock:
            return run.state.histories()

    def progress_since(self, step: int) -> list[dict[str, Any]]:
        return self.run_progress_since(self._latest, step) if self._latest is not None else []

    def run_progress_since(self, run_id: int, step: int) -> list[dict[str, Any]]:
        run = self._runs.get(run_id)
        return run.progress_after(step) if run is not None else []

    def view(self, run_id: int) -> "RunView":
        """The reading methods of one run, shaped like the orchestrator's own (for a
        progress stream that follows that run)."""
        self.run_snapshot(run_id)  # RunNotFound now rather than inside a stream
        return RunView(self, run_id)

    def plot_png(self, theme: str = "light") -> bytes:
        run = self._runs.get(self._latest) if self._latest is not None else None
        snap = self.snapshot()
        secrets = run.cfg.secret_values() if run is not None else []
        history = snap["histories"]
        return loss_plot_png(history["steps"], history["loss"], title=plot_title(snap, secrets), theme=theme,
                             eval_steps=history["eval_steps"], eval_losses=history["eval_loss"])

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every run here is finalized and its pump has finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            runs = list(self._runs.values())
        return all([self._wait_run(run, deadline) for run in runs])

    def wait_run(self, run_id: int, timeout: float | None = None) -> bool:
        run = self._runs.get(run_id)
        return run is None or self._wait_run(run, None if timeout is None else time.monotonic() + timeout)

    @staticmethod
    def _wait_run(run: ActiveRun, deadline: float | None) -> bool:
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        if not run.finalizer.done.wait(left()):
            return False
        pump = run.pump_thread()
        if pump is not None and pump is not threading.current_thread():
            pump.join(left())
            return not pump.is_alive()
        return True


class RunView:
    """One run seen through the orchestrator's reading interface (snapshot, progress_since,
    subscribe), so a progress stream can follow a run that is not the most recent."""

    def __init__(self, orchestrator: Orchestrator, run_id: int):
        self._orchestrator = orchestrator
        self.run_id = run_id

    def snapshot(self) -> dict[str, Any]:
        return self._orchestrator.run_snapshot(self.run_id)

    def progress_since(self, step: int) -> list[dict[str, Any]]:
        return self._orchestrator.run_progress_since(self.run_id, step)

    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        return self._orchestrator.subscribe(callback)
