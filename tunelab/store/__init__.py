"""The run history: runs and their metrics in SQLite (one file, the default) or PostgreSQL (SPEC §5).

This is the only module that speaks SQL. Every statement lives here and the schema grows
through the ordered `MIGRATIONS` (applied at open, tracked in the database's schema version).
`Store` takes a file path, a `sqlite:///` URL or a `postgresql://` URL (with none,
TUNELAB_DATABASE_URL, else the home's SQLite file). Statements are written for SQLite;
tunelab.store.dialect holds what differs (connecting, BEGIN, busy errors, the version) and
on PostgreSQL `conn` is tunelab.store.postgres's adapter, with sqlite3's interface, that
rewrites each statement. The store is shared by the orchestrator's pump and watchdog threads and the
server's request threads, so one connection is guarded by a lock, and every call is
retried while another process holds the database ("database is locked"/"busy").

Timestamps are Unix seconds (floats). Run rows come back as dicts whose `config` is the
stored (sanitized) config, `loss_sparkline` a list of floats and flags real booleans;
`modality` is None until the run's worker has said what it trains on.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from tunelab.store import dialect as store_dialect
from tunelab.events import DEFAULT_MODALITY, MODALITIES, clean_extra, finite_or_none
from tunelab.text import char_name, first_unsafe_char

log = logging.getLogger(__name__)
T = TypeVar("T")

RUN_STATUSES = ("queued", "running", "completed", "stopped", "error", "cancelled")
# What finalize_run may write: a `running` row ends in one of these; a queued one is cancelled (cancel_queued).
FINAL_STATUSES = ("completed", "stopped", "error")
METRIC_FIELDS = ("loss", "learning_rate", "grad_norm", "eval_loss", "epoch", "num_tokens", "elapsed_seconds")
# Keys that hold secrets anywhere in a config; storing one is a bug in the caller.
SECRET_KEYS = frozenset(
    {"hf_token", "wandb_token", "access_key_id", "secret_access_key", "session_token", "password", "token", "api_key"}
)
# Config mappings whose keys are the dataset's own column and role names, not settings:
# a chat role may well be called "token" or "password".
DATA_NAME_MAPPINGS = frozenset({"column_mapping", "role_mapping"})
ORPHAN_MESSAGE = "server restarted during training"
NAME_MAX_CHARS = 200
SPARKLINE_POINTS = 50
MAX_LIST_LIMIT = 10_000
DEFAULT_RETRY_SECONDS = 10.0
BUSY_TIMEOUT_MS = store_dialect.BUSY_TIMEOUT_MS

# Migration 6: named API keys (tunelab.keys), kept by name, role and the SHA-256 of the
# secret only; and which key started each run (`owner`, NULL for the home's token and the CLI).
# A revoked key keeps its row, so its name is never given to someone else's runs.
KEYS_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE api_keys (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
        secret_sha256 TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL,
        revoked_at REAL
    )""",
    "ALTER TABLE runs ADD COLUMN owner TEXT",
)

# Migration 7: the run queue (tunelab/orchestrator/scheduler.py). Runs may wait ('queued') and a
# queued run may be withdrawn ('cancelled'); each queued run has a priority and a position key,
# the devices it asked for, and once claimed the devices it got and the server that claimed it.
QUEUE_COLUMNS = (
    ("queue_priority", "INTEGER NOT NULL DEFAULT 0"),
    ("queue_order", "REAL"),  # position key among equal priorities; move_queued renumbers
    ("device_request", "TEXT"),  # JSON: {"num_gpus": n} or {"gpu_ids": [...]}
    ("devices", "TEXT"),  # JSON list of the device ids the run got at claim ("cpu", "gpu-0", ...)
    ("claimed_by", "TEXT"),  # the instance id of the server that claimed it
)
STATUS_CHECK = "CHECK (status IN ('queued', 'running', 'completed', 'stopped', 'error', 'cancelled'))"
# Every column of runs after migration 6, in table order: what the rebuild copies.
RUNS_COLUMNS_6 = (
    "id, status, model_name, dataset_name, display_name, config_json, started_at, ended_at, total_steps, final_step,"
    " final_loss, duration_seconds, output_dir, error_message, loss_sparkline, cancel_requested, resume_blocked,"
    " resumed_from_run_id, resumed_by_run_id, start_request_id, owner_lock, owner_pid, owner_started_at, modality, owner"
)
# SQLite cannot change a CHECK in place: its documented procedure rebuilds the table (new
# table, copy, drop, rename, indexes) with foreign keys off, which Store.__init__ ensures by
# migrating before it turns them on; otherwise dropping `runs` would cascade to the metrics.
# The AUTOINCREMENT high-water mark is carried over so a deleted run's id is never reused.
QUEUE_MIGRATION_SQLITE: tuple[str, ...] = (
    f"""CREATE TABLE runs_new (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        status TEXT NOT NULL {STATUS_CHECK},
        model_name TEXT NOT NULL,
        dataset_name TEXT NOT NULL DEFAULT '',
        display_name TEXT,
        config_json TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        total_steps INTEGER,
        final_step INTEGER,
        final_loss REAL,
        duration_seconds REAL,
        output_dir TEXT,
        error_message TEXT,
        loss_sparkline TEXT NOT NULL DEFAULT '[]',
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        resume_blocked INTEGER NOT NULL DEFAULT 0,
        resumed_from_run_id INTEGER,
        resumed_by_run_id INTEGER,
        start_request_id TEXT,
        owner_lock TEXT,
        owner_pid INTEGER,
        owner_started_at REAL,
        modality TEXT,
        owner TEXT,
        {", ".join(f"{name} {kind}" for name, kind in QUEUE_COLUMNS)}
    )""",
    f"INSERT INTO runs_new ({RUNS_COLUMNS_6}) SELECT {RUNS_COLUMNS_6} FROM runs",
    "DELETE FROM sqlite_sequence WHERE name = 'runs_new'",
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'runs_new', seq FROM sqlite_sequence WHERE name = 'runs'",
    "DROP TABLE runs",
    "ALTER TABLE runs_new RENAME TO runs",
    "CREATE UNIQUE INDEX runs_by_start_request ON runs (start_request_id) WHERE start_request_id IS NOT NULL",
    "CREATE INDEX runs_by_status ON runs (status)",
)
QUEUE_MIGRATION: dict[str, tuple[str, ...]] = {
    "sqlite": QUEUE_MIGRATION_SQLITE,
    "postgresql": (
        "ALTER TABLE runs DROP CONSTRAINT runs_status_check",
        f"ALTER TABLE runs ADD CONSTRAINT runs_status_check {STATUS_CHECK}",
        *(f"ALTER TABLE runs ADD COLUMN {name} {kind.replace('REAL', 'DOUBLE PRECISION')}" for name, kind in QUEUE_COLUMNS),
    ),
}

# A step: statements written for SQLite (translated for PostgreSQL), or a mapping
# {"sqlite": (...), "postgresql": (...)} where the dialects differ (see tunelab.store.dialect).
MIGRATIONS: tuple[tuple[str, ...] | Mapping[str, tuple[str, ...]], ...] = (
    (  # 1: runs and metrics
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'stopped', 'error')),
            model_name TEXT NOT NULL,
            dataset_name TEXT NOT NULL DEFAULT '',
            display_name TEXT,
            config_json TEXT NOT NULL,
            started_at REAL NOT NULL,
            ended_at REAL,
            total_steps INTEGER,
            final_step INTEGER,
            final_loss REAL,
            duration_seconds REAL,
            output_dir TEXT,
            error_message TEXT,
            loss_sparkline TEXT NOT NULL DEFAULT '[]',
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            resume_blocked INTEGER NOT NULL DEFAULT 0,
            resumed_from_run_id INTEGER,
            resumed_by_run_id INTEGER,
            start_request_id TEXT
        )""",
        "CREATE UNIQUE INDEX runs_by_start_request ON runs (start_request_id) WHERE start_request_id IS NOT NULL",
        "CREATE INDEX runs_by_status ON runs (status)",
        """CREATE TABLE metrics (
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            loss REAL,
            learning_rate REAL,
            grad_norm REAL,
            eval_loss REAL,
            epoch REAL,
            num_tokens INTEGER,
            elapsed_seconds REAL,
            PRIMARY KEY (run_id, step)
        ) WITHOUT ROWID""",
    ),
    (  # 2: who owns a running run (see tunelab/orchestrator/ownership.py)
        "ALTER TABLE runs ADD COLUMN owner_lock TEXT",
        "ALTER TABLE runs ADD COLUMN owner_pid INTEGER",
        "ALTER TABLE runs ADD COLUMN owner_started_at REAL",
    ),
    (  # 3: what a run trains on (events.MODALITIES); NULL until its worker says, older runs were text
        "ALTER TABLE runs ADD COLUMN modality TEXT",
        f"UPDATE runs SET modality = '{DEFAULT_MODALITY}'",
    ),
    (  # 4: the numbers a method logs beyond the fixed metric columns (events.clean_extra), per step
        """CREATE TABLE metric_extras (
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (run_id, name, step)
        ) WITHOUT ROWID""",
    ),
    (  # 5: evaluations of a finished run (tunelab/eval_store.py): perplexity, generations, lm_eval
        """CREATE TABLE run_evals (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            created_at REAL NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('perplexity', 'generations', 'lm_eval')),
            payload TEXT NOT NULL
        )""",
        "CREATE INDEX run_evals_by_run ON run_evals (run_id, id)",
    ),
    KEYS_MIGRATION,  # 6: named API keys and each run's owner
    QUEUE_MIGRATION,  # 7: queued and cancelled runs, priorities, device requests and claims
)

# A later report for a step fills in what an earlier one lacked and never erases a value.
UPSERT_METRIC = (
    f"INSERT INTO metrics (run_id, step, {', '.join(METRIC_FIELDS)}) "
    f"VALUES (?, ?, {', '.join('?' for _ in METRIC_FIELDS)}) "
    "ON CONFLICT (run_id, step) DO UPDATE SET "
    + ", ".join(f"{f} = COALESCE(excluded.{f}, metrics.{f})" for f in METRIC_FIELDS)
)

UPSERT_EXTRA = (
    "INSERT INTO metric_extras (run_id, step, name, value) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value"
)


# A run on one machine: claimed by one of its servers (claimed_by = "host:pid:random", see
# Orchestrator.instance_id) or by none (a `tunelab train` or a row from before the queue).
ON_HOST = "(claimed_by IS NULL OR substr(claimed_by, 1, ?) = ?)"


def _host_params(host: str) -> tuple[int, str]:
    return len(host) + 1, f"{host}:"


class StoreError(Exception):
    """Base class for everything the store refuses or cannot do."""


class StoreBusy(StoreError):
    """The database stayed locked by someone else for the whole retry window."""


class RunNotFound(StoreError, LookupError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} does not exist")


class RunIsRunning(StoreError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} is still running; stop it before deleting it")


class AlreadyResumed(StoreError):
    def __init__(self, run_id: int, by_run_id: int):
        self.run_id, self.by_run_id = run_id, by_run_id
        super().__init__(f"run {run_id} was already resumed by run {by_run_id}; resume run {by_run_id} instead")


class RunNotQueued(StoreError):
    def __init__(self, run_id: int, status: str):
        self.run_id, self.status = run_id, status
        super().__init__(f"run {run_id} is {status}, not queued; only a queued run can be moved or given a priority")


class DuplicateStartRequest(StoreError):
    def __init__(self, request_id: str, run_id: int | None):
        self.request_id, self.run_id = request_id, run_id
        super().__init__(f"start request {request_id!r} already created run {run_id}")


class KeyNameTaken(StoreError):
    def __init__(self, name: str, revoked: bool):
        self.name = name
        why = "a revoked key had it, and its runs keep that name" if revoked else "a key with that name exists"
        super().__init__(f"name: {name!r} is taken ({why}); choose another name")


class KeyNotFound(StoreError, LookupError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"name: there is no active key named {name!r}; `tunelab keys list` shows them")


class InvalidValue(StoreError, ValueError):
    """A value the store will not write; `field` names it."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def sparkline(losses: Iterable[Any], points: int = SPARKLINE_POINTS) -> list[float]:
    """At most `points` finite losses, evenly spaced over the run, first and last kept."""
    values = [v for v in (finite_or_none(x) for x in losses) if v is not None]
    if len(values) <= points:
        return values
    if points < 2:
        return values[-points:] if points > 0 else []
    last = len(values) - 1
    return [values[round(i * last / (points - 1))] for i in range(points)]


def check_no_secrets(config: Any, where: str = "config") -> None:
    """Defence in depth: refuse a config that still carries a secret-named key."""
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key in DATA_NAME_MAPPINGS:
                continue
            if str(key).lower() in SECRET_KEYS:
                raise InvalidValue(f"{where}.{key}", "looks like a secret and is never stored; pass RunConfig.public()")
            check_no_secrets(value, f"{where}.{key}")
    elif isinstance(config, (list, tuple)):
        for i, item in enumerate(config):
            check_no_secrets(item, f"{where}[{i}]")


def clean_display_name(name: Any) -> str:
    text = name.strip() if isinstance(name, str) else ""
    if not 1 <= len(text) <= NAME_MAX_CHARS:
        raise InvalidValue("display_name", f"must be 1 to {NAME_MAX_CHARS} characters of text, got {len(text)}")
    found = first_unsafe_char(text)
    if found is not None:
        raise InvalidValue("display_name", f"must not contain control or bidi-override characters such as line breaks "
                                           f"({char_name(found[1])} at position {found[0]})")
    return text


def _check_modality(modality: Any) -> str:
    if modality not in MODALITIES:
        raise InvalidValue("modality", f"must be one of {', '.join(MODALITIES)}, got {modality!r}")
    return modality


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    run = dict(row)
    run["config"] = json.loads(run.pop("config_json"))
    run["loss_sparkline"] = json.loads(run["loss_sparkline"] or "[]")
    run["cancel_requested"] = bool(run["cancel_requested"])
    run["resume_blocked"] = bool(run["resume_blocked"])
    for key in ("device_request", "devices"):
        run[key] = json.loads(run[key]) if run.get(key) else None
    return run


def _check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1_000_000 <= priority <= 1_000_000:
        raise InvalidValue("queue_priority", f"must be a whole number from -1000000 to 1000000 (higher starts first), got {priority!r}")
    return priority


def _check_devices(devices: Any) -> list[Any]:
    if not isinstance(devices, (list, tuple)) or len(set(map(str, devices))) != len(devices):
        raise InvalidValue("devices", f"must be a list of distinct device ids, got {devices!r}")
    return list(devices)


def _json_or_none(field: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidValue(field, f"is not standard JSON: {exc}") from None


def _metric_values(row: Mapping[str, Any]) -> tuple[int, list[Any], dict[str, float]]:
    """A metric row's step, its fixed fields in METRIC_FIELDS order, and its extras."""
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidValue("step", f"must be a whole number >= 0, got {step!r}")
    values = [finite_or_none(row.get(f)) for f in METRIC_FIELDS]
    tokens = METRIC_FIELDS.index("num_tokens")
    if values[tokens] is not None:
        values[tokens] = int(values[tokens])
    return step, values, clean_extra(row.get("extra"))


class Store:
    """Thread-safe access to the run history. See docs/ARCHITECTURE.md "Store"."""

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

    # --- plumbing ---------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Store":
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

    # --- runs -------------------------------------------------------------------------
    def create_run(
        self,
        config_public: Mapping[str, Any],
        model_name: str,
        dataset_name: str,
        display_name: str | None = None,
        resumed_from_run_id: int | None = None,
        *,
        start_request_id: str | None = None,
        owner: Mapping[str, Any] | None = None,
        modality: str | None = None,
        owned_by: str | None = None,
        queued: bool = False,
        device_request: Mapping[str, Any] | None = None,
        queue_priority: int = 0,
        devices: list[Any] | None = None,
        claimed_by: str | None = None,
    ) -> int:
        """A new `running` row (or, with `queued`, a `queued` one at the end of its
        priority's queue); returns its id (ids are never reused). `owner` names the
        process that trains it: {"lock", "pid", "started_at"} (see close_orphans).
        `modality` is known up front only for a resumed run (its parent's); otherwise
        the worker reports it (set_modality). `owned_by`: the name of the API key that
        started it (the row's `owner`; None for the home's token and the CLI).
        `device_request` is what the run asked for ({"num_gpus": n} or {"gpu_ids": [...]});
        a run started at once also says the `devices` it got and who `claimed_by` it."""
        if not isinstance(config_public, Mapping):
            raise InvalidValue("config", "must be a mapping (RunConfig.public())")
        check_no_secrets(config_public)
        try:
            # allow_nan=False: NaN/Infinity are not JSON, and a row holding them breaks strict readers.
            config_json = json.dumps(dict(config_public), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidValue("config", f"is not standard JSON (NaN and Infinity are refused): {exc}") from None
        name = clean_display_name(display_name) if display_name is not None else None
        owner = owner or {}
        if modality is not None:
            _check_modality(modality)
        _check_priority(queue_priority)
        request_json = _json_or_none("device_request", device_request)
        devices_json = _json_or_none("devices", _check_devices(devices) if devices is not None else None)

        def work(conn: sqlite3.Connection) -> int:
            try:
                cursor = conn.execute(
                    "INSERT INTO runs (status, model_name, dataset_name, display_name, config_json, started_at,"
                    " resumed_from_run_id, start_request_id, owner_lock, owner_pid, owner_started_at, modality, owner,"
                    " queue_priority, queue_order, device_request, devices, claimed_by)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                    " CASE WHEN ? = 1 THEN COALESCE((SELECT MAX(queue_order) FROM runs), 0) + 1 END, ?, ?, ?)",
                    ("queued" if queued else "running", model_name, dataset_name or "", name, config_json, time.time(),
                     resumed_from_run_id, start_request_id, owner.get("lock"), owner.get("pid"), owner.get("started_at"),
                     modality, owned_by, queue_priority, int(bool(queued)), request_json, devices_json, claimed_by),
                )
            except self._dialect.integrity_errors:
                existing = conn.execute("SELECT id FROM runs WHERE start_request_id = ?", (start_request_id,)).fetchone()
                if existing is None:
                    raise
                raise DuplicateStartRequest(str(start_request_id), existing[0]) from None
            return int(cursor.lastrowid)

        return self._retry(work, write=True)

    def set_output_dir(self, run_id: int, path: str | Path | None) -> None:
        self._update_run(run_id, "UPDATE runs SET output_dir = ? WHERE id = ?", (str(path) if path else None,))

    def set_total_steps(self, run_id: int, total_steps: int | None) -> None:
        self._update_run(run_id, "UPDATE runs SET total_steps = ? WHERE id = ?", (total_steps,))

    def set_modality(self, run_id: int, modality: str) -> None:
        self._update_run(run_id, "UPDATE runs SET modality = ? WHERE id = ?", (_check_modality(modality),))

    def mark_cancel_requested(self, run_id: int) -> None:
        self._update_run(run_id, "UPDATE runs SET cancel_requested = 1 WHERE id = ?", ())

    def finalize_run(
        self,
        run_id: int,
        *,
        status: str,
        ended_at: float | None = None,
        total_steps: int | None = None,
        final_step: int | None = None,
        final_loss: float | None = None,
        duration_seconds: float | None = None,
        output_dir: str | Path | None = None,
        error_message: str | None = None,
        loss_sparkline: list[float] | None = None,
        resume_blocked: bool = False,
    ) -> bool:
        """Close a `running` row. Returns False (changing nothing) when the row was
        already finalized, so a second finalizer cannot overwrite the first. A missing
        total_steps or duration keeps the known total / is computed from started_at."""
        if status not in FINAL_STATUSES:
            raise InvalidValue("status", f"must be completed, stopped or error, got {status!r}")
        ended = ended_at if ended_at is not None else time.time()
        params = (
            status, ended, total_steps, final_step, finite_or_none(final_loss), duration_seconds, ended,
            str(output_dir) if output_dir else None, error_message, json.dumps(sparkline(loss_sparkline or [])),
            int(bool(resume_blocked)),
        )

        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, ended_at = ?, total_steps = COALESCE(?, total_steps), final_step = ?,"
                " final_loss = ?, duration_seconds = COALESCE(?, ? - started_at), output_dir = ?, error_message = ?,"
                " loss_sparkline = ?, resume_blocked = ? WHERE id = ? AND status = 'running'",
                params + (run_id,),
            )
            if cursor.rowcount == 0:
                self._require_run(conn, run_id)
                return False
            return True

        return self._retry(work, write=True)

    def get_run(self, run_id: int) -> dict[str, Any] | None:
        row = self._retry(lambda c: c.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone(), write=False)
        return _run_dict(row) if row is not None else None

    def list_runs(self, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """Newest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidValue("limit", f"must be a whole number from 1 to {MAX_LIST_LIMIT}, got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidValue("offset", f"must be a whole number >= 0, got {offset!r}")
        rows = self._retry(
            lambda c: c.execute("SELECT * FROM runs ORDER BY id DESC LIMIT ? OFFSET ?", (limit, offset)).fetchall(),
            write=False,
        )
        return [_run_dict(r) for r in rows]

    def count_runs(self) -> int:
        return self._retry(lambda c: c.execute("SELECT COUNT(*) FROM runs").fetchone()[0], write=False)

    def find_by_start_request_id(self, request_id: str) -> dict[str, Any] | None:
        row = self._retry(
            lambda c: c.execute("SELECT * FROM runs WHERE start_request_id = ?", (request_id,)).fetchone(), write=False
        )
        return _run_dict(row) if row is not None else None

    def rename_run(self, run_id: int, name: str) -> None:
        self._update_run(run_id, "UPDATE runs SET display_name = ? WHERE id = ?", (clean_display_name(name),))

    def delete_run(self, run_id: int) -> dict[str, Any]:
        """Delete a finished run and its metrics; returns the deleted row (its files are
        the caller's business). Refused while the run is `running`."""

        def work(conn: sqlite3.Connection) -> dict[str, Any]:
            row = self._require_run(conn, run_id)
            if row["status"] == "running":
                raise RunIsRunning(run_id)
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            return _run_dict(row)

        return self._retry(work, write=True)

    def mark_resumed(self, run_id: int, new_run_id: int, *, replacing: int | None = None) -> None:
        """Record that `new_run_id` continues `run_id`. A run is resumed only once, unless
        the caller found its earlier continuation `replacing` void (gone, or it kept nothing)."""

        def work(conn: sqlite3.Connection) -> None:
            row = self._require_run(conn, run_id)
            if row["resumed_by_run_id"] is not None and row["resumed_by_run_id"] != replacing:
                raise AlreadyResumed(run_id, row["resumed_by_run_id"])
            conn.execute("UPDATE runs SET resumed_by_run_id = ? WHERE id = ?", (new_run_id, run_id))

        self._retry(work, write=True)

    def runs_sharing_output_dir(self, path: str | Path, except_run_id: int | None = None) -> list[int]:
        """Other runs whose output folder is `path`, lies inside it or contains it: deleting
        `path` would destroy their files. Compared with symlinks resolved."""
        target = os.path.realpath(path)
        rows = self._retry(
            lambda c: c.execute("SELECT id, output_dir FROM runs WHERE output_dir IS NOT NULL").fetchall(), write=False
        )
        shared = []
        for run_id, folder in rows:
            if run_id == except_run_id:
                continue
            other = os.path.realpath(folder)
            if other == target or other.startswith(target + os.sep) or target.startswith(other + os.sep):
                shared.append(run_id)
        return sorted(shared)

    def close_orphans(self, checkpoint_finder: Callable[[str], Any],
                      owner_is_alive: Callable[[str | None], bool] = lambda _lock: False,
                      host: str | None = None) -> list[int]:
        """Close rows left `running` by a process that is gone (a previous server life, a
        killed `tunelab train`): `owner_is_alive(owner_lock)` says whether a row's owner
        still holds its lock, and such rows are left to their owner. A cancelled run ends
        `stopped` and is not resumable; any other ends `error`, resumable only when
        `checkpoint_finder(output_dir)` finds a valid checkpoint. Returns the closed ids.
        With `host` (servers of several machines sharing one database), only that machine's
        rows are looked at: owner locks are files on the machine that trains, so another
        machine's runs are its own server's to close.
        Call once at start-up, before this server starts a run of its own."""
        sql = "SELECT id, output_dir, cancel_requested, owner_lock FROM runs WHERE status = 'running'"
        params = _host_params(host) if host is not None else ()
        rows = self._retry(lambda c: c.execute(sql + (f" AND {ON_HOST}" if params else ""), params).fetchall(),
                           write=False)
        closed = []
        for run_id, output_dir, cancelled, owner_lock in rows:
            if owner_is_alive(owner_lock):
                log.info("run %s is still trained by a live process; leaving it running", run_id)
                continue
            found = None
            if output_dir and not cancelled:
                try:
                    found = checkpoint_finder(output_dir)
                except Exception:
                    log.warning("checking %s for checkpoints failed; run %s stays unresumable", output_dir, run_id, exc_info=True)
            history = self.get_metrics(run_id)
            losses = [m["loss"] for m in history if m["loss"] is not None]
            elapsed = [m["elapsed_seconds"] for m in history if m["elapsed_seconds"] is not None]
            if self.finalize_run(
                run_id,
                status="stopped" if cancelled else "error",
                final_step=history[-1]["step"] if history else None,
                final_loss=losses[-1] if losses else None,
                duration_seconds=max(elapsed) if elapsed else None,
                output_dir=output_dir,
                error_message=None if cancelled else ORPHAN_MESSAGE,
                loss_sparkline=losses,
                resume_blocked=found is None,
            ):
                closed.append(run_id)
        return closed

    # --- the queue (tunelab/orchestrator/scheduler.py decides; these statements are atomic) ---
    def queued_runs(self) -> list[dict[str, Any]]:
        """Every queued run in the order they will start: higher priority first, then by
        position key, then by id; each with its `queue_position`, 1 to n."""
        rows = self._retry(lambda c: c.execute(
            "SELECT * FROM runs WHERE status = 'queued' ORDER BY queue_priority DESC, queue_order, id").fetchall(),
            write=False)
        return [{**_run_dict(row), "queue_position": position} for position, row in enumerate(rows, start=1)]

    def claim_queued(self, run_id: int, claimed_by: str, devices: list[Any], *,
                     owner: Mapping[str, Any] | None = None) -> bool:
        """Turn a queued run into a running one on `devices`, for the server `claimed_by`
        (and the process `owner`, as create_run). One conditional UPDATE (store_dialect.claim),
        so of two servers claiming the same run at once exactly one gets True; False when
        the run is no longer queued (claimed elsewhere, cancelled) or gone."""
        devices_json = _json_or_none("devices", _check_devices(devices))
        owner = owner or {}
        changes = {"status": "running", "devices": devices_json, "claimed_by": claimed_by, "started_at": time.time(),
                   "owner_lock": owner.get("lock"), "owner_pid": owner.get("pid"),
                   "owner_started_at": owner.get("started_at")}
        return self._retry(lambda c: store_dialect.claim(c, "runs", run_id, {"status": "queued"}, changes), write=True)

    def cancel_queued(self, run_id: int) -> bool:
        """Withdraw a queued run (status `cancelled`); False when it is not queued any more
        (RunNotFound when there is no such run)."""

        def work(conn: sqlite3.Connection) -> bool:
            now = time.time()
            if conn.execute("UPDATE runs SET status = 'cancelled', ended_at = ?, duration_seconds = 0"
                            " WHERE id = ? AND status = 'queued'", (now, run_id)).rowcount == 1:
                return True
            self._require_run(conn, run_id)
            return False

        return self._retry(work, write=True)

    def set_queue_priority(self, run_id: int, priority: int) -> None:
        """A queued run's priority (higher starts first); it keeps its place among equals."""
        _check_priority(priority)
        self._update_queued(run_id, lambda conn: conn.execute(
            "UPDATE runs SET queue_priority = ? WHERE id = ? AND status = 'queued'", (priority, run_id)))

    def move_queued(self, run_id: int, position: int) -> None:
        """Put a queued run at `position` (1 = next to start) of queued_runs. Priority
        still comes first, so the position must lie among the runs of its own priority;
        otherwise InvalidValue names the positions it can take."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 1:
            raise InvalidValue("position", f"must be a whole number >= 1, got {position!r}")

        def work(conn: sqlite3.Connection) -> None:
            rows = conn.execute("SELECT id, queue_priority FROM runs WHERE status = 'queued'"
                                " ORDER BY queue_priority DESC, queue_order, id").fetchall()
            ids = [r[0] for r in rows]
            if run_id not in ids:
                self._not_queued(conn, run_id)
            priority = rows[ids.index(run_id)][1]
            band = [i + 1 for i, r in enumerate(rows) if r[1] == priority]
            if not band[0] <= position <= band[-1]:
                raise InvalidValue("position", f"run {run_id} has priority {priority}, which places it at positions "
                                               f"{band[0]} to {band[-1]} of {len(rows)}; choose one of those or change its priority")
            ids.remove(run_id)
            ids.insert(position - 1, run_id)
            # Renumbering every queued run keeps the keys plain whole numbers however often runs move.
            conn.executemany("UPDATE runs SET queue_order = ? WHERE id = ?", [(float(i), rid) for i, rid in enumerate(ids, 1)])

        self._retry(work, write=True)

    def devices_in_use(self, host: str | None = None) -> set[Any]:
        """The devices of every running run, as claimed in the database. With `host`, only
        those of runs on that machine (claimed by one of its servers, or with no claimant: a
        `tunelab train` there): "gpu-0" on one machine is not "gpu-0" on another that shares
        this database."""
        sql = "SELECT devices FROM runs WHERE status = 'running' AND devices IS NOT NULL"
        params: tuple[Any, ...] = ()
        if host is not None:
            sql += f" AND {ON_HOST}"
            params = _host_params(host)
        rows = self._retry(lambda c: c.execute(sql, params).fetchall(), write=False)
        return {device for (devices,) in rows for device in json.loads(devices)}

    def _update_queued(self, run_id: int, update: Callable[[sqlite3.Connection], sqlite3.Cursor]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            if update(conn).rowcount == 0:
                self._not_queued(conn, run_id)

        self._retry(work, write=True)

    def _not_queued(self, conn: sqlite3.Connection, run_id: int) -> None:
        row = self._require_run(conn, run_id)
        raise RunNotQueued(run_id, row["status"])

    # --- metrics ----------------------------------------------------------------------
    def add_metrics(self, run_id: int, rows: Iterable[Mapping[str, Any]]) -> None:
        """Upsert metric rows (keys beyond the metric fields are ignored, so progress
        events can be passed as they are). Non-finite numbers are stored as NULL. A row's
        `extra` {name: value} goes to metric_extras, one value per name and step (a later
        report for a step replaces it); names and values are checked by events.clean_extra."""
        checked = [_metric_values(row) for row in rows]
        params = [(run_id, step, *values) for step, values, _ in checked]
        extras = [(run_id, step, name, value) for step, _, extra in checked for name, value in extra.items()]
        if not params:
            return

        def work(conn: sqlite3.Connection) -> None:
            try:
                conn.executemany(UPSERT_METRIC, params)
                conn.executemany(UPSERT_EXTRA, extras)
            except self._dialect.integrity_errors:
                self._require_run(conn, run_id)
                raise

        self._retry(work, write=True)

    def get_metrics(self, run_id: int) -> list[dict[str, Any]]:
        """Every metric row of a run, ordered by step."""
        rows = self._retry(
            lambda c: c.execute(
                f"SELECT step, {', '.join(METRIC_FIELDS)} FROM metrics WHERE run_id = ? ORDER BY step", (run_id,)
            ).fetchall(),
            write=False,
        )
        return [dict(r) for r in rows]

    def get_metric_extras(self, run_id: int) -> dict[str, dict[str, list[Any]]]:
        """A run's extra metrics as series: {name: {"steps": [...], "values": [...]}}, names
        in alphabetical order, steps ascending. A series has only the steps that logged it
        (an eval metric only the eval steps)."""
        rows = self._retry(
            lambda c: c.execute(
                "SELECT name, step, value FROM metric_extras WHERE run_id = ? ORDER BY name, step", (run_id,)
            ).fetchall(),
            write=False,
        )
        series: dict[str, dict[str, list[Any]]] = {}
        for name, step, value in rows:
            points = series.setdefault(name, {"steps": [], "values": []})
            points["steps"].append(step)
            points["values"].append(value)
        return series

    def metric_arrays(self, run_id: int) -> dict[str, Any]:
        """Every metric row as paired arrays for the API: `steps` plus one list per
        field, one entry per step, None where a value is unknown; and `extra`, the
        series of get_metric_extras."""
        rows = self.get_metrics(run_id)
        return {"steps": [r["step"] for r in rows], **{f: [r[f] for r in rows] for f in METRIC_FIELDS},
                "extra": self.get_metric_extras(run_id)}

    # --- API keys (tunelab.keys decides names, roles and hashing; only hashes come here) ---
    def add_api_key(self, name: str, role: str, secret_sha256: str) -> None:
        """A new key; KeyNameTaken when any key, revoked or not, has the name."""

        def work(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT revoked_at FROM api_keys WHERE name = ?", (name,)).fetchone()
            if row is not None:
                raise KeyNameTaken(name, row[0] is not None)
            conn.execute("INSERT INTO api_keys (name, role, secret_sha256, created_at) VALUES (?, ?, ?, ?)",
                         (name, role, secret_sha256, time.time()))

        self._retry(work, write=True)

    def list_api_keys(self) -> list[dict[str, Any]]:
        """Every key, oldest first, without its hash."""
        rows = self._retry(lambda c: c.execute(
            "SELECT name, role, created_at, revoked_at FROM api_keys ORDER BY created_at, name").fetchall(), write=False)
        return [dict(r) for r in rows]

    def revoke_api_key(self, name: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            if conn.execute("UPDATE api_keys SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                            (time.time(), name)).rowcount == 0:
                raise KeyNotFound(name)

        self._retry(work, write=True)

    def find_api_key(self, secret_sha256: str) -> dict[str, Any] | None:
        """The active key with this hash ({name, role, secret_sha256}), or None."""
        row = self._retry(lambda c: c.execute(
            "SELECT name, role, secret_sha256 FROM api_keys WHERE secret_sha256 = ? AND revoked_at IS NULL",
            (secret_sha256,)).fetchone(), write=False)
        return dict(row) if row is not None else None
