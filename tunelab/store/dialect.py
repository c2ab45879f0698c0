"""Which database the run store uses, and what differs between SQLite and PostgreSQL.

`open_location` reads the store's location: a file path or `sqlite:///` URL is SQLite
(the embedded default: `<home>/tunelab.db`), a `postgresql://` URL is a shared server
database (tunelab.store.postgres). With no location, `TUNELAB_DATABASE_URL` decides, else
the home's file. A dialect gives the store what it cannot say in shared SQL: how to
connect, how a write transaction begins, which errors mean "busy, try again", where the
schema version lives and how a message names the database without its password.

Migrations (`store.MIGRATIONS`) are applied here. A step is either a tuple of statements
written for SQLite (translated for PostgreSQL by tunelab.store.translate), or a mapping
{"sqlite": (...), "postgresql": (...)} for a step whose dialects differ; the PostgreSQL
side of such a mapping runs as written (use BIGINT, DOUBLE PRECISION and TEXT COLLATE "C"
there, as the translated steps do).

`claim` is the atomic-claim primitive: a conditional UPDATE of one row, true for the one
caller whose write changed it. Inside the store's write transaction it is atomic between
threads, processes and servers sharing the database.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any, Mapping, Sequence

from tunelab import paths
from tunelab.store.dialect_shared import BUSY_TIMEOUT_MS, BadLocation, DialectError, SchemaTooNew

ENV_URL = "TUNELAB_DATABASE_URL"
POSTGRES_SCHEMES = ("postgresql", "postgres")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def open_location(location: str | Path | None = None):
    """The dialect for a store location (see the module docstring)."""
    if location is None:
        url = os.environ.get(ENV_URL, "").strip()
        return _dialect_for(url, ENV_URL) if url else SQLiteDialect(paths.db_path())
    return _dialect_for(str(location), "database")


def _dialect_for(text: str, field: str):
    if "://" not in text:
        return SQLiteDialect(Path(text).expanduser())
    scheme, _, rest = text.partition("://")
    if scheme.lower() == "sqlite":
        if not rest.startswith("/"):
            raise BadLocation(field, "a sqlite URL needs an absolute path: sqlite:////absolute/path.db")
        return SQLiteDialect(Path(rest[1:]) if rest.startswith("//") else Path(rest))
    if scheme.lower() in POSTGRES_SCHEMES:
        from tunelab.store.postgres import PostgresDialect

        return PostgresDialect(text, field)
    raise BadLocation(field, f"{scheme}:// databases are not supported; use a file path, sqlite:////absolute/path.db "
                             "or postgresql://user:password@host/dbname")


def step_statements(step: Sequence[str] | Mapping[str, Sequence[str]], dialect: str, number: int) -> tuple[str, ...]:
    """One migration step's statements for `dialect` ("sqlite" or "postgresql")."""
    if isinstance(step, Mapping):
        if dialect not in step:
            raise DialectError(f"migration {number} has no {dialect!r} statements (it has {', '.join(step)})")
        return tuple(step[dialect])
    return tuple(step)


def migrate(dialect: Any, conn: Any, migrations: Sequence[Any]) -> None:
    """Bring the schema to `len(migrations)`; call inside the store's write transaction."""
    dialect.lock_for_migration(conn)
    # Read after taking the migration lock, so two processes opening at once migrate once.
    version = dialect.read_version(conn)
    if version > len(migrations):
        raise SchemaTooNew(version, len(migrations))
    for number, step in enumerate(migrations[version:], start=version + 1):
        translated = not isinstance(step, Mapping)
        for statement in step_statements(step, dialect.name, number):
            dialect.run_schema(conn, statement, translated=translated)
    dialect.check_references(conn)
    dialect.write_version(conn, len(migrations))


def claim(conn: Any, table: str, row_id: int, expected: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
    """Set `changes` on row `row_id` of `table` only if its columns still hold `expected`
    (None: IS NULL). True when this call changed the row. Run it inside the store's write
    transaction (Store._retry(..., write=True)): two servers racing for one row never both
    win — SQLite lets one writer in at a time, PostgreSQL's serializable transaction makes
    the loser retry and then find the row changed."""
    for name in (table, *expected, *changes):
        if not _NAME.match(name):
            raise ValueError(f"claim: {name!r} is not a plain lower-case table or column name")
    if not changes:
        raise ValueError("claim: changes must name at least one column")
    sets = ", ".join(f"{name} = ?" for name in changes)
    conditions = "".join(f" AND {name} IS NULL" if value is None else f" AND {name} = ?" for name, value in expected.items())
    params = (*changes.values(), row_id, *(v for v in expected.values() if v is not None))
    return conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?{conditions}", params).rowcount == 1


class SQLiteDialect:
    """One SQLite file in WAL mode; writers take the database lock (BEGIN IMMEDIATE)."""

    name = "sqlite"
    errors = sqlite3.DatabaseError
    retryable_errors = sqlite3.OperationalError
    integrity_errors = sqlite3.IntegrityError

    def __init__(self, path: Path):
        self.path = path
        self.location = str(path)

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Foreign keys go on in after_migrate: SQLite's table rebuild (migration 7) must run
        # without them, or dropping the old `runs` would cascade to every run's metrics.
        return conn

    @staticmethod
    def after_migrate(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA foreign_keys = ON")  # outside a transaction, where the pragma takes effect

    @staticmethod
    def check_references(conn: sqlite3.Connection) -> None:
        """After migrating with foreign keys off: prove no row points at a missing run."""
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise DialectError(f"migrating the run database left {len(broken)} rows without their run "
                               f"(first: {tuple(broken[0])}); restore the file from a backup")

    @staticmethod
    def prepare(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode = WAL").fetchone()

    @staticmethod
    def begin_write(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    @staticmethod
    def is_busy(exc: BaseException) -> bool:
        # Extended codes (e.g. SQLITE_BUSY_SNAPSHOT) keep the primary code in the low byte.
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return True
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def busy_message(self, exc: BaseException, seconds: float) -> str:
        return f"the run database {self.location} stayed locked for {seconds:.0f} s: {exc}"

    def unusable_message(self, exc: BaseException) -> str:
        return f"{self.location} cannot be used as the run database ({exc}); move it away or set TUNELAB_HOME"

    @staticmethod
    def lock_for_migration(conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE already holds the only write lock."""

    @staticmethod
    def read_version(conn: sqlite3.Connection) -> int:
        return conn.execute("PRAGMA user_version").fetchone()[0]

    @staticmethod
    def write_version(conn: sqlite3.Connection, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")

    @staticmethod
    def run_schema(conn: sqlite3.Connection, statement: str, *, translated: bool) -> None:
        conn.execute(statement)
