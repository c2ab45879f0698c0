"""Run one training job in the foreground of a terminal: a rich progress bar fed by the
orchestrator's events, Ctrl-C to stop and save (twice to cancel), and an exit code.

SIGTERM and SIGHUP (a supervisor, a closed terminal) also mean stop-and-save, but with
a deadline: the run must be saved and recorded within TUNELAB_SHUTDOWN_GRACE_S (20 s),
or it is ended and recorded `error`, resumable from its last valid checkpoint. Exit
codes: 0 completed, 130 stopped (saved, or cancelled), 1 error, 2 bad input.

Used by `tunelab train`, `tunelab resume` and `tunelab demo`.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED  # noqa: F401 - also this module's interface
from tunelab.cli.progress_view import ProgressView
from tunelab.text import printable

from tunelab.orchestrator.watchdog import shutdown_grace_s

EXIT_BY_STATUS = {"completed": EXIT_OK, "stopped": EXIT_STOPPED, "error": EXIT_ERROR}


@dataclass
class RunOutcome:
    run_id: int
    run: dict[str, Any]
    first_loss: float | None
    last_loss: float | None
    steps_seen: int
    message: str | None = None  # the worker's last word (e.g. "completed 5 steps; ...; exported merged to ...")

    @property
    def exit_code(self) -> int:
        return EXIT_BY_STATUS.get(self.run.get("status"), EXIT_ERROR)


# Signals that ask this process to end: stop and save within the shutdown grace.
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# A supervisor can deliver its one SIGTERM twice: at a Slurm time limit the job step's
# own kill and srun's forwarded copy both reach `tunelab train`. A second shutdown signal
# this soon after the first is that same stop, not a cancel (which would delete the run's folder).
SHUTDOWN_REPEAT_WINDOW_S = 2.0


class _InterruptHandler:
    """First Ctrl-C: stop and save. Second: cancel. SIGTERM and SIGHUP count as presses
    too, and the first of those also sets the shutdown deadline; one that repeats the
    first within SHUTDOWN_REPEAT_WINDOW_S is ignored. The worker ignores SIGINT itself (a
    terminal sends it to the whole process group)."""

    def __init__(self, orchestrator, run_id: int, console: Console):
        self.orchestrator, self.run_id, self.console = orchestrator, run_id, console
        self.presses = 0
        self._first_shutdown_at: float | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_InterruptHandler":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, *SHUTDOWN_SIGNALS):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, _frame) -> None:
        if signum in SHUTDOWN_SIGNALS:
            first = self._first_shutdown_at
            if first is not None and time.monotonic() - first < SHUTDOWN_REPEAT_WINDOW_S:
                return
            if first is None:
                self._first_shutdown_at = time.monotonic()
        self.presses += 1
        save = self.presses == 1
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        # The request goes first: after SIGHUP the terminal may be gone and printing fail.
        try:
            if save and signum in SHUTDOWN_SIGNALS:
                self.orchestrator.stop_for_shutdown(shutdown_grace_s())
            else:
                self.orchestrator.stop(save=save, expected_run_id=self.run_id)
            note = (f"[yellow]{name}: stopping, saving a checkpoint ({name} again to cancel)…[/]" if save
                    else f"[red]{name}: cancelling, nothing more will be saved…[/]")
        except Exception as exc:  # the run may have just finished; say so, never crash the handler
            note = f"[dim]{name}: stop request not sent: {exc}[/]"
        try:
            self.console.print(note)
        except OSError:
            pass


def watch_run(orchestrator, run_id: int, console: Console, on_event: Callable[[dict], None] | None = None) -> RunOutcome:
    """Show live progress of `run_id` until it is finalized; return its stored outcome."""
    inbox: "queue.Queue[dict]" = queue.Queue()
    final: dict[str, Any] = {}
    unsubscribe = orchestrator.subscribe(inbox.put)
    try:
        with _InterruptHandler(orchestrator, run_id, console), ProgressView(console) as view:
            # Catch up on what happened before we subscribed, then follow live events.
            for event in orchestrator.progress_since(-1):
                inbox.put({**event, "type": "progress"})
            while True:
                try:
                    event = inbox.get(timeout=0.25)
                except queue.Empty:
                    if not orchestrator.is_training_active() and orchestrator.wait_idle(0):
                        break
                    continue
                if event.get("run_id") not in (None, run_id):
                    continue
                if on_event:
                    on_event(event)
                view.show(event)
                if event.get("type") in ("complete", "error") and event.get("final"):
                    final = event
                    break
        orchestrator.wait_idle(30)
    finally:
        unsubscribe()
    run = orchestrator.store.get_run(run_id) or {"status": "error", "error_message": "run row missing"}
    return RunOutcome(run_id, run, view.first_loss, view.last_loss, view.steps_seen, final.get("status_message"))


def print_outcome(outcome: RunOutcome, console: Console) -> None:
    run = outcome.run
    status = run.get("status") or "error"
    colour = {"completed": "green", "stopped": "yellow"}.get(status, "red")
    console.print(f"run {outcome.run_id}: [{colour}]{escape(printable(status))}[/]{_where(run)}")
    if run.get("error_message"):
        console.print(Text(printable(run["error_message"], keep_lines=True), style="red"))
    elif status == "completed" and outcome.message:  # what an export_after made of the run, among others
        console.print(Text(printable(outcome.message)), soft_wrap=True)
    if run.get("output_dir"):
        console.print(Text(f"output: {printable(run['output_dir'])}"))


def _where(run: dict[str, Any]) -> str:
    """' at step 5 of 8' — only the numbers that are known; a run that never reached
    its first step says so instead of printing 'None'."""
    step, total = run.get("final_step"), run.get("total_steps")
    if step is None:
        return " before the first training step" if run.get("status") != "completed" else ""
    return f" at step {step}" + (f" of {total}" if total is not None else "")
