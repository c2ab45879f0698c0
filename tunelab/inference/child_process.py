"""A child of the JSON-lines protocol that the eval and speech children share: one request
line on its stdin, answers one JSON object a line on its real stdout.

`ChildProcess` is the parent's side (`evaluate.runner`, `inference.speak`): it starts
`python -m <module>`, reads the answers on threads and keeps a tail of stderr for
messages, and `watched_messages` gives them up while the child may go on (its GPU not
claimed by a training run, its time not up). `line_sender` is the children's side (the
inference child's too): one JSON line at a time, whole, whichever thread sends it.
Torch-free.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from tunelab.inference.devices import training_on
from tunelab.pdeathsig import die_with_parent

STDERR_TAIL_CHARS = 4000


def line_sender(stream: Any) -> Callable[[dict[str, Any]], None]:
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        line = json.dumps(message)
        with lock:
            stream.write(line + "\n")
            stream.flush()

    return send


class ChildProcess:
    """A child of this protocol (`python -m <module>`) and its answers, read on threads."""

    def __init__(self, request: dict[str, Any], env: dict[str, str], module: str):
        child_env = {**os.environ, **env, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
                                        preexec_fn=die_with_parent if sys.platform == "linux" else None)
        self.messages: queue.Queue = queue.Queue()
        self.stderr_tail = ""
        threading.Thread(target=self._read, name="eval-answers", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="eval-stderr", daemon=True).start()
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.close()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                self.messages.put(message)
        self.messages.put(None)

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.process.stderr.read1(1 << 14), b""):
            self.stderr_tail = (self.stderr_tail + chunk.decode(errors="replace"))[-STDERR_TAIL_CHARS:]

    def tail(self) -> str:
        lines = [line for line in self.stderr_tail.strip().splitlines() if line.strip()]
        return (": " + " | ".join(lines[-3:])) if lines else ""

    def watched_messages(self, locks: Path, device: str, deadline: float, poll_s: float, *,
                         preempted: Callable[[str], Exception], timed_out: Callable[[], Exception],
                         ended: Callable[[int], Exception],
                         given_up: Callable[[], Exception | None] = lambda: None) -> Iterator[dict[str, Any]]:
        """The child's answers, one by one, while it may go on: raises `preempted(holder)`
        once a run trains on `device` (the GPU is the run's), `timed_out()` past the
        monotonic `deadline`, what `given_up()` returns once it returns one (the caller
        went away), and `ended(exit code)` when the child ends before its last answer
        (after its stderr's last lines are in `tail()`)."""
        while True:
            holder = training_on(locks, device)
            if holder is not None:
                raise preempted(holder)
            if time.monotonic() > deadline:
                raise timed_out()
            if (gone := given_up()) is not None:
                raise gone
            try:
                message = self.messages.get(timeout=poll_s)
            except queue.Empty:
                continue
            if message is None:
                code = self.process.wait()
                time.sleep(0.1)  # the stderr reader's last lines
                raise ended(code)
            yield message

    def end(self) -> None:
        for stop in (self.process.terminate, self.process.kill):
            stop()
            try:
                self.process.wait(5)
                return
            except subprocess.TimeoutExpired:
                continue
