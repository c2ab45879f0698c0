"""The run store's schema: the ordered migrations and the statements shared by several methods.

The schema grows only by appending a step to `MIGRATIONS` (applied at open, tracked in the
database's schema version by tunelab.store.dialect). A step is a tuple of statements
written for SQLite (translated for PostgreSQL by tunelab.store.translate), or a mapping
{"sqlite": (...), "postgresql": (...)} where the dialects differ.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tunelab.events import DEFAULT_MODALITY

RUN_STATUSES = ("queued", "running", "completed", "stopped", "error", "cancelled")
# What finalize_run may write: a `running` row ends in one of these; a queued one is cancelled (cancel_queued).
FINAL_STATUSES = ("completed", "stopped", "error")
METRIC_FIELDS = ("loss", "learning_rate", "grad_norm", "eval_loss", "epoch", "num_tokens", "elapsed_seconds")

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

# The columns of `runs` as migration 1 created them, after `id` and `status` (whose CHECK
# migration 7 widens): migration 7's rebuild starts from the same list.
RUNS_COLUMNS_1 = (
    "model_name TEXT NOT NULL",
    "dataset_name TEXT NOT NULL DEFAULT ''",
    "display_name TEXT",
    "config_json TEXT NOT NULL",
    "started_at REAL NOT NULL",
    "ended_at REAL",
    "total_steps INTEGER",
    "final_step INTEGER",
    "final_loss REAL",
    "duration_seconds REAL",
    "output_dir TEXT",
    "error_message TEXT",
    "loss_sparkline TEXT NOT NULL DEFAULT '[]'",
    "cancel_requested INTEGER NOT NULL DEFAULT 0",
    "resume_blocked INTEGER NOT NULL DEFAULT 0",
    "resumed_from_run_id INTEGER",
    "resumed_by_run_id INTEGER",
    "start_request_id TEXT",
)


def create_runs_table(table: str, status_check: str, later_columns: Iterable[str] = ()) -> str:
    """CREATE TABLE `table` with the columns of `runs`: id, status (checked by `status_check`),
    migration 1's columns, then `later_columns` (those later migrations added)."""
    columns = ("id INTEGER PRIMARY KEY AUTOINCREMENT", f"status TEXT NOT NULL {status_check}", *RUNS_COLUMNS_1,
               *later_columns)
    return f"CREATE TABLE {table} (\n    " + ",\n    ".join(columns) + "\n)"


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
    create_runs_table("runs_new", STATUS_CHECK, (
        "owner_lock TEXT", "owner_pid INTEGER", "owner_started_at REAL",  # migration 2
        "modality TEXT",  # migration 3
        "owner TEXT",  # migration 6
        *(f"{name} {kind}" for name, kind in QUEUE_COLUMNS),
    )),
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

# Migration 8: servers sharing one history (tunelab/orchestrator/identity.py). Each server
# (one tunelab home) has a stable id; it beats in `servers` while it lives, and each run
# records the server that accepted it (`server_id`; the one that took it over, once claimed
# from a silent server). NULL: a run from before this migration.
SERVERS_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE servers (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        instance TEXT NOT NULL,
        last_seen REAL NOT NULL
    )""",
    "ALTER TABLE runs ADD COLUMN server_id TEXT",
)

# Migration 9: each export folder with the run that wrote it and that run's owner
# (tunelab/store/exports.py), so no one's export or run writes into another owner's.
EXPORTS_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE run_exports (
        folder TEXT PRIMARY KEY,
        run_id INTEGER NOT NULL,
        owner TEXT,
        format TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX run_exports_by_run ON run_exports (run_id)",
)

# Migration 10: sweeps and their trials (tunelab/store/sweeps.py holds the statements).
SWEEPS_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        spec_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        best_run_id INTEGER,
        best_value REAL
    )""",
    """CREATE TABLE sweep_trials (
        sweep_id INTEGER NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
        trial_number INTEGER NOT NULL,
        run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'complete', 'pruned', 'failed', 'interrupted')),
        value REAL,
        params_json TEXT NOT NULL,
        PRIMARY KEY (sweep_id, trial_number)
    )""",
    "CREATE INDEX sweep_trials_by_run ON sweep_trials (run_id)",
)

# Migration 11: which server runs a sweep now (NULL: none, or a CLI process) and the API key
# that started it there (NULL: the home's token), so a server that died mid-sweep resumes it
# at its next start with the same owner; a sweep that finished or was stopped has no server.
SWEEP_SERVERS_MIGRATION: tuple[str, ...] = (
    "ALTER TABLE sweeps ADD COLUMN server_id TEXT",
    "ALTER TABLE sweeps ADD COLUMN started_by TEXT",
)

# A step: statements written for SQLite (translated for PostgreSQL), or a mapping
# {"sqlite": (...), "postgresql": (...)} where the dialects differ (see tunelab.store.dialect).
MIGRATIONS: tuple[tuple[str, ...] | Mapping[str, tuple[str, ...]], ...] = (
    (  # 1: runs and metrics
        create_runs_table("runs", "CHECK (status IN ('running', 'completed', 'stopped', 'error'))"),
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
    (  # 5: evaluations of a finished run (tunelab/store/evals.py): perplexity, generations, lm_eval
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
    SERVERS_MIGRATION,  # 8: server identities, their heartbeats, and the server of each run
    EXPORTS_MIGRATION,  # 9: export folders, their run and owner
    SWEEPS_MIGRATION,  # 10: sweeps and their trials
    SWEEP_SERVERS_MIGRATION,  # 11: the server running each sweep, and who started it there
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


def host_params(host: str) -> tuple[int, str]:
    return len(host) + 1, f"{host}:"


def on_host(claimed_by: str | None, host: str) -> bool:
    """ON_HOST in Python: whether a run with this claimant is on the machine `host`."""
    return claimed_by is None or claimed_by.startswith(f"{host}:")

