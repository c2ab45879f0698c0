"""Named API keys (`api_keys`): only their SHA-256 hashes come here.

tunelab.keys decides names, roles and hashing.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tunelab.store.errors import KeyNameTaken, KeyNotFound


class KeysMixin:
    """The API keys. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry`."""

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
