"""The run store on PostgreSQL: psycopg 3 behind the sqlite3 interface the store uses.

The store's methods call `conn.execute(sql, params)`, `executemany`, `rowcount`,
`lastrowid`, `in_transaction` and read rows by position or column name (`dict(row)`), as
sqlite3 gives them. `PgConnection` gives the same over one psycopg connection, rewriting
each SQLite-written statement (tunelab.store.translate) and returning the same Python types
(ids and counts as int, REAL columns as float; a NUMERIC result, e.g. SUM of integers, as
int or float, never Decimal).

Same semantics as SQLite:
- a write transaction is SERIALIZABLE, so a read-then-write (a claim, "is this name
  taken?") behaves as under SQLite's single writer; a conflicting writer gets a
  serialization failure, which the store retries like SQLite's "database is locked";
- a lock held by someone else is waited on only `BUSY_TIMEOUT_MS` per attempt
  (lock_timeout), then retried with the store's backoff until its retry window ends;
- a write statement inside a transaction runs in a savepoint, so a caught error (a
  duplicate start request id) leaves the transaction usable, as in SQLite;
- a lost connection (server restart, network) is retried too: the next attempt opens a
  new session. A COMMIT lost in flight may have been applied; the store's unique start
  request ids make a repeated create_run visible as DuplicateStartRequest.
- the schema version lives in the one-row table `tunelab_schema_version`; migrations
  take an advisory lock so two servers starting at once migrate once.

The password in the URL (or its `password=` parameter) is never shown: `location` and every
message the store makes from a driver error have it replaced by `***`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence
from urllib.parse import unquote

from tunelab import paths
from tunelab.store.dialect_shared import BUSY_TIMEOUT_MS, BadLocation, DriverMissing
from tunelab.store.translate import to_postgres

INSTALL_HINT = "install it with: pip install 'tunelab[postgres]' (psycopg 3 with its binary wheel)"
VERSION_TABLE = "tunelab_schema_version"
# One advisory lock key for "migrating tunelab's schema" ("tunelab" in ASCII).
MIGRATION_LOCK_KEY = 0x74756E656C6162
# Serialization failure, deadlock, lock not available (lock_timeout), and the server
# shutting down or starting up under us: all pass, so the attempt is repeated.
RETRY_STATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})
_WRITES = ("INSERT", "UPDATE", "DELETE")
# What a server says at connect time about a URL that names a wrong user, password or database.
_WRONG_URL = ("authentication failed", "does not exist", "no password supplied", "no pg_hba.conf entry")


def redact(url: str) -> str:
    """`url` with its password (in the user part or a password= parameter) as ***."""
    scheme, sep, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    path, question, query = tail.partition("?")
    if question:
        query = "&".join("password=***" if part.lower().startswith("password=") else part for part in query.split("&"))
    return f"{scheme}{sep}{authority}{slash}{path}{question}{query}"


def _url_password(url: str) -> str:
    """The password as written in the URL's user part or password= parameter ('' if none)."""
    authority, _, tail = url.partition("://")[2].partition("/")
    userinfo, at, _ = authority.rpartition("@")
    if at and ":" in userinfo:
        return userinfo.split(":", 1)[1]
    for part in tail.partition("?")[2].split("&"):
        if part.lower().startswith("password="):
            return part.split("=", 1)[1]
    return ""


class Row(tuple):
    """A result row as sqlite3.Row gives it: by position, by column name, and dict(row)."""

    def __new__(cls, values: Iterable[Any], names: tuple[str, ...], index: dict[str, int]) -> "Row":
        row = super().__new__(cls, values)
        row._names, row._index = names, index
        return row

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)


def _row_factory(cursor: Any):
    names = tuple(column.name for column in cursor.description or ())
    index = {name: i for i, name in enumerate(names)}
    return lambda values: Row(values, names, index)


def _params(params: Sequence[Any] | None) -> tuple[Any, ...]:
    # SQLite stores True as 1 in an INTEGER column; PostgreSQL refuses a boolean there.
    return tuple(int(p) if isinstance(p, bool) else p for p in (params or ()))


class PgCursor:
    """The result of one statement: rows, rowcount and (after an INSERT) lastrowid."""

    def __init__(self, cursor: Any, raw: Any):
        self._cursor, self._raw = cursor, raw

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int:
        # The id the INSERT just drew from its identity sequence, in this session.
        return int(self._raw.execute("SELECT lastval()").fetchone()[0])

    def fetchone(self) -> Row | None:
        return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Row]:
        return self._cursor.fetchall() if self._cursor.description else []

    def __iter__(self):
        return iter(self.fetchall())


class PgConnection:
    """sqlite3.Connection's interface over a psycopg connection that is opened again
    when it was lost (the store retries the attempt that found it lost)."""

    def __init__(self, dialect: "PostgresDialect"):
        self._dialect = dialect
        self._raw: Any = None

    def _live(self) -> Any:
        if self._raw is None or self._raw.closed or self._raw.broken:
            if self._raw is not None:
                self._raw.close()
            self._raw = None
            self._raw = self._dialect.open_session()
        return self._raw

    @property
    def in_transaction(self) -> bool:
        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            return False
        status = self._dialect.psycopg.pq.TransactionStatus
        return raw.info.transaction_status in (status.INTRANS, status.INERROR)

    def execute(self, sql: str, params: Sequence[Any] | None = ()) -> PgCursor:
        raw = self._live()
        args = _params(params)
        query = to_postgres(sql, bool(args))
        if self.in_transaction and sql.lstrip().upper().startswith(_WRITES):
            return PgCursor(self._in_savepoint(lambda: raw.execute(query, args or None)), raw)
        return PgCursor(raw.execute(query, args or None), raw)

    def execute_native(self, sql: str) -> PgCursor:
        """A statement written for PostgreSQL, sent as it is (no parameters)."""
        raw = self._live()
        return PgCursor(raw.execute(sql), raw)

    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any]]) -> PgCursor:
        raw = self._live()
        rows = [_params(p) for p in seq_of_params]
        cursor = raw.cursor()
        if rows:
            query = to_postgres(sql, True)
            if self.in_transaction:
                self._in_savepoint(lambda: cursor.executemany(query, rows))
            else:
                cursor.executemany(query, rows)
        return PgCursor(cursor, raw)

    def _in_savepoint(self, work):
        # PostgreSQL aborts the whole transaction on an error; SQLite only the statement.
        raw = self._raw
        raw.execute("SAVEPOINT tunelab_statement")
        try:
            result = work()
        except self._dialect.psycopg.Error:
            if not raw.broken and raw.info.transaction_status == self._dialect.psycopg.pq.TransactionStatus.INERROR:
                raw.execute("ROLLBACK TO SAVEPOINT tunelab_statement")
            raise
        raw.execute("RELEASE SAVEPOINT tunelab_statement")
        return result

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None


class PostgresDialect:
    """A shared PostgreSQL database named by a postgresql:// URL."""

    name = "postgresql"

    def __init__(self, url: str, field: str):
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise DriverMissing(f"{field} names a PostgreSQL database but psycopg is not installed; {INSTALL_HINT}") from None
        self.psycopg = psycopg
        self._url = url
        self.location = redact(url)
        self._password = _url_password(url)
        try:
            given = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise BadLocation(field, f"is not a usable PostgreSQL URL ({self.scrub(exc)}); "
                                     "the form is postgresql://user:password@host:port/dbname") from None
        self._password = self._password or str(given.get("password") or "")
        # Defaults the URL may override: a name in pg_stat_activity, and no endless connect.
        self._defaults = {k: v for k, v in (("application_name", "tunelab"), ("connect_timeout", 10)) if k not in given}
        # Machine-local things (run and device locks) stay in the tunelab home.
        self.path = paths.db_path()
        self.errors = psycopg.Error
        self.retryable_errors = psycopg.OperationalError
        self.integrity_errors = psycopg.IntegrityError

    def scrub(self, text: Any) -> str:
        """`text` with this URL's password (as written, or decoded) replaced by ***."""
        text = str(text).replace(self._url, self.location)
        for secret in filter(None, {self._password, unquote(self._password)}):
            text = text.replace(secret, "***")
        return text

    def open_session(self) -> Any:
        psycopg = self.psycopg
        raw = psycopg.connect(self._url, autocommit=True, prepare_threshold=None, row_factory=_row_factory,
                              **self._defaults)
        try:
            raw.adapters.register_loader("numeric", _numeric_loader(psycopg))
            raw.execute(f"SET lock_timeout = {BUSY_TIMEOUT_MS}")
        except BaseException:
            raw.close()
            raise
        return raw

    def connect(self) -> PgConnection:
        # Opened on first use, inside the store's retry loop: a server still starting is waited for.
        return PgConnection(self)

    @staticmethod
    def prepare(conn: PgConnection) -> None:
        conn.execute("SELECT 1").fetchone()

    @staticmethod
    def after_migrate(conn: PgConnection) -> None:
        """PostgreSQL checks foreign keys always; its migrations change tables in place."""

    @staticmethod
    def check_references(conn: PgConnection) -> None:
        """Nothing to prove: no PostgreSQL migration turns the foreign keys off."""

    @staticmethod
    def begin_write(conn: PgConnection) -> None:
        conn.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")

    def is_busy(self, exc: BaseException) -> bool:
        state = getattr(exc, "sqlstate", None)
        if state is None:
            # No answer from the server: the connection was refused or lost — unless the
            # server answered that the URL is wrong, which waiting does not mend.
            text = str(exc)
            return isinstance(exc, self.psycopg.OperationalError) and not any(m in text for m in _WRONG_URL)
        return state in RETRY_STATES or state.startswith("08")

    def busy_message(self, exc: BaseException, seconds: float) -> str:
        state = getattr(exc, "sqlstate", None)
        what = "stayed locked" if state in ("40001", "40P01", "55P03") else "was unreachable"
        return f"the run database {self.location} {what} for {seconds:.0f} s: {self.scrub(exc)}"

    def unusable_message(self, exc: BaseException) -> str:
        return (f"{self.location} cannot be used as the run database ({self.scrub(exc)}); "
                "check TUNELAB_DATABASE_URL (user, password, host, database name)")

    @staticmethod
    def lock_for_migration(conn: PgConnection) -> None:
        # Read committed, so that after waiting for the lock the next statements see what
        # the server that held it committed (a serializable snapshot would not).
        conn.execute_native("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.execute_native(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
        conn.execute_native(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
                            "one_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one_row), version BIGINT NOT NULL)")

    @staticmethod
    def read_version(conn: PgConnection) -> int:
        if conn.execute_native(f"SELECT to_regclass('{VERSION_TABLE}')").fetchone()[0] is None:
            return 0
        row = conn.execute_native(f"SELECT version FROM {VERSION_TABLE}").fetchone()
        return int(row[0]) if row is not None else 0

    @staticmethod
    def write_version(conn: PgConnection, version: int) -> None:
        conn.execute_native(f"INSERT INTO {VERSION_TABLE} (one_row, version) VALUES (TRUE, {int(version)}) "
                            "ON CONFLICT (one_row) DO UPDATE SET version = excluded.version")

    @staticmethod
    def run_schema(conn: PgConnection, statement: str, *, translated: bool) -> None:
        if translated:
            conn.execute(statement)
        else:
            conn.execute_native(statement)


def _numeric_loader(psycopg: Any):
    class NumericLoader(psycopg.adapt.Loader):
        """NUMERIC as int when whole, else float: what SQLite returns for the same query."""

        def load(self, data: Any) -> Any:
            text = bytes(data).decode()
            try:
                return int(text)
            except ValueError:
                return float(text)

    return NumericLoader
