"""Running the real worker entry with backend=mlx in a real spawned process.

`WorkerRun` starts `tunelab.worker.entry.run_worker` exactly as the orchestrator does
(spawn context, an event queue and a stop queue) and collects its events; a test may
send a stop once a chosen step has been reported. `mlx_config` builds a small run on
the demo's tiny Llama, so every run here takes seconds.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tunelab import events
from tunelab.config.run_config import parse_config
from tunelab.worker.entry import run_worker

# Generous: a spawned MLX worker needs a few seconds for imports on a busy 2-core runner.
RUN_TIMEOUT_SECONDS = 180


def mlx_config(assets: Any, output_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A validated worker payload for a short mlx run on the demo model and alpaca data."""
    resume_from = overrides.pop("resume_from", None)
    settings = {
        "model_name": str(assets.model_dir),
        "local_datasets": [str(assets.alpaca)],
        "backend": "mlx",
        "max_steps": 12,
        "batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_seq_length": 128,
        "learning_rate": 1e-3,
        **overrides,
    }
    payload = parse_config(settings).worker_payload()
    payload["output_dir"] = str(output_dir)
    payload["resume_from"] = str(resume_from) if resume_from else None
    return payload


class WorkerRun:
    """One worker process and the events it sent."""

    def __init__(self, config: dict[str, Any]):
        context = multiprocessing.get_context("spawn")
        self.events_queue = context.Queue()
        self.stops = context.Queue()
        self.process = context.Process(target=run_worker, args=(config, self.events_queue, self.stops), daemon=True)
        self.events: list[dict[str, Any]] = []

    def run(self, on_progress: Callable[["WorkerRun", dict[str, Any]], None] | None = None) -> "WorkerRun":
        """Start the worker and collect events until it sends complete/error and exits."""
        self.process.start()
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                event = events.parse(self.events_queue.get(timeout=1.0))
            except queue.Empty:
                if not self.process.is_alive() and self.final is None:
                    break
                continue
            self.events.append(event)
            if event["type"] == events.PROGRESS and on_progress:
                on_progress(self, event)
            if event["type"] in (events.COMPLETE, events.ERROR):
                break
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            pytest.fail(f"the mlx worker did not exit after its last event; events: {self.events[-3:]}")
        assert self.final is not None, f"the worker exited with code {self.process.exitcode} without a final event"
        return self

    def stop(self, save: bool) -> None:
        self.stops.put(events.stop_message(save))

    @property
    def final(self) -> dict[str, Any] | None:
        done = [e for e in self.events if e["type"] in (events.COMPLETE, events.ERROR)]
        return done[-1] if done else None

    @property
    def progress(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == events.PROGRESS]

    def losses(self) -> dict[int, float]:
        return {e["step"]: e["loss"] for e in self.progress if e["loss"] is not None}

    def stages(self) -> list[str]:
        return [e["stage"] for e in self.events if e["type"] == events.STATUS and "stage" in e]


def stop_at(step: int, save: bool) -> Callable[[WorkerRun, dict[str, Any]], None]:
    """A progress hook that asks for a stop once `step` has been reported."""

    def hook(run: WorkerRun, event: dict[str, Any]) -> None:
        if event["step"] == step:
            run.stop(save)

    return hook


def checkpoints_in(folder: Path) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith(("checkpoint-", "tmp-checkpoint-"))) if Path(folder).exists() else []

