"""A run's stored evaluations: the `run_evals` table (store migration 5).

Each evaluation of a run (`tunelab eval`, `POST /api/runs/{id}/eval`) stores one row per
kind it measured: `perplexity`, `generations` or `lm_eval`, with its result as a JSON
payload (see `tunelab.evaluate.runner` for what each holds). Rows go with their run when
it is deleted. These are the only statements on that table; they run through the
store's own connection and retry loop, so they share its locking and busy handling.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from tunelab.store import RunNotFound, Store

EVAL_KINDS = ("perplexity", "generations", "lm_eval")
# A history page asks for the newest; one run rarely has more.
DEFAULT_LIMIT = 50


def add_eval(store: Store, run_id: int, kind: str, payload: dict[str, Any], created_at: float | None = None) -> dict[str, Any]:
    """Store one result of `kind` for `run_id`; returns it as `list_evals` does."""
    if kind not in EVAL_KINDS:
        raise ValueError(f"unknown eval kind {kind!r}; one of {EVAL_KINDS}")
    created = time.time() if created_at is None else created_at
    text = json.dumps(payload, allow_nan=False)

    def work(conn: sqlite3.Connection) -> int:
        Store._require_run(conn, run_id)
        cursor = conn.execute("INSERT INTO run_evals (run_id, created_at, kind, payload) VALUES (?, ?, ?, ?)",
                              (run_id, created, kind, text))
        return int(cursor.lastrowid)

    eval_id = store._retry(work, write=True)
    return {"id": eval_id, "run_id": run_id, "created_at": created, "kind": kind, "payload": payload}


def list_evals(store: Store, run_id: int, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """A run's evaluations, newest first. RunNotFound when there is no such run."""

    def work(conn: sqlite3.Connection) -> list[sqlite3.Row]:
        Store._require_run(conn, run_id)
        return conn.execute("SELECT id, run_id, created_at, kind, payload FROM run_evals WHERE run_id = ? "
                            "ORDER BY id DESC LIMIT ?", (run_id, limit)).fetchall()

    return [{"id": row["id"], "run_id": row["run_id"], "created_at": row["created_at"], "kind": row["kind"],
             "payload": json.loads(row["payload"])} for row in store._retry(work, write=False)]


__all__ = ["DEFAULT_LIMIT", "EVAL_KINDS", "RunNotFound", "add_eval", "list_evals"]
