"""Runs the real worker in a spawn child with real queues and collects what it sends.

`SpawnedWorker(config)` starts `tunelab.worker.entry.run_worker` exactly as the
orchestrator does; tests read its events, send stop messages, and wait for it to end.
`run_worker_in_middleman` is the target of an intermediate process for the parent-death
test: it spawns the worker, reports the worker's pid, and waits to be killed.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from pathlib import Path
from typing import Any, Callable

from tunelab import events as ev
from tunelab.worker.entry import run_worker

# Generous: a spawn child spends ~8 s importing torch/transformers/trl on two cores.
RUN_TIMEOUT_S = 240


def demo_config(assets: Any, output_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A worker payload for a short CPU run on the demo model and alpaca data."""
    config = {
        "model_name": str(assets.model_dir), "training_type": "lora", "backend": "torch",
        "local_datasets": [str(assets.alpaca)], "max_seq_length": 96, "max_steps": 4, "num_epochs": 1,
        "learning_rate": 2e-3, "batch_size": 4, "gradient_accumulation_steps": 1, "lora_r": 8, "lora_alpha": 16,
        "lora_dropout": 0.0, "seed": 1234, "save_steps": 0, "logging_steps": 1, "eval_steps": 0,
        "weight_decay": 0.0, "max_grad_norm": 1.0, "lr_scheduler_type": "linear", "optim": "adamw_torch",
        "output_dir": str(output_dir), "resume_from": None, "format": "auto", "train_split": "train",
    }
    config.update(overrides)
    return config


class SpawnedWorker:
    def __init__(self, config: dict[str, Any], target: Callable[..., None] = run_worker, extra_args: tuple[Any, ...] = ()):
        """`target` takes (config, events, stops, *extra_args): run_worker, or a test's
        wrapper around it that watches from inside the child."""
        context = mp.get_context("spawn")
        self.events_queue = context.Queue()
        self.stops = context.Queue()
        self.events: list[dict[str, Any]] = []
        self.process = context.Process(target=target, args=(config, self.events_queue, self.stops, *extra_args), daemon=True)
        self.process.start()

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        try:
            event = ev.parse(self.events_queue.get(timeout=timeout))
        except queue.Empty:
            return None
        self.events.append(event)
        return event

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """Read events until one matches; fail if the run ends or the time runs out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next_event(timeout=0.5)
            if event is None:
                if not self.process.is_alive() and self.events_queue.empty():
                    break
                continue
            if predicate(event):
                return event
            if event["type"] in (ev.COMPLETE, ev.ERROR):
                raise AssertionError(f"the run ended before the awaited event: {event}")
        raise AssertionError(f"awaited event never came; got {[e['type'] for e in self.events]}")

    def stop(self, save: bool) -> None:
        self.stops.put(ev.stop_message(save))

    def finish(self, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """Read to the final event, wait for the process to exit, return the final event."""
        final = next((e for e in self.events if e["type"] in (ev.COMPLETE, ev.ERROR)), None)
        if final is None:
            final = self.wait_for(lambda e: e["type"] in (ev.COMPLETE, ev.ERROR), timeout)
        self.process.join(timeout=30)
        assert self.process.exitcode == 0, f"worker exit code {self.process.exitcode}"
        return final

    def progress(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == ev.PROGRESS and e["loss"] is not None]

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)


def run_to_end(config: dict[str, Any]) -> tuple[dict[str, Any], SpawnedWorker]:
    worker = SpawnedWorker(config)
    try:
        return worker.finish(), worker
    finally:
        worker.kill()


def run_worker_in_middleman(config: dict[str, Any], report: Any) -> None:
    """Spawn the worker, tell the test its pid once it is loading, then wait to be killed."""
    worker = SpawnedWorker(config)
    worker.wait_for(lambda e: e["type"] == ev.STATUS and e.get("stage") == "loading_model")
    report.put(worker.process.pid)
    time.sleep(RUN_TIMEOUT_S)
