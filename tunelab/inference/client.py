"""The parent side of one inference child: start it, send requests, stream the answers.

`InferenceChild(target, device, env)` starts `python -m tunelab.inference.child` (see its
protocol), waits until the model is loaded, and then hands out `Generation`s: each one
a stream of text pieces ending in a `done` message, readable from a thread (`events`)
or from an event loop (`aevents`), and stoppable (`stop`). Torch-free. The child dies
with this process (Linux's parent-death signal) and exits when its input closes, so a
child never outlives its parent; `close()` ends it within seconds in any case.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterator

from tunelab.inference.settings import Sampling, load_timeout_s, max_time_s
from tunelab.inference.target import InferenceError, ModelTarget
from tunelab.pdeathsig import die_with_parent

STDERR_TAIL_CHARS = 4000
CLOSE_GRACE_S = 5.0


class InferenceFailed(InferenceError):
    """The child could not load the model, or died (CLI exit 1, HTTP 500/503)."""


class GenerationRefused(InferenceError):
    """The model refused the request as given (HTTP 400); `field` names the request field."""

    def __init__(self, field: str | None, message: str):
        self.field = field
        super().__init__(message)


class Generation:
    """One answer being generated: text pieces as they come, then how it ended."""

    def __init__(self, gen_id: str, child: "InferenceChild", loop: asyncio.AbstractEventLoop | None):
        self.id = gen_id
        self._child = child
        self._loop = loop
        self._queue: Any = asyncio.Queue() if loop is not None else queue.Queue()
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.timed_out = False
        self._on_end: list[Callable[["Generation", dict[str, Any]], None]] = []
        self._end_lock = threading.Lock()
        self._end: dict[str, Any] | None = None  # the done or error message, once it came

    def on_end(self, callback: Callable[["Generation", dict[str, Any]], None]) -> None:
        """Call `callback(generation, message)` when the answer ends; at once if it has ended
        already (a short answer can end before its requester gets to register)."""
        with self._end_lock:
            end = self._end
            if end is None:
                self._on_end.append(callback)
        if end is not None:
            callback(self, end)

    def _deliver(self, message: dict[str, Any]) -> None:
        """Called on the child's reader thread."""
        if message["type"] == "done":
            self.finish_reason = message.get("finish_reason")
            self.prompt_tokens = int(message.get("prompt_tokens") or 0)
            self.completion_tokens = int(message.get("completion_tokens") or 0)
            self.timed_out = bool(message.get("timed_out"))
        if message["type"] in ("done", "error"):
            with self._end_lock:
                self._end = message
                callbacks = list(self._on_end)
            for callback in callbacks:
                callback(self, message)
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, message)
            except RuntimeError:
                pass  # the loop has closed: nobody is listening any more
        else:
            self._queue.put(message)

    @staticmethod
    def _piece(message: dict[str, Any]) -> str | None:
        if message["type"] == "token":
            return message["text"]
        if message["type"] == "error":
            if message.get("field") is not None:
                raise GenerationRefused(message.get("field"), message["message"])
            raise InferenceFailed(message["message"])
        return None

    def events(self) -> Iterator[str]:
        """The answer's text pieces, in order; ends when the answer is complete."""
        while True:
            piece = self._piece(self._queue.get())
            if piece is None:
                return
            yield piece

    async def aevents(self) -> AsyncIterator[str]:
        """The same pieces for an event loop, except that the token texts already waiting
        when the loop gets to them come joined as one piece (one SSE chunk for the lot)."""
        held: dict[str, Any] | None = None
        while True:
            message = held if held is not None else await self._queue.get()
            held = None
            piece = self._piece(message)
            if piece is None:
                return
            while not self._queue.empty():
                queued = self._queue.get_nowait()
                if queued["type"] != "token":
                    held = queued
                    break
                piece += queued["text"]
            yield piece

    def text(self) -> str:
        return "".join(self.events())

    def stop(self) -> None:
        """End this answer at its next token (a queued one never starts)."""
        self._child.send({"op": "stop", "id": self.id})


class InferenceChild:
    """One child process serving one model target."""

    def __init__(self, target: ModelTarget, device: str, env: dict[str, str]):
        self.target = target
        self.device = device
        self.info: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[str, Generation] = {}
        self._ready = threading.Event()
        self._load_error: str | None = None
        self._stderr_tail = ""
        child_env = {**os.environ, **env, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "tunelab.inference.child"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
                                        preexec_fn=die_with_parent if sys.platform == "linux" else None)
        threading.Thread(target=self._read_answers, name="inference-answers", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="inference-stderr", daemon=True).start()
        self.send({"op": "load", **target.child_request()})

    def wait_ready(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the model is loaded; raise InferenceFailed (and close) if it is not."""
        timeout = load_timeout_s() if timeout is None else timeout
        if not self._ready.wait(timeout):
            self.close()
            raise InferenceFailed(f"loading {self.target.label} took longer than {timeout:.0f} s; "
                                  "raise TUNELAB_INFERENCE_LOAD_TIMEOUT_S for a large model")
        if self._load_error is not None:
            self.close()
            raise InferenceFailed(self._load_error)
        return self.info

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._pending)

    def send(self, message: dict[str, Any]) -> None:
        line = (json.dumps(message) + "\n").encode()
        with self._lock:
            try:
                self.process.stdin.write(line)
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the child has gone; its reader reports that to every pending answer

    def generate(self, *, messages: list[dict[str, Any]] | None = None, prompt: str | None = None,
                 sampling: Sampling, adapter: bool = True, loop: asyncio.AbstractEventLoop | None = None) -> Generation:
        """Queue one answer: a chat (`messages`, rendered with the run's chat template) or a
        plain `prompt`. `adapter=False` asks the base model. `loop`: read it with `aevents`."""
        gen_id = f"g{next(self._ids)}"
        generation = Generation(gen_id, self, loop)
        with self._lock:
            if not self.alive:
                raise InferenceFailed(f"the inference process for {self.target.label} has ended{self._tail()}")
            self._pending[gen_id] = generation
        # The time cap is read now, so an operator's change applies from the next answer.
        request = {"op": "generate", "id": gen_id, "adapter": adapter, "sampling": sampling.model_dump(mode="json"),
                   "max_time_s": max_time_s()}
        request.update({"messages": messages} if messages is not None else {"prompt": prompt or ""})
        self.send(request)
        return generation

    def _read_answers(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            kind = message.get("type")
            if kind == "ready":
                self.info = message
                self._ready.set()
            elif kind == "load_error":
                self._load_error = f"{self.target.label} cannot be loaded: {message.get('message')}"
                self._ready.set()
            elif kind in ("token", "done", "error"):
                with self._lock:
                    generation = self._pending.get(str(message.get("id")))
                    if generation is not None and kind != "token":
                        del self._pending[generation.id]
                if generation is not None:
                    generation._deliver(message)
        self._child_ended()

    def _child_ended(self) -> None:
        code = self.process.wait()
        if not self._ready.is_set():
            self._load_error = f"the inference process for {self.target.label} ended (exit code {code}) before loading{self._tail()}"
            self._ready.set()
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        how = f"was killed by signal {-code}" if code < 0 else f"ended (exit code {code})"
        for generation in pending:
            generation._deliver({"type": "error", "id": generation.id,
                                 "message": f"the inference process for {self.target.label} {how}{self._tail()}"})

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.process.stderr.read1(1 << 14), b""):
            self._stderr_tail = (self._stderr_tail + chunk.decode(errors="replace"))[-STDERR_TAIL_CHARS:]

    def _tail(self) -> str:
        time.sleep(0.1)  # let the stderr reader catch the last lines of a child that just died
        lines = [line for line in self._stderr_tail.strip().splitlines() if line.strip()]
        return (": " + " | ".join(lines[-3:])) if lines else ""

    def close(self) -> None:
        """End the child: its input closes (it stops the answer in progress and exits),
        then terminate and kill if it has not gone within a few seconds."""
        with self._lock:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        for stop in (None, self.process.terminate, self.process.kill):
            if stop is not None:
                stop()
            try:
                self.process.wait(CLOSE_GRACE_S)
                return
            except subprocess.TimeoutExpired:
                continue
