"""How a CLI on the same home finds a running server: `<home>/server.json`.

The server writes {url, host, port, pid, started_at} when its application has started
(`advertise` hooks the app's lifespan) and removes the file first thing when it shuts
down, which happens inside uvicorn's signal handling, so SIGTERM and Ctrl-C clean up too. A server that was killed leaves the file
behind, so a reader trusts it only while that pid is alive and `/api/health` answers
(see `tunelab.cli.remote_run`). The file is written whole under a private name and renamed
into place, so a reader never sees half of it. It holds no token: that stays in the
0600 token file.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from starlette.types import ASGIApp

from tunelab import paths

SERVER_FILE = "server.json"


def server_file() -> Path:
    return paths.home() / SERVER_FILE


def advertise(app: Any, url: str, host: str, port: int) -> None:
    """Make `app` (FastAPI) hold the server file from its startup to its shutdown."""
    started = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(inner: ASGIApp) -> AsyncIterator[Any]:
        async with started(inner) as state:
            with announced(url, host, port):
                yield state

    app.router.lifespan_context = lifespan


@contextlib.contextmanager
def announced(url: str, host: str, port: int) -> Iterator[None]:
    """Advertise this process as the home's server for the duration of the block."""
    target = server_file()
    info = {"url": url, "host": host, "port": port, "pid": os.getpid(), "started_at": time.time()}
    draft = target.with_name(f".{SERVER_FILE}-{os.getpid()}")
    draft.write_text(json.dumps(info))
    os.replace(draft, target)
    try:
        yield
    finally:
        # A second server started on this home later owns the file now: leave it be.
        if (read_server_file() or {}).get("pid") == os.getpid():
            target.unlink(missing_ok=True)


def read_server_file() -> dict[str, Any] | None:
    """The advertised server's facts, or None when there is no readable file."""
    try:
        info = json.loads(server_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("pid"), int) or not isinstance(info.get("url"), str):
        return None
    return info
