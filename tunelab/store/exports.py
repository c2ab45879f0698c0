"""Export folders (`run_exports`, schema.EXPORTS_MIGRATION): which run wrote each one, and for whom.

An export writes into a folder a request named (`dest`), which may lie anywhere inside the
outputs root. Recording the folder with its run and that run's owner lets the rule in
`tunelab.folder_owners` refuse another owner's export or run there, and lets a delete
with its files remove the run's own exports and nothing else. One row per folder: a new
export into a folder replaces the old one, and its row says who wrote what is there now.
Rows outlive their run (run ids are never reused), so a run deleted without its files
still owns the exports it left behind. Folders are kept with symlinks resolved and
compared in Python, as `runs_sharing_output_dir` compares run folders.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

COLUMNS = "folder, run_id, owner, format, created_at"


def touches(folder: str, target: str) -> bool:
    """`folder` is `target`, lies inside it or holds it (both resolved already)."""
    return folder == target or folder.startswith(target + os.sep) or target.startswith(folder + os.sep)


class ExportsMixin:
    """The export folders. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry`."""

    def record_export(self, folder: str | Path, run_id: int, owner: str | None, fmt: str) -> None:
        """`run_id` (owned by `owner`) has just written an export into `folder`."""
        sql = (f"INSERT INTO run_exports ({COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT (folder) DO UPDATE SET "
               "run_id = excluded.run_id, owner = excluded.owner, format = excluded.format, created_at = excluded.created_at")
        params = (os.path.realpath(folder), run_id, owner, fmt, time.time())
        self._retry(lambda c: c.execute(sql, params), write=True)

    def exports_touching(self, path: str | Path) -> list[dict[str, Any]]:
        """Recorded exports whose folder is `path`, lies inside it or holds it, oldest first."""
        target = os.path.realpath(path)
        return [row for row in self._export_rows() if touches(row["folder"], target)]

    def exports_of_run(self, run_id: int) -> list[dict[str, Any]]:
        """The folders `run_id` exported into (that no later export has taken over)."""
        rows = self._retry(lambda c: c.execute(f"SELECT {COLUMNS} FROM run_exports WHERE run_id = ? ORDER BY created_at",
                                               (run_id,)).fetchall(), write=False)
        return [dict(r) for r in rows]

    def forget_exports(self, folders: Iterable[str | Path]) -> None:
        """Drop the rows of export folders that are gone."""
        resolved = [(os.path.realpath(f),) for f in folders]
        if resolved:
            self._retry(lambda c: c.executemany("DELETE FROM run_exports WHERE folder = ?", resolved), write=True)

    def _export_rows(self) -> list[dict[str, Any]]:
        def work(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            return conn.execute(f"SELECT {COLUMNS} FROM run_exports ORDER BY created_at").fetchall()

        return [dict(r) for r in self._retry(work, write=False)]
