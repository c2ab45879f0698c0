"""`InferenceHost`: the server's one inference child, started on demand, closed when idle.

One model is loaded at a time (a model can be most of a machine's memory). A request for
another run replaces the loaded one once nothing is being generated with it; while
something is, the request is refused (`HostBusy`) rather than cutting that answer off.
Before each request the child's GPU is checked: if a training run has claimed it since,
the child is closed and the request refused (`DeviceBusy`), and the orchestrator calls
`unload_gpu` before it starts a run, so a training start never waits on inference and
never shares a GPU with it. Torch-free.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from pathlib import Path
from typing import Any

from tunelab.inference.client import Generation, InferenceChild
from tunelab.inference.devices import CPU, DeviceBusy, choose_device, training_on
from tunelab.inference.settings import Sampling, idle_s
from tunelab.inference.target import InferenceError, ModelTarget

log = logging.getLogger("tunelab.inference")
RECENT = 20


class HostBusy(InferenceError):
    """The loaded model is answering another request and a different one was asked for (HTTP 409)."""


class InferenceHost:
    def __init__(self, locks_dir: Path, idle_seconds: float | None = None):
        self.locks_dir = locks_dir
        self.idle_seconds = idle_s() if idle_seconds is None else idle_seconds
        self._lock = threading.Lock()  # one start/replace/close at a time
        self._child: InferenceChild | None = None
        self._in_flight = 0
        self._finished = 0  # answers ended since the start, however they ended
        self._last_used = time.monotonic()
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT)
        self._closed = threading.Event()
        self._idle_watch: threading.Thread | None = None  # started with the first child

    def start(self, target: ModelTarget, *, messages: list[dict[str, Any]] | None = None, prompt: str | None = None,
              sampling: Sampling, adapter: bool = True, loop: asyncio.AbstractEventLoop | None = None) -> Generation:
        """Queue one answer from `target` (loading it first if needed; blocks while it loads)."""
        with self._lock:
            child = self._child_for(target)
            generation = child.generate(messages=messages, prompt=prompt, sampling=sampling, adapter=adapter, loop=loop)
            self._in_flight += 1
            self._last_used = time.monotonic()
        model = target.model_id(base=not adapter)
        generation.on_end(lambda gen, message: self._ended(gen, message, model))
        return generation

    def _child_for(self, target: ModelTarget) -> InferenceChild:
        child = self._child
        if child is not None and child.alive:
            holder = training_on(self.locks_dir, child.device)
            if holder is not None:
                log.warning("closing the inference child: %s now trains on %s", holder, child.device)
                self._close_child()
                raise DeviceBusy(f"{holder} is training on the GPU the model was loaded on; the model was unloaded "
                                 "to leave it to the run. Try again when the run has finished")
            if child.target.key == target.key:
                return child
            if self._in_flight:
                raise HostBusy(f"{child.target.model_id()} is answering another request; a different model can load "
                               "once it has finished. Try again in a moment")
        self._close_child()
        device, env = choose_device(self.locks_dir)
        log.info("loading %s for inference on %s", target.label, device)
        child = InferenceChild(target, device, env)
        child.wait_ready()
        holder = training_on(self.locks_dir, device)
        if holder is not None:
            child.close()
            raise DeviceBusy(f"{holder} started training on {device} while the model loaded there; it was unloaded "
                             "to leave the GPU to the run. Try again when the run has finished")
        self._child = child
        if self._idle_watch is None:
            self._idle_watch = threading.Thread(target=self._close_when_idle, name="inference-idle", daemon=True)
            self._idle_watch.start()
        return child

    def _ended(self, generation: Generation, message: dict[str, Any], model: str) -> None:
        with self._lock:
            self._in_flight -= 1
            self._finished += 1
            self._last_used = time.monotonic()
            self._recent.append({"model": model, "finish_reason": generation.finish_reason if message["type"] == "done" else "error",
                                 "completion_tokens": generation.completion_tokens, "timed_out": generation.timed_out})

    def _close_child(self) -> None:
        # Forgotten only once it has ended, so a status saying "no model" means the memory is free.
        if self._child is not None:
            self._child.close()
            self._child = None

    def unload_gpu(self) -> None:
        """Close the child if it holds a GPU (called before a training run starts). Takes no
        lock, so a start never waits on a model that is loading; a child that finishes
        loading on a GPU a run has claimed meanwhile closes itself (see `_child_for`)."""
        child = self._child
        if child is not None and child.device != CPU:
            log.info("unloading %s from %s for a training run", child.target.label, child.device)
            child.close()

    def unload_run(self, run_id: int) -> None:
        """Close the child if it holds `run_id`'s model (the run is being deleted). Like
        `unload_gpu` it takes no lock: the caller has made sure nothing answers with that
        run or loads it (server/run_uses.py)."""
        child = self._child
        if child is not None and child.target.run_id == run_id:
            log.info("unloading %s: the run is being deleted", child.target.label)
            child.close()

    def status(self) -> dict[str, Any]:
        child = self._child
        loaded = child is not None and child.alive
        return {"model": child.target.model_id() if loaded else None, "device": child.device if loaded else None,
                "generating": self._in_flight, "finished": self._finished, "idle_close_s": self.idle_seconds, "recent": list(self._recent)}

    def _close_when_idle(self) -> None:
        while not self._closed.wait(min(5.0, max(0.2, self.idle_seconds / 4))):
            with self._lock:
                idle = time.monotonic() - self._last_used
                if self._child is not None and not self._in_flight and idle >= self.idle_seconds:
                    log.info("closing the inference child of %s after %.0f s idle", self._child.target.label, idle)
                    self._close_child()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._close_child()
