"""The servers sharing one history: each one's heartbeat, and which are live.

A server (one tunelab home, tunelab/orchestrator/identity.py) writes `beat` every few
seconds while it lives; another server counts it live while its last beat is younger
than the silence bound it is given. The times are the writers' own clocks, so machines
sharing a history must keep their clocks in step (NTP) to well within that bound.
"""

from __future__ import annotations

import time
from typing import Any


class ServersMixin:
    """Heartbeats. Mixed into Store (tunelab/store/__init__.py); uses StoreBase's `_retry`."""

    def beat(self, server_id: str, host: str, instance: str) -> None:
        """Record that the server `server_id` (on `host`, this process: `instance`) lives now."""
        self._retry(lambda c: c.execute(
            "INSERT INTO servers (id, host, instance, last_seen) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET host = excluded.host, instance = excluded.instance,"
            " last_seen = excluded.last_seen", (server_id, host, instance, time.time())), write=True)

    def live_servers(self, silent_after_s: float) -> set[str]:
        """The ids of the servers whose last beat is younger than `silent_after_s` seconds."""
        since = time.time() - silent_after_s
        rows = self._retry(lambda c: c.execute("SELECT id FROM servers WHERE last_seen >= ?", (since,)).fetchall(),
                           write=False)
        return {server_id for (server_id,) in rows}

    def servers(self) -> list[dict[str, Any]]:
        """Every server that ever beat on this history: id, host, instance and last_seen."""
        rows = self._retry(lambda c: c.execute("SELECT id, host, instance, last_seen FROM servers ORDER BY id").fetchall(),
                           write=False)
        return [{"id": r[0], "host": r[1], "instance": r[2], "last_seen": r[3]} for r in rows]
