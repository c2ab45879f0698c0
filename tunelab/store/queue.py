"""The run queue's statements: queued runs, atomic claims, cancelling, priorities and order.

tunelab/orchestrator/scheduler.py decides what starts; each method here is one atomic transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Callable, Mapping

from tunelab.store import dialect as store_dialect
from tunelab.store.errors import InvalidValue, QueueJump, RunNotQueued
from tunelab.store.rows import check_devices, check_priority, json_or_none, run_dict
from tunelab.store.schema import ON_HOST, host_params


class QueueMixin:
    """The queue. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry` and
    `_require_run`."""

    def queued_runs(self) -> list[dict[str, Any]]:
        """Every queued run in the order they will start: higher priority first, then by
        position key, then by id; each with its `queue_position`, 1 to n."""
        rows = self._retry(lambda c: c.execute(
            "SELECT * FROM runs WHERE status = 'queued' ORDER BY queue_priority DESC, queue_order, id").fetchall(),
            write=False)
        return [{**run_dict(row), "queue_position": position} for position, row in enumerate(rows, start=1)]

    def claim_queued(self, run_id: int, claimed_by: str, devices: list[Any], *,
                     owner: Mapping[str, Any] | None = None, server_id: str | None = None) -> bool:
        """Turn a queued run into a running one on `devices`, for the server `claimed_by`
        (and the process `owner`, as create_run); with `server_id`, the run is that server's
        from now on (one that took it over from a silent server answers for it). One conditional UPDATE (store_dialect.claim),
        so of two servers claiming the same run at once exactly one gets True; False when
        the run is no longer queued (claimed elsewhere, cancelled) or gone."""
        devices_json = json_or_none("devices", check_devices(devices))
        owner = owner or {}
        changes = {"status": "running", "devices": devices_json, "claimed_by": claimed_by, "started_at": time.time(),
                   "owner_lock": owner.get("lock"), "owner_pid": owner.get("pid"),
                   "owner_started_at": owner.get("started_at")}
        if server_id is not None:
            changes["server_id"] = server_id
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
        check_priority(priority)
        self._update_queued(run_id, lambda conn: conn.execute(
            "UPDATE runs SET queue_priority = ? WHERE id = ? AND status = 'queued'", (priority, run_id)))

    def move_queued(self, run_id: int, position: int, *, mover: str | None = None) -> None:
        """Put a queued run at `position` (1 = next to start) of queued_runs. Priority
        still comes first, so the position must lie among the runs of its own priority;
        otherwise InvalidValue names the positions it can take. With `mover` (a member's
        key name) the run may pass only that key's own runs on its way up (QueueJump
        otherwise); checked in the same transaction as the move, so no run queued meanwhile
        is jumped."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 1:
            raise InvalidValue("position", f"must be a whole number >= 1, got {position!r}")

        def work(conn: sqlite3.Connection) -> None:
            rows = conn.execute("SELECT id, queue_priority, owner FROM runs WHERE status = 'queued'"
                                " ORDER BY queue_priority DESC, queue_order, id").fetchall()
            ids = [r[0] for r in rows]
            if run_id not in ids:
                self._not_queued(conn, run_id)
            here = ids.index(run_id)
            priority = rows[here][1]
            band = [i + 1 for i, r in enumerate(rows) if r[1] == priority]
            if not band[0] <= position <= band[-1]:
                raise InvalidValue("position", f"run {run_id} has priority {priority}, which places it at positions "
                                               f"{band[0]} to {band[-1]} of {len(rows)}; choose one of those or change its priority")
            if mover is not None:
                _refuse_a_jump(rows, here, position - 1, mover)
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
            params = host_params(host)
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


def _refuse_a_jump(rows: list[Any], here: int, target: int, mover: str) -> None:
    """QueueJump when moving rows[here] up to index `target` passes a run `mover` does not own."""
    passed = [row for row in rows[target:here] if row[2] != mover]
    if passed:
        highest = here
        while highest > target and rows[highest - 1][2] == mover:
            highest -= 1
        raise QueueJump(rows[here][0], passed[-1][0], passed[-1][2], highest + 1)
