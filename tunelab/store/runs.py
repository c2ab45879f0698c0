"""Rows of the `runs` table: creating, updating, finalizing, reading and deleting runs."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

from tunelab.events import finite_or_none
from tunelab.store.errors import AlreadyResumed, DuplicateStartRequest, InvalidValue, RunIsRunning
from tunelab.store.rows import (
    check_devices,
    check_modality,
    check_no_secrets,
    check_priority,
    clean_display_name,
    json_or_none,
    run_dict,
    sparkline,
)
from tunelab.store.schema import FINAL_STATUSES

MAX_LIST_LIMIT = 10_000


class RunsMixin:
    """The run rows. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry` and
    `_require_run`."""

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
        server_id: str | None = None,
    ) -> int:
        """A new `running` row (or, with `queued`, a `queued` one at the end of its
        priority's queue); returns its id (ids are never reused). `owner` names the
        process that trains it: {"lock", "pid", "started_at"} (see close_orphans).
        `modality` is known up front only for a resumed run (its parent's); otherwise
        the worker reports it (set_modality). `owned_by`: the name of the API key that
        started it (the row's `owner`; None for the home's token and the CLI).
        `device_request` is what the run asked for ({"num_gpus": n} or {"gpu_ids": [...]});
        a run started at once also says the `devices` it got and who `claimed_by` it.
        `server_id`: the server that accepted it (servers.py; None for a store used alone)."""
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
            check_modality(modality)
        check_priority(queue_priority)
        request_json = json_or_none("device_request", device_request)
        devices_json = json_or_none("devices", check_devices(devices) if devices is not None else None)

        def work(conn: sqlite3.Connection) -> int:
            try:
                cursor = conn.execute(
                    "INSERT INTO runs (status, model_name, dataset_name, display_name, config_json, started_at,"
                    " resumed_from_run_id, start_request_id, owner_lock, owner_pid, owner_started_at, modality, owner,"
                    " queue_priority, queue_order, device_request, devices, claimed_by, server_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                    " CASE WHEN ? = 1 THEN COALESCE((SELECT MAX(queue_order) FROM runs), 0) + 1 END, ?, ?, ?, ?)",
                    ("queued" if queued else "running", model_name, dataset_name or "", name, config_json, time.time(),
                     resumed_from_run_id, start_request_id, owner.get("lock"), owner.get("pid"), owner.get("started_at"),
                     modality, owned_by, queue_priority, int(bool(queued)), request_json, devices_json, claimed_by, server_id),
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
        self._update_run(run_id, "UPDATE runs SET modality = ? WHERE id = ?", (check_modality(modality),))

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
        return run_dict(row) if row is not None else None

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
        return [run_dict(r) for r in rows]

    def count_runs(self) -> int:
        return self._retry(lambda c: c.execute("SELECT COUNT(*) FROM runs").fetchone()[0], write=False)

    def find_by_start_request_id(self, request_id: str) -> dict[str, Any] | None:
        row = self._retry(
            lambda c: c.execute("SELECT * FROM runs WHERE start_request_id = ?", (request_id,)).fetchone(), write=False
        )
        return run_dict(row) if row is not None else None

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
            return run_dict(row)

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
