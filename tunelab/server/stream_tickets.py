"""Stream tickets: what a browser's EventSource shows instead of the API token.

EventSource cannot send an Authorization header, and a token in a URL ends up in browser
history, proxy logs and Referer headers. So a client that holds the token (or a key) asks
`POST /api/stream-tickets` for a ticket, sending its credential in the header as every
other request does, and opens the progress stream with `?ticket=`. A ticket:
- is opaque (`tlt_` + 256 random bits) and kept here only as its SHA-256;
- names one stream path (`/api/train/progress` or `/api/runs/{id}/progress`) and opens
  nothing else, so a ticket for one run's stream never opens another run's;
- opens one stream, once (the gate burns it on first use, right or wrong), within
  `TICKET_TTL_S` of being issued; a stream once open lasts as long as its client reads;
- stands for the caller that asked for it: the token, or a key by its hash, which the gate
  looks up again when the ticket is used, so a key revoked meanwhile opens nothing. The
  stream route's role rule then runs with that caller, as for a header.
Tickets live in this server's memory: a ticket from one server is no good at another, and
a restart forgets them all (the page asks for a new one on each connection).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

TICKET_PREFIX = "tlt_"
TICKET_TTL_S = 60.0
# Unused tickets kept at most; past it the oldest go first, so a client asking for tickets
# and never using them cannot grow the server's memory.
MAX_OUTSTANDING = 10_000


@dataclass(frozen=True)
class IssuedTicket:
    """What a ticket stands for: the caller's role and key (`key_hash` None for the token)."""

    role: str
    key_name: str | None
    key_hash: str | None
    path: str
    expires_at: float


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode("utf-8")).hexdigest()


class TicketBook:
    """The tickets issued by this server and not yet used or expired."""

    def __init__(self, ttl_s: float = TICKET_TTL_S, clock: Callable[[], float] = time.monotonic,
                 max_outstanding: int = MAX_OUTSTANDING):
        self.ttl_s = ttl_s
        self._clock = clock
        self._max = max_outstanding
        self._lock = threading.Lock()
        self._issued: OrderedDict[str, IssuedTicket] = OrderedDict()

    def issue(self, *, role: str, key_name: str | None, key_hash: str | None, path: str) -> str:
        ticket = TICKET_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._prune(now)
            self._issued[_digest(ticket)] = IssuedTicket(role, key_name, key_hash, path, now + self.ttl_s)
            while len(self._issued) > self._max:
                self._issued.popitem(last=False)
        return ticket

    def redeem(self, ticket: str, path: str) -> IssuedTicket | None:
        """The ticket's caller if it opens `path` now; None otherwise. Any ticket presented is
        used up, even at the wrong path: a ticket someone tries in the wrong place is burned."""
        if not ticket.startswith(TICKET_PREFIX):
            return None
        with self._lock:
            issued = self._issued.pop(_digest(ticket), None)
        if issued is None or issued.path != path or self._clock() >= issued.expires_at:
            return None
        return issued

    def outstanding(self) -> int:
        with self._lock:
            self._prune(self._clock())
            return len(self._issued)

    def _prune(self, now: float) -> None:
        # Issued in order with one lifetime, so the expired ones are at the front.
        while self._issued:
            oldest = next(iter(self._issued.values()))
            if oldest.expires_at > now:
                break
            self._issued.popitem(last=False)
