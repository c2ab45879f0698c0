"""Time limits on reading a request, so slow clients cannot hold the server's connections.

uvicorn closes an idle keep-alive connection after a few seconds, but every byte a client
sends restarts that timer: a client trickling a request's head or body one byte at a
time holds its connection (and a task, and on the body side a route's thread) forever,
and a few hundred of them starve everyone else ("slowloris"). Two bounds stop that:

- the head (request line and headers) must arrive within `header_timeout_s()` of the
  connection opening or of the previous response ending; otherwise the connection is
  closed without an answer (`HeadDeadlineProtocol`, uvicorn's h11 protocol with a timer);
- the body must arrive within `body_timeout_s()` of the head; otherwise the request
  guard (guards.py) answers 408 and closes the connection.

TUNELAB_HEADER_TIMEOUT_S (default 10) and TUNELAB_BODY_TIMEOUT_S (default 30) change them
(docs/DEPLOY.md). A body is at most 1 MiB (guards.py), so 30 s asks for about 35 KB/s.
Responses are not limited: a progress stream stays open as long as its client reads.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from tunelab.env_seconds import positive_seconds

HEADER_TIMEOUT_ENV = "TUNELAB_HEADER_TIMEOUT_S"
BODY_TIMEOUT_ENV = "TUNELAB_BODY_TIMEOUT_S"
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0


def header_timeout_s() -> float:
    return positive_seconds(HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S)


def body_timeout_s() -> float:
    return positive_seconds(BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT_S)


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose next request head is late.

    The timer is armed when the connection opens and when a response ends; a request
    head arriving makes uvicorn start a new request cycle, which is what the timer checks
    for when it fires (uvicorn's own attributes: `cycle`, `on_response_complete`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_timeout_s = header_timeout_s()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        # Armed before uvicorn looks at pipelined data, which may start the next cycle at once.
        self._arm_head_timer()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_late, self.cycle)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self, cycle_when_armed: Any) -> None:
        self._head_timer = None
        if self.cycle is cycle_when_armed and not self.transport.is_closing():
            self.logger.info("closing a connection whose request head took over %g s (%s)", self._head_timeout_s,
                             HEADER_TIMEOUT_ENV)
            self.transport.close()
