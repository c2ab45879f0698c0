"""Noticing a hub download that has stopped making progress.

`from_pretrained` gives no progress hook, so a thread watches the bytes in the model's
hub cache folder instead. While a download is under way (the repo folder is still empty,
or it holds `*.incomplete` blobs) and the byte count has not moved for
`TUNELAB_STALL_SECONDS` (default 120), one `stall{message}` event is sent; the parent
then restarts the worker with the other download transport. Loading a fully cached model
never counts as a stall. Torch-free.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from tunelab import events

DEFAULT_STALL_SECONDS = 120.0


def stall_seconds() -> float:
    try:
        return float(os.environ.get("TUNELAB_STALL_SECONDS") or DEFAULT_STALL_SECONDS)
    except ValueError:
        return DEFAULT_STALL_SECONDS


def hub_cache_folders(model_name: str) -> list[Path]:
    """Where a hub download of `model_name` lands: its repo folder (and the xet chunk cache)."""
    from huggingface_hub import constants

    folders = [Path(constants.HF_HUB_CACHE) / ("models--" + model_name.replace("/", "--"))]
    xet = getattr(constants, "HF_XET_CACHE", None)
    if xet:
        folders.append(Path(xet))
    return folders


def _scan(folders: list[Path]) -> tuple[int, bool]:
    """Total bytes under the folders, and whether a download looks unfinished (the repo
    folder, `folders[0]`, is still empty or holds partial blobs)."""
    total, repo_files, incomplete = 0, 0, False
    for index, folder in enumerate(folders):
        for root, _dirs, names in os.walk(folder):
            for name in names:
                try:
                    total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
                except OSError:
                    continue  # renamed or removed while we looked
                if index == 0:
                    repo_files += 1
                    incomplete = incomplete or name.endswith(".incomplete")
    return total, incomplete or repo_files == 0


class DownloadStallWatch:
    """Context manager that reports one stall while the body (a model download) is stuck."""

    def __init__(self, ctx: Any, folders: list[Path], limit_seconds: float | None = None, poll_seconds: float = 1.0):
        self._ctx = ctx
        self._folders = folders
        self._limit = stall_seconds() if limit_seconds is None else limit_seconds
        self._poll = poll_seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tunelab-stall-watch", daemon=True)
        self.reported = False

    def __enter__(self) -> "DownloadStallWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        last_size, last_change = _scan(self._folders)[0], time.monotonic()
        while not self._done.wait(self._poll):
            size, downloading = _scan(self._folders)
            now = time.monotonic()
            if size != last_size or not downloading:
                last_size, last_change = size, now
                continue
            if now - last_change >= self._limit and not self.reported:
                self.reported = True
                self._ctx.emit(events.make(
                    events.STALL,
                    message=f"the model download made no progress for {int(now - last_change)} s",
                ))
