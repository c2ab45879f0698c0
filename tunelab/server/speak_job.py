"""One text being spoken for an HTTP request: the synthesis on a thread, its progress and
its end handed to the event loop, and a cancel that ends the speak child.

`SpeakJob(prepared, release)` runs `inference.speak.speak_prepared` on a daemon thread (it waits on a
child process for tens of seconds; the event loop must not). Each progress update, then the
wav or the failure, is put on an asyncio queue with `call_soon_threadsafe`, so the route
reads them with `await`. `abandon()` (the client went away) sets the event the speaking polls: the child is ended
within a poll and the thread finishes with SpeakCancelled. `release` (the route's hold on
the run and on the one-at-a-time lock) is called when the thread ends, not when the
request does: the next request may start only once the child is really gone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from tunelab.inference.speak import PreparedSpeech, SpeakCancelled, SpeakProgress, speak_prepared

log = logging.getLogger("tunelab.server")


@dataclass(frozen=True)
class Finished:
    """The job's last word: the wav, or the exception that ended it."""

    wav: bytes | None = None
    error: BaseException | None = None


class SpeakJob:
    def __init__(self, prepared: PreparedSpeech, release: Callable[[], None]):
        self.prepared = prepared
        self.release = release
        self.started = time.monotonic()
        self.last = SpeakProgress("starting")
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[SpeakProgress | Finished] = asyncio.Queue()
        threading.Thread(target=self._run, name="speak", daemon=True).start()

    def _put(self, item: SpeakProgress | Finished) -> None:
        if isinstance(item, SpeakProgress):
            self.last = item
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            wav = speak_prepared(self.prepared, self._put, self._cancel)
            self._done.set()
            self._put(Finished(wav=wav))
        except SpeakCancelled as exc:
            # Said once the child has ended: how far it had come shows the work was cut short.
            last = self.last
            how_far = (f"after {last.tokens} audio tokens of at most {last.max_tokens}" if last.tokens is not None
                       else f"before it spoke ({last.message})")
            log.info("speaking with run %s was cancelled by its client %s, %.1f s in; the speak child has ended",
                     self.prepared.target.run_id, how_far, self.elapsed_s)
            self._put(Finished(error=exc))
        except BaseException as exc:  # noqa: BLE001 - every failure is the route's to report
            self._put(Finished(error=exc))
        finally:
            self._done.set()
            self.release()

    def abandon(self) -> None:
        """The client went away: end the speaking, unless it has finished already."""
        if self._done.is_set() or self._cancel.is_set():
            return
        log.info("the client of a speak request to run %s went away; ending the speaking", self.prepared.target.run_id)
        self._cancel.set()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    async def updates(self, timeout_s: float) -> AsyncIterator[SpeakProgress | Finished | None]:
        """Each progress update, then the Finished; None after `timeout_s` without news
        (the caller's moment to look whether its client is still there)."""
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout_s)
            except asyncio.TimeoutError:
                yield None
                continue
            yield item
            if isinstance(item, Finished):
                return


def progress_line(job: SpeakJob, update: SpeakProgress) -> dict[str, Any]:
    return {"type": "progress", "message": update.message, "tokens": update.tokens, "max_tokens": update.max_tokens,
            "elapsed_s": round(job.elapsed_s, 1)}
