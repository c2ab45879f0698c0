"""MetricBuffer: metric rows waiting to be written to the store in batches.

The orchestrator's pump adds one row per progress event and flushes every few rows,
so the database sees one transaction per batch instead of one per step. During a run
those flushes happen on the buffer's own thread (`flush_in_background`): a database
locked by another process then delays only the writes, never the pump, the live
stream or a status request. A flush that fails (database locked past the retry
window) puts its batch back for the next try; the buffer is capped so a database that
never comes back cannot eat all memory.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from tunelab.store import Store

log = logging.getLogger(__name__)

FLUSH_AT = 10
MAX_PENDING = 100_000


class MetricBuffer:
    def __init__(self, flush_at: int = FLUSH_AT, max_pending: int = MAX_PENDING):
        if flush_at < 1 or max_pending < flush_at:
            raise ValueError("need 1 <= flush_at <= max_pending")
        self.flush_at = flush_at
        self.max_pending = max_pending
        self._rows: deque[dict[str, Any]] = deque()
        self.dropped = 0  # rows lost to the cap, over the buffer's life
        self._warned = False
        self._lock = threading.Lock()
        # Serialises flushes so two batches for the same step cannot land out of order.
        self._flush_lock = threading.Lock()
        self._flusher: threading.Thread | None = None  # the background flush, while one runs

    def add(self, row: Mapping[str, Any]) -> bool:
        """Queue one row; True when enough rows are pending that the caller should flush."""
        with self._lock:
            self._rows.append(dict(row))
            self._drop_overflow()
            return len(self._rows) >= self.flush_at

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
            if not batch:
                return 0
            try:
                store.add_metrics(run_id, batch)
            except BaseException:
                with self._lock:
                    self._rows.extendleft(reversed(batch))
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
                    if len(self._rows) < self.flush_at:
                        self._flusher = None
                        return
                self.flush(store, run_id)
        except Exception as exc:
            with self._lock:
                self._flusher = None
            log.warning("run %s: could not store metrics yet (%s); they stay buffered", run_id, exc)

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
