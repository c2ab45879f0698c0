"""Which finished runs this server is using right now, so a delete never pulls files from under them.

An export reads a run's weights for seconds to minutes, an evaluation or a spoken text
loads them, and a chat answer streams from a model loaded out of the run's folder.
Deleting the run meanwhile would end each of them with a 500; instead each holds the run
for as long as it works (`begin` and the release it returns; `held` in a route), a delete asks
first (`deleting`) and is refused with 409 naming what uses the run, and no new use
starts while a delete is under way. One lock guards both sides, so nothing slips in
between a delete's check and its removal.
"""

from __future__ import annotations

import collections
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from tunelab.server.errors import ApiError

# How a refusal names each use.
USES = {"export": "an export is being written from it", "eval": "an evaluation is running on it",
        "speak": "it is speaking a text", "chat": "a chat or completion answer is being generated with it (/v1)",
        "push": "it is being pushed to the Hugging Face Hub"}


class RunInUse(Exception):
    """The run cannot be deleted now; the message says what uses it."""


class RunBeingDeleted(Exception):
    """A use of a run that is being deleted at this moment."""


class RunUses:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._deleting: set[int] = set()

    def begin(self, run_id: int, use: str) -> Callable[[], None]:
        """Hold `run_id` for `use` (a key of USES); returns the release, which may be called more than once."""
        with self._lock:
            if run_id in self._deleting:
                raise RunBeingDeleted(f"run {run_id} is being deleted; nothing more can be done with it")
            self._uses[run_id][use] += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if released.is_set():
                    return
                released.set()
                self._uses[run_id][use] -= 1
                if not +self._uses[run_id]:
                    del self._uses[run_id]

        return release

    @contextmanager
    def deleting(self, run_id: int) -> Iterator[None]:
        """While the body runs no use of `run_id` starts; RunInUse when one is going on."""
        with self._lock:
            uses = self._uses.get(run_id)
            if uses:
                what = " and ".join(USES[use] for use in sorted(uses))
                raise RunInUse(f"run {run_id} is in use: {what}; delete it once that has finished")
            self._deleting.add(run_id)
        try:
            yield
        finally:
            with self._lock:
                self._deleting.discard(run_id)


@contextmanager
def held(request: Any, run_id: int, use: str) -> Iterator[None]:
    """The app's `RunUses` holding `run_id` for a route's `use`; 409 while the run is being deleted."""
    try:
        release = request.app.state.run_uses.begin(run_id, use)
    except RunBeingDeleted as exc:
        raise ApiError(409, "run_deleting", str(exc)) from None
    try:
        yield
    finally:
        release()
