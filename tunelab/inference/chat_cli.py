"""`tunelab chat RUN`: a conversation with a trained run in the terminal.

Each line read from stdin (a terminal or a pipe) is a message; the answer is printed as
it streams. stdout holds only the answers (with `[base]` / `[fine-tune]` headers in
compare mode), status lines go to stderr, so a script can pipe prompts in and read
answers out. `/reset` starts the conversation over; `/exit` or the end of input quits.
Ctrl-C while an answer streams stops that answer; at the prompt it quits.
With `--compare`, every message is answered by the base model, then by the fine-tune,
each keeping its own conversation: an adapter run switches its adapter off for the base
(one copy of the weights), a full run loads its base model beside it.
"""

from __future__ import annotations

import sys
from typing import IO

from tunelab import paths
from tunelab.inference.client import Generation, InferenceChild
from tunelab.inference.devices import choose_device
from tunelab.inference.settings import Sampling
from tunelab.inference.target import ModelTarget, resolve_target
from tunelab.text import printable


class ChatSession:
    """One conversation per side (fine-tune, and base in compare mode) with one child."""

    def __init__(self, child: InferenceChild, system: str | None, sampling: Sampling, compare: bool, out: IO[str]):
        self.child = child
        self.sampling = sampling
        self.system = system
        self.sides = [False, True] if compare else [True]  # adapter off (base), then on
        self.compare = compare
        self.out = out
        self.history: dict[bool, list[dict[str, str]]] = {}
        self.reset()

    def reset(self) -> None:
        start = [{"role": "system", "content": self.system}] if self.system else []
        self.history = {side: list(start) for side in self.sides}

    def answer(self, text: str) -> None:
        for adapter in self.sides:
            messages = [*self.history[adapter], {"role": "user", "content": text}]
            if self.compare:
                self.out.write("[fine-tune]\n" if adapter else "[base]\n")
            reply = self._stream(self.child.generate(messages=messages, sampling=self.sampling, adapter=adapter))
            self.history[adapter] = [*messages, {"role": "assistant", "content": reply}]

    def _stream(self, generation: Generation) -> str:
        pieces: list[str] = []
        try:
            for piece in generation.events():
                pieces.append(piece)
                self.out.write(printable(piece, keep_lines=True))
                self.out.flush()
        except KeyboardInterrupt:
            generation.stop()
            pieces.extend(generation.events())  # what was already on its way, up to the stop
            self.out.write(" [stopped]")
        self.out.write("\n")
        self.out.flush()
        return "".join(pieces)


def load_target(run_id: int, checkpoint: int | None) -> ModelTarget:
    from tunelab.store import Store

    with Store() as store:
        return resolve_target(store.get_run(run_id), run_id, checkpoint)


def start_child(target: ModelTarget, err: IO[str]) -> InferenceChild:
    device, env = choose_device(paths.locks_dir(paths.db_path()))
    what = f"{target.kind} on {target.base_model}" if target.kind == "adapter" else "full model"
    err.write(f"loading {target.label} ({what}) on {device}…\n")
    err.flush()
    child = InferenceChild(target, device, env)
    child.wait_ready()
    return child


def chat_loop(session: ChatSession, lines: IO[str], err: IO[str]) -> None:
    interactive = lines.isatty()
    err.write("type a message; /reset starts over, /exit or Ctrl-D quits\n" if interactive else "")
    while True:
        if interactive:
            err.write("you> ")
            err.flush()
        try:
            line = lines.readline()
        except KeyboardInterrupt:
            return
        if not line:
            return
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() == "/exit":
            return
        if text.strip() == "/reset":
            session.reset()
            err.write("conversation cleared\n")
            continue
        session.answer(text)


def run_chat(run_id: int, checkpoint: int | None, system: str | None, sampling: Sampling, compare: bool,
             lines: IO[str] = sys.stdin, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> None:
    """Chat until the input ends. Raises InferenceError subclasses for the CLI to report."""
    child = start_child(load_target(run_id, checkpoint), err)
    try:
        chat_loop(ChatSession(child, system, sampling, compare, out), lines, err)
    finally:
        child.close()
