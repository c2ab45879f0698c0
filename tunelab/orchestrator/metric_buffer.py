"""MetricBuffer: metric rows waiting to be written to the store in batches.

The orchestrator's pump adds one row per progress event and flushes when 10 rows are
waiting or the oldest has waited 2 s (TUNELAB_METRICS_FLUSH_S), whichever comes first:
the database sees one transaction per batch instead of one per step, and on a model
whose steps take minutes no metric lives only in memory for longer than the interval
(the pump checks `due()` between events, so the time rule holds without new events). During a run
those flushes happen on the buffer's own thread (`flush_in_background`): a database
locked by another process then delays only the writes, never the pump, the live
stream or a status request. A flush that fails (database locked past the retry
window) puts its batch back for the next try; the buffer is capped so a database that
never comes back cannot eat all memory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from tunelab.store import Store

log = logging.getLogger(__name__)

FLUSH_AT = 10
FLUSH_AFTER_S = 2.0
FLUSH_AFTER_ENV = "TUNELAB_METRICS_FLUSH_S"
MAX_PENDING = 100_000


def default_flush_after_s() -> float:
    try:
        value = float(os.environ.get(FLUSH_AFTER_ENV, FLUSH_AFTER_S))
    except ValueError:
        return FLUSH_AFTER_S
    return value if value >= 0 else FLUSH_AFTER_S  # NaN and negatives fall back too


class MetricBuffer:
    def __init__(self, flush_at: int = FLUSH_AT, max_pending: int = MAX_PENDING, flush_after_s: float | None = None):
        if flush_at < 1 or max_pending < flush_at:
            raise ValueError("need 1 <= flush_at <= max_pending")
        self.flush_at = flush_at
        self.max_pending = max_pending
        self.flush_after_s = default_flush_after_s() if flush_after_s is None else flush_after_s
        self._rows: deque[dict[str, Any]] = deque()
        self._oldest_at: float | None = None  # monotonic time the oldest waiting row arrived
        self.dropped = 0  # rows lost to the cap, over the buffer's life
        self._warned = False
        self._lock = threading.Lock()
        # Serialises flushes so two batches for the same step cannot land out of order.
        self._flush_lock = threading.Lock()
        self._flusher: threading.Thread | None = None  # the background flush, while one runs

    def add(self, row: Mapping[str, Any]) -> bool:
        """Queue one row; True when the caller should flush (enough rows, or old enough)."""
        now = time.monotonic()
        with self._lock:
            if not self._rows:
                self._oldest_at = now
            self._rows.append(dict(row))
            self._drop_overflow()
            return len(self._rows) >= self.flush_at or now - self._oldest_at >= self.flush_after_s

    def due(self) -> bool:
        """True when rows are waiting and the oldest has waited the flush interval."""
        with self._lock:
            return self._is_old()

    def pending(self) -> int:
        with self._lock:
            return len(self._rows)

    def flush(self, store: "Store", run_id: int) -> int:
        """Write every pending row; returns how many were written. On failure the batch
        goes back in front of rows added meanwhile and the error propagates."""
        with self._flush_lock:
            with self._lock:
                batch = list(self._rows)
                self._rows.clear()
                oldest_at, self._oldest_at = self._oldest_at, None
            if not batch:
                return 0
            try:
                store.add_metrics(run_id, batch)
            except BaseException:
                with self._lock:
                    self._rows.extendleft(reversed(batch))
                    # The batch is older than anything added meanwhile; a failed flush
                    # restarts its clock so a locked database is not retried on every event.
                    self._oldest_at = time.monotonic() if oldest_at is not None else None
                    self._drop_overflow()
                raise
            with self._lock:
                self._warned = False
            return len(batch)

    def flush_in_background(self, store: "Store", run_id: int) -> None:
        """Flush on a thread of the buffer's own and return at once. The thread keeps going
        while a batch's worth of rows is pending; a failure is logged and the rows stay for
        the next call (or the final, synchronous `flush`, which waits for this one)."""
        with self._lock:
            if self._flusher is not None:
                return  # the running flusher checks for new rows before it stops
            self._flusher = threading.Thread(target=self._flush_while_full, args=(store, run_id),
                                             name=f"tunelab-metrics-{run_id}", daemon=True)
            self._flusher.start()

    def _flush_while_full(self, store: "Store", run_id: int) -> None:
        try:
            while True:
                with self._lock:
                    if len(self._rows) < self.flush_at and not self._is_old():
                        self._flusher = None
                        return
                self.flush(store, run_id)
        except Exception as exc:
            with self._lock:
                self._flusher = None
            log.warning("run %s: could not store metrics yet (%s); they stay buffered", run_id, exc)

    def _is_old(self) -> bool:
        return bool(self._rows) and time.monotonic() - self._oldest_at >= self.flush_after_s

    def _drop_overflow(self) -> None:
        excess = len(self._rows) - self.max_pending
        if excess > 0:
            for _ in range(excess):
                self._rows.popleft()
            self.dropped += excess
            # Once per outage, not once per step: the log must stay readable.
            if not self._warned:
                self._warned = True
                log.warning("metric buffer full (%d rows): dropping the oldest unsaved rows until the database accepts writes", self.max_pending)
