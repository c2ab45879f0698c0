"""Sweeps and their trials: the `sweeps` and `sweep_trials` tables (store migrations 10, 11).

A sweep (tunelab/sweeps) is found again by its name, so running the same sweep file
after a crash resumes it. Each trial row ties an Optuna trial number to the ordinary run
that trained it, with the trial's state: `running`, `complete`, `pruned` (stopped and
saved by the pruner), `failed` (its run ended in error or reported no objective) or
`interrupted` (its process died mid-trial: closed on the next start, never counted).
Optuna keeps its own study tables in the same database through `optuna_url`.
A sweep a server runs carries that server's id (`claim_sweep`) until it finishes or is
stopped (`release_sweep`); a server that died meanwhile finds it again (`claimed_by`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from tunelab.store import Store

TRIAL_STATES = ("running", "complete", "pruned", "failed", "interrupted")
# Trials that used up the budget: everything that ended on its own terms.
COUNTED_STATES = ("complete", "pruned", "failed")

def optuna_url(store: Store) -> str:
    """The SQLAlchemy URL of the store's own database, for Optuna's RDB storage."""
    url = getattr(store._dialect, "_url", None)
    if url is None:
        return f"sqlite:///{store.path}"
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def open_sweep(store: Store, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The sweep called `name`, created with `spec` when new; its row as a dict."""
    text = json.dumps(spec, allow_nan=False, default=str)

    def work(conn: sqlite3.Connection) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM sweeps WHERE name = ?", (name,)).fetchone()
        if row is None:
            conn.execute("INSERT INTO sweeps (name, spec_json, created_at) VALUES (?, ?, ?)", (name, text, time.time()))
            row = conn.execute("SELECT * FROM sweeps WHERE name = ?", (name,)).fetchone()
        return row

    return _sweep(store._retry(work, write=True))


def get_sweep(store: Store, key: int | str) -> dict[str, Any] | None:
    """A sweep by id or name; None when there is none."""
    column = "id" if isinstance(key, int) else "name"
    row = store._retry(lambda conn: conn.execute(f"SELECT * FROM sweeps WHERE {column} = ?", (key,)).fetchone(),
                       write=False)
    return _sweep(row) if row is not None else None


def list_sweeps(store: Store) -> list[dict[str, Any]]:
    rows = store._retry(lambda conn: conn.execute("SELECT * FROM sweeps ORDER BY id").fetchall(), write=False)
    return [_sweep(row) for row in rows]


def add_trial(store: Store, sweep_id: int, number: int, run_id: int | None, params: dict[str, Any],
              state: str = "running") -> None:
    """Record trial `number` and its run (None: a trial whose run was refused, `failed`)."""
    if state not in TRIAL_STATES:
        raise ValueError(f"unknown trial state {state!r}; one of {TRIAL_STATES}")
    store._retry(lambda conn: conn.execute(
        "INSERT INTO sweep_trials (sweep_id, trial_number, run_id, state, params_json) VALUES (?, ?, ?, ?, ?)",
        (sweep_id, number, run_id, state, json.dumps(params, default=str))), write=True)


def end_trial(store: Store, sweep_id: int, number: int, state: str, value: float | None = None) -> None:
    if state not in TRIAL_STATES:
        raise ValueError(f"unknown trial state {state!r}; one of {TRIAL_STATES}")
    store._retry(lambda conn: conn.execute(
        "UPDATE sweep_trials SET state = ?, value = ? WHERE sweep_id = ? AND trial_number = ?",
        (state, value, sweep_id, number)), write=True)


def interrupt_running(store: Store, sweep_id: int) -> list[int]:
    """Mark the trials left `running` by a process that died as `interrupted`; their numbers."""

    def work(conn: sqlite3.Connection) -> list[int]:
        numbers = [r["trial_number"] for r in conn.execute(
            "SELECT trial_number FROM sweep_trials WHERE sweep_id = ? AND state = 'running'", (sweep_id,)).fetchall()]
        conn.execute("UPDATE sweep_trials SET state = 'interrupted' WHERE sweep_id = ? AND state = 'running'", (sweep_id,))
        return numbers

    return store._retry(work, write=True)


def list_trials(store: Store, sweep_id: int) -> list[dict[str, Any]]:
    """The sweep's trials in trial order, each with its run's status."""
    rows = store._retry(lambda conn: conn.execute(
        "SELECT t.trial_number, t.run_id, t.state, t.value, t.params_json, r.status AS run_status "
        "FROM sweep_trials t LEFT JOIN runs r ON r.id = t.run_id WHERE t.sweep_id = ? ORDER BY t.trial_number",
        (sweep_id,)).fetchall(), write=False)
    return [{"trial": row["trial_number"], "run_id": row["run_id"], "state": row["state"], "value": row["value"],
             "params": json.loads(row["params_json"]), "run_status": row["run_status"]} for row in rows]


def trial_of_run(store: Store, run_id: int) -> dict[str, Any] | None:
    """The sweep trial a run trained, {"sweep_id", "sweep", "trial", "state"}; None for a run of no sweep."""
    row = store._retry(lambda conn: conn.execute(
        "SELECT t.sweep_id, s.name, t.trial_number, t.state FROM sweep_trials t JOIN sweeps s ON s.id = t.sweep_id "
        "WHERE t.run_id = ?", (run_id,)).fetchone(), write=False)
    return None if row is None else {"sweep_id": row["sweep_id"], "sweep": row["name"], "trial": row["trial_number"],
                                     "state": row["state"]}


def counted_trials(store: Store, sweep_id: int) -> int:
    """How many trials used up the sweep's budget (COUNTED_STATES)."""
    marks = ", ".join("?" for _ in COUNTED_STATES)
    row = store._retry(lambda conn: conn.execute(
        f"SELECT COUNT(*) AS n FROM sweep_trials WHERE sweep_id = ? AND state IN ({marks})",
        (sweep_id, *COUNTED_STATES)).fetchone(), write=False)
    return int(row["n"])


def claim_sweep(store: Store, sweep_id: int, server_id: str, started_by: str | None,
                others_live: set[str]) -> str | None:
    """Record that the server `server_id` runs the sweep for the key `started_by`, unless a
    server in `others_live` runs it already; returns that other server's id, or None once claimed."""

    def work(conn: sqlite3.Connection) -> str | None:
        row = conn.execute("SELECT server_id FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        holder = row["server_id"] if row is not None else None
        if holder is not None and holder != server_id and holder in others_live:
            return holder
        conn.execute("UPDATE sweeps SET server_id = ?, started_by = ? WHERE id = ?", (server_id, started_by, sweep_id))
        return None

    return store._retry(work, write=True)


def release_sweep(store: Store, sweep_id: int, server_id: str) -> None:
    """The server `server_id` runs the sweep no more (it finished, or was stopped)."""
    store._retry(lambda conn: conn.execute("UPDATE sweeps SET server_id = NULL WHERE id = ? AND server_id = ?",
                                           (sweep_id, server_id)), write=True)


def claimed_by(store: Store, server_id: str) -> list[dict[str, Any]]:
    """The sweeps the server `server_id` was running (and had not finished or stopped), oldest first."""
    rows = store._retry(lambda conn: conn.execute("SELECT * FROM sweeps WHERE server_id = ? ORDER BY id",
                                                  (server_id,)).fetchall(), write=False)
    return [_sweep(row) for row in rows]


def set_best(store: Store, sweep_id: int, run_id: int | None, value: float | None) -> None:
    store._retry(lambda conn: conn.execute("UPDATE sweeps SET best_run_id = ?, best_value = ? WHERE id = ?",
                                           (run_id, value, sweep_id)), write=True)


def _sweep(row: sqlite3.Row) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "spec": json.loads(row["spec_json"]), "created_at": row["created_at"],
            "best_run_id": row["best_run_id"], "best_value": row["best_value"], "server_id": row["server_id"],
            "started_by": row["started_by"]}
