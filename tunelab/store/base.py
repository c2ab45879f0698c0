"""The run store's connection: opening and migrating the database, the lock and the retried transaction.

One connection is shared by the orchestrator's pump and watchdog threads and the server's
request threads, so it is guarded by a lock, and every call is retried while another
process holds the database ("database is locked"/"busy"). tunelab.store.dialect says what
differs between SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from tunelab.store import dialect as store_dialect
from tunelab.store.errors import InvalidValue, RunNotFound, StoreBusy, StoreError
from tunelab.store.schema import MIGRATIONS

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_RETRY_SECONDS = 10.0
BUSY_TIMEOUT_MS = store_dialect.BUSY_TIMEOUT_MS


class StoreBase:
    """The plumbing every part of Store uses (see docs/ARCHITECTURE.md "Store")."""

    def __init__(self, location: str | Path | None = None, *, retry_seconds: float = DEFAULT_RETRY_SECONDS):
        try:
            self._dialect = store_dialect.open_location(location)
        except store_dialect.BadLocation as exc:
            raise InvalidValue(exc.field, exc.reason) from None
        except store_dialect.DialectError as exc:  # psycopg missing
            raise StoreError(str(exc)) from None
        # `path`: where machine-local things go (paths.locks_dir); `location`: the database, safe to show.
        self.path, self.location = self._dialect.path, self._dialect.location
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.retry_seconds = retry_seconds
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._dialect.connect()
            self._retry(self._dialect.prepare, write=False)
            self._retry(self._migrate, write=True)
            # Foreign keys go on only after migrating: a table rebuild must not cascade (see QUEUE_MIGRATION).
            self._dialect.after_migrate(self._conn)
        except store_dialect.DialectError as exc:  # a schema too new, or a migration that broke references
            self.close()
            raise StoreError(str(exc)) from None
        except self._dialect.errors as exc:
            self.close()
            raise StoreError(self._dialect.unusable_message(exc)) from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> StoreBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retry(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run `work` (in one IMMEDIATE transaction when writing), retrying with backoff
        while the database is locked; the thread lock is released between attempts."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.02
        while True:
            with self._lock:
                conn = self._conn
                if conn is None:
                    raise StoreError("the store is closed")
                try:
                    if write:
                        self._dialect.begin_write(conn)
                    result = work(conn)
                    if write:
                        conn.execute("COMMIT")
                    return result
                except self._dialect.retryable_errors as exc:
                    self._rollback(conn)
                    if not self._dialect.is_busy(exc):
                        raise
                    if time.monotonic() + delay > deadline:
                        raise StoreBusy(self._dialect.busy_message(exc, self.retry_seconds)) from exc
                except BaseException:
                    self._rollback(conn)
                    raise
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.5)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except Exception:  # the driver's error, either dialect
                log.warning("rollback failed", exc_info=True)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        store_dialect.migrate(self._dialect, conn, MIGRATIONS)

    def schema_version(self) -> int:
        return self._retry(self._dialect.read_version, write=False)

    @staticmethod
    def _require_run(conn: sqlite3.Connection, run_id: int) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return row

    def _update_run(self, run_id: int, sql: str, params: tuple[Any, ...]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            if conn.execute(sql, params + (run_id,)).rowcount == 0:
                raise RunNotFound(run_id)

        self._retry(work, write=True)
