"""The run history: runs and their metrics in SQLite (one file, the default) or PostgreSQL (SPEC §5).

This package is the only code that speaks SQL. The schema grows through the ordered
`MIGRATIONS` (schema.py, applied at open, tracked in the database's schema version).
`Store` takes a file path, a `sqlite:///` URL or a `postgresql://` URL (with none,
TUNELAB_DATABASE_URL, else the home's SQLite file). Statements are written for SQLite;
dialect.py holds what differs (connecting, BEGIN, busy errors, the version) and on
PostgreSQL `conn` is postgres.py's adapter, with sqlite3's interface, that rewrites each
statement (translate.py).

One module per job: base.py (the connection, its lock and retried transactions),
runs.py, metrics.py, queue.py, keys.py, exports.py, orphans.py and servers.py (the statements of each table
group, as mixins of `Store`), rows.py (pure value checks and row shaping), errors.py
(StoreError and its family). Everything other modules import comes from here.

Timestamps are Unix seconds (floats). Run rows come back as dicts whose `config` is the
stored (sanitized) config, `loss_sparkline` a list of floats and flags real booleans;
`modality` is None until the run's worker has said what it trains on.
"""

from __future__ import annotations

from tunelab.store.base import BUSY_TIMEOUT_MS, DEFAULT_RETRY_SECONDS, StoreBase
from tunelab.store.errors import (
    AlreadyResumed,
    DuplicateStartRequest,
    InvalidValue,
    KeyNameTaken,
    KeyNotFound,
    QueueJump,
    RunIsRunning,
    RunNotFound,
    RunNotQueued,
    StoreBusy,
    StoreError,
)
from tunelab.store.exports import ExportsMixin
from tunelab.store.keys import KeysMixin
from tunelab.store.metrics import MetricsMixin
from tunelab.store.orphans import ORPHAN_MESSAGE, SILENT_SERVER_MESSAGE, OrphansMixin
from tunelab.store.queue import QueueMixin
from tunelab.store.rows import (
    DATA_NAME_MAPPINGS,
    NAME_MAX_CHARS,
    SECRET_KEYS,
    SPARKLINE_POINTS,
    check_no_secrets,
    clean_display_name,
    sparkline,
)
from tunelab.store.runs import MAX_LIST_LIMIT, RunsMixin
from tunelab.store.servers import ServersMixin
from tunelab.store.schema import (
    EXPORTS_MIGRATION,
    FINAL_STATUSES,
    KEYS_MIGRATION,
    METRIC_FIELDS,
    MIGRATIONS,
    ON_HOST,
    QUEUE_COLUMNS,
    QUEUE_MIGRATION,
    QUEUE_MIGRATION_SQLITE,
    RUN_STATUSES,
    RUNS_COLUMNS_6,
    SERVERS_MIGRATION,
    STATUS_CHECK,
    UPSERT_EXTRA,
    UPSERT_METRIC,
)


class Store(RunsMixin, MetricsMixin, QueueMixin, KeysMixin, ExportsMixin, OrphansMixin, ServersMixin, StoreBase):
    """Thread-safe access to the run history. See docs/ARCHITECTURE.md "Store"."""


__all__ = [
    "AlreadyResumed", "BUSY_TIMEOUT_MS", "DATA_NAME_MAPPINGS", "DEFAULT_RETRY_SECONDS", "DuplicateStartRequest",
    "EXPORTS_MIGRATION", "FINAL_STATUSES", "InvalidValue", "KEYS_MIGRATION", "KeyNameTaken", "KeyNotFound", "MAX_LIST_LIMIT",
    "METRIC_FIELDS", "MIGRATIONS", "NAME_MAX_CHARS", "ON_HOST", "ORPHAN_MESSAGE", "QUEUE_COLUMNS", "QUEUE_MIGRATION",
    "QUEUE_MIGRATION_SQLITE", "QueueJump", "RUNS_COLUMNS_6", "RUN_STATUSES", "RunIsRunning", "RunNotFound", "RunNotQueued",
    "SECRET_KEYS", "SERVERS_MIGRATION", "SILENT_SERVER_MESSAGE", "SPARKLINE_POINTS", "STATUS_CHECK", "Store", "StoreBusy", "StoreError",
    "UPSERT_EXTRA",
    "UPSERT_METRIC", "check_no_secrets", "clean_display_name", "sparkline",
]
