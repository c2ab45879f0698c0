"""Who this server is among the servers sharing one history, and its heartbeat.

A server is one tunelab home: its id is made once, at random, and kept in
`<home>/server-id`, so every life of the same home is the same server whatever its
process id, and two machines (or two containers) with the same host name are still two
servers. The host name is recorded beside the id, for people and for the devices of one
machine. Each run records the server that accepted it (store `runs.server_id`).

`Heartbeat` writes `store.beat` from a daemon thread, `BEATS_PER_BOUND` times per silence
bound. A server whose last beat is older than the bound (`TUNELAB_SERVER_SILENT_S`,
default 90 s) is silent: another server then closes its running runs and may take over its
queued ones (queueing.py). The bound must be well above any pause a live server can have
(a database that is unreachable for a while, a machine suspended), or a live server's runs
would be closed under it; lower it only where that is known (tests use a few seconds).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from tunelab import paths
from tunelab.store import Store, StoreError

log = logging.getLogger("tunelab.orchestrator")
ID_FILE = "server-id"
SILENT_ENV = "TUNELAB_SERVER_SILENT_S"
DEFAULT_SILENT_S = 90.0
BEATS_PER_BOUND = 6
_VALID_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ServerIdentity:
    id: str
    host: str


def load_identity(home: Path | None = None) -> ServerIdentity:
    """This home's server identity, made (atomically, once) the first time it is asked for."""
    path = (home or paths.home()) / ID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written beside, then linked into place: of two processes starting on a fresh
        # home at once, one link wins and both read the winner's id.
        draft = path.with_name(f".{ID_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        draft.write_text(f"srv-{secrets.token_hex(8)}\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    text = path.read_text().strip()
    if not _VALID_ID.match(text):
        raise RuntimeError(f"{path} does not hold a server id (letters, digits, '_', '.', '-'; at most 64); delete it "
                           "and a new id is made (this home's earlier runs then count as another server's)")
    return ServerIdentity(text, socket.gethostname())


def silent_after_s() -> float:
    """The silence bound: TUNELAB_SERVER_SILENT_S seconds, else DEFAULT_SILENT_S."""
    raw = os.environ.get(SILENT_ENV, "").strip()
    if not raw:
        return DEFAULT_SILENT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        log.warning("%s=%r is not a number of seconds above 0; using %.0f", SILENT_ENV, raw, DEFAULT_SILENT_S)
        return DEFAULT_SILENT_S
    return value


class Heartbeat:
    """Beats for `identity` in `store` until stopped or until the store is closed."""

    def __init__(self, store: Store, identity: ServerIdentity, instance: str, bound_s: float):
        self._store, self._identity, self._instance = store, identity, instance
        self.interval_s = bound_s / BEATS_PER_BOUND
        self._stop = threading.Event()
        self.beat()  # live before its first run: another server never sees it silent meanwhile
        self._thread = threading.Thread(target=self._loop, name="tunelab-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> bool:
        try:
            self._store.beat(self._identity.id, self._identity.host, self._instance)
            return True
        except StoreError as exc:
            if "closed" in str(exc):
                self._stop.set()  # the store went away with its owner
            else:
                log.warning("the heartbeat could not be written: %s", exc)
        except Exception:
            log.exception("the heartbeat could not be written")
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
