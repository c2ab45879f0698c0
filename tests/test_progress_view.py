"""The terminal progress bar keeps showing the last training loss and learning rate
when a step's event carries none (an eval-only event, a step between logging steps),
instead of printing "nan"."""

from __future__ import annotations

import io

from rich.console import Console

from tunelab.cli.progress_view import ProgressView


def test_a_step_without_a_loss_keeps_the_last_one_on_screen():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False, color_system=None)
    with ProgressView(console) as view:
        view.show({"type": "progress", "step": 1, "total_steps": 3, "loss": 2.5, "learning_rate": 1e-3})
        view.show({"type": "progress", "step": 2, "total_steps": 3, "eval_loss": 2.0})
        line = view.bar.get_renderable()
        console.print(line)
    text = out.getvalue()
    assert "loss 2.5000" in text and "lr 1.00e-03" in text and "nan" not in text
    assert (view.first_loss, view.last_loss, view.steps_seen) == (2.5, 2.5, 2)
