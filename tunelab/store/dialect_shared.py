"""What both database dialects share (`dialect` for SQLite and the choice of database,
`postgres` for PostgreSQL): the errors a location or a schema raises, and how long one
attempt waits on a lock inside the database."""

from __future__ import annotations

# Short per-attempt wait inside the database; the store's retry loop waits without holding its lock.
BUSY_TIMEOUT_MS = 250


class DialectError(Exception):
    """The store's location or schema cannot be used; the store turns it into its own error."""


class BadLocation(DialectError, ValueError):
    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class DriverMissing(DialectError):
    """A PostgreSQL URL was given but psycopg is not installed."""


class SchemaTooNew(DialectError):
    def __init__(self, version: int, known: int):
        super().__init__(f"the run database has schema version {version} but this tunelab knows {known}; "
                         "upgrade tunelab or use another TUNELAB_HOME / TUNELAB_DATABASE_URL")
