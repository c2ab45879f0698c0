"""The terminal progress bar of a run, fed one event at a time.

Shared by the two ways `tunelab train` follows a run: in this process (`foreground`,
events from the orchestrator) and on a server (`remote_run`, events from its progress
stream), so both look the same. It also remembers the first and last loss and the
highest step, which the end-of-run summary uses.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tunelab.text import printable


class ProgressView:
    """A rich progress bar for one run; use as a context manager and `show` events."""

    def __init__(self, console: Console):
        columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]}  lr {task.fields[lr]}"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn()]
        self.bar = Progress(*columns, console=console, transient=False)
        self.task = self.bar.add_task("starting", total=None, loss="-", lr="-")
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self.last_lr: float | None = None
        self.steps_seen = 0

    def __enter__(self) -> "ProgressView":
        self.bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.stop()

    def show(self, event: dict[str, Any]) -> None:
        """Apply a `status` or `progress` event; other kinds change nothing on screen."""
        kind = event.get("type")
        if kind == "status":
            # Worker messages may carry anything: shown as plain, printable text.
            self.bar.update(self.task, description=escape(printable(event.get("message"), 40)))
        elif kind == "progress":
            loss = event.get("loss")
            if loss is not None:
                self.first_loss = loss if self.first_loss is None else self.first_loss
                self.last_loss = loss
            self.steps_seen = max(self.steps_seen, event["step"])
            if event.get("learning_rate") is not None:
                self.last_lr = event["learning_rate"]
            # An eval-only step or one between logging steps carries no loss: keep showing the last one.
            self.bar.update(self.task, description="training", completed=event["step"], total=event.get("total_steps"),
                            loss=f"{self.last_loss:.4f}" if self.last_loss is not None else "-",
                            lr=f"{self.last_lr:.2e}" if self.last_lr is not None else "-")
