"""StopWatchdog: ends a worker that does not exit when it should.

Three deadlines, whichever comes first:
- a short grace after the worker's last event (`complete`/`error`): a worker that
  finished its work but hangs on the way out (default 15 s, TUNELAB_STOP_GRACE_S);
- an absolute cap after a stop request: 600 s for stop-and-save, 120 s for a cancel
  (TUNELAB_STOP_SAVE_CAP_S, TUNELAB_STOP_CANCEL_CAP_S). A later cancel tightens a
  pending save to the cancel cap, because a deadline only ever moves earlier;
- the shutdown deadline: a process told to end (SIGTERM) gives the stop-and-save only
  part of its grace period, so the run is recorded before a supervisor's SIGKILL. A
  run ended by this deadline carries a failure (recorded `error`, resumable from its
  last valid checkpoint) rather than "the save did not land".
When one passes, `on_expire(reason, failure)` runs once, on the watchdog's own thread. Each run
owns its own watchdog, bound to that run alone, so it can never touch a newer run;
`disarm()` at finalize makes it inert.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional

log = logging.getLogger("tunelab.orchestrator")

GRACE_ENV, SAVE_CAP_ENV, CANCEL_CAP_ENV = "TUNELAB_STOP_GRACE_S", "TUNELAB_STOP_SAVE_CAP_S", "TUNELAB_STOP_CANCEL_CAP_S"
DEFAULT_GRACE_S, DEFAULT_SAVE_CAP_S, DEFAULT_CANCEL_CAP_S = 15.0, 600.0, 120.0
# How long a supervisor waits between SIGTERM and SIGKILL, as far as tunelab knows:
# systemd's and Kubernetes' defaults are 90 s and 30 s, docker stop's 10 s; 20 s fits
# most, and docs/DEPLOY.md shows how to make both sides agree.
SHUTDOWN_GRACE_ENV, DEFAULT_SHUTDOWN_GRACE_S = "TUNELAB_SHUTDOWN_GRACE_S", 20.0
# Of that grace, the part kept back for ending a late worker and recording the run.
SHUTDOWN_RESERVE_S = 5.0


def shutdown_grace_s() -> float:
    return seconds_from_env(SHUTDOWN_GRACE_ENV, DEFAULT_SHUTDOWN_GRACE_S)


def save_budget_s(grace_s: float) -> float:
    """The time a run gets to stop and save when the process must end within `grace_s`."""
    return max(grace_s - min(SHUTDOWN_RESERVE_S, grace_s / 4), 0.0)


def seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also catches NaN
        log.warning("%s=%r is not a number of seconds >= 0; using %s", name, raw, default)
        return default
    return value


class StopWatchdog:
    def __init__(self, run_id: int, on_expire: Callable[[str, Optional[str]], None]):
        self.run_id = run_id
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._reason = ""
        self._failure: str | None = None
        self._disarmed = False
        self._thread: threading.Thread | None = None

    def after_last_event(self) -> None:
        grace = seconds_from_env(GRACE_ENV, DEFAULT_GRACE_S)
        self._arm(grace, f"the worker had not exited {grace:g} s after its last event")

    def after_stop_request(self, save: bool) -> None:
        if save:
            cap = seconds_from_env(SAVE_CAP_ENV, DEFAULT_SAVE_CAP_S)
            self._arm(cap, f"the worker had not stopped and saved {cap:g} s after the request")
        else:
            cap = seconds_from_env(CANCEL_CAP_ENV, DEFAULT_CANCEL_CAP_S)
            self._arm(cap, f"the worker had not stopped {cap:g} s after the cancel")

    def shutdown_deadline(self, seconds: float) -> None:
        self._arm(seconds, f"the run had not stopped and saved {seconds:g} s after the shutdown signal",
                  failure=f"tunelab was told to shut down and the run could not save within {seconds:g} s; "
                          "resume it from its last valid checkpoint")

    def disarm(self) -> None:
        with self._cond:
            self._disarmed = True
            self._cond.notify_all()

    def _arm(self, seconds: float, reason: str, failure: str | None = None) -> None:
        with self._cond:
            if self._disarmed:
                return
            deadline = time.monotonic() + seconds
            if self._deadline is None or deadline < self._deadline:
                self._deadline, self._reason, self._failure = deadline, reason, failure
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name=f"tunelab-watchdog-{self.run_id}", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._disarmed:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    self._disarmed = True  # fire once
                    reason, failure = self._reason, self._failure
                    break
                self._cond.wait(remaining)
            else:
                return
        log.warning("run %s: %s; ending it", self.run_id, reason)
        self._on_expire(reason, failure)
