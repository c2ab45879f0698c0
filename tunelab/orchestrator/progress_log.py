"""Progress lines in the server log: the first step, then at most one line every 30 s,
and the last step — enough to follow a run from the log without drowning it."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

log = logging.getLogger("tunelab.orchestrator")

LOG_INTERVAL_S = 30.0


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


class ProgressLog:
    def __init__(self, run_id: int, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.run_id = run_id
        self.interval_s = interval_s
        self.clock = clock
        self._last_logged_at: float | None = None
        self._last_step_logged: int | None = None

    def step(self, event: dict[str, Any]) -> None:
        """Maybe log one progress event (a parsed `progress` event)."""
        now = self.clock()
        total = event.get("total_steps")
        is_first = self._last_logged_at is None
        is_last = total is not None and event["step"] >= total
        if not (is_first or is_last or now - self._last_logged_at >= self.interval_s):
            return
        if event["step"] == self._last_step_logged:
            return  # an eval event for a step already logged
        self._last_logged_at = now
        self._last_step_logged = event["step"]
        log.info("run %s: step %s/%s epoch %s loss %s lr %s eta %ss", self.run_id, event["step"],
                 total if total is not None else "?", _fmt(event.get("epoch"), ".2f"),
                 _fmt(event.get("loss"), ".4f"), _fmt(event.get("learning_rate"), ".2e"),
                 _fmt(event.get("eta_seconds"), ".0f"))
