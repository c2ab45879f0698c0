"""One file from an HTTP server to disk: streamed, resumable, and never half under its name.

The bytes go to `NAME.part` beside the target and are renamed to `NAME` only once their
count is the size the server listed, so a file under its final name is always whole. A
connection that breaks mid-file is picked up with a `Range` request from the bytes
already held, in this call (a few tries while no byte arrives) or in a later one (after
the process was killed): the part's validator (the server's ETag, kept beside it as
`NAME.part.etag`) goes along as `If-Range`, so a file that changed on the server in
between comes whole (HTTP 200) instead of being spliced onto bytes of its old version.

A finished file keeps the server's Last-Modified time as its own, as `curl -R` does; a
later call asks for its last byte with that date as `If-Range`, and keeps it when the
server answers 206 (unchanged), fetching it anew otherwise.
Only httpx is imported: the CLI stays quick to start.
"""

from __future__ import annotations

import os
import time
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable

import httpx

# Tries in a row that bring no new byte before giving up; any progress resets the count.
STALLED_TRIES = 4
RETRY_PAUSE_S = 0.5


class DownloadError(Exception):
    """The file could not be had. `status` is the server's HTTP answer when it refused
    (403, 404, ...), None for a network failure or a size that did not match."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def part_of(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def _etag_of(part: Path) -> Path:
    return part.with_name(part.name + ".etag")


def download(client: httpx.Client, url: str, params: dict[str, Any], target: Path, size: int,
             on_bytes: Callable[[int], None] = lambda n: None) -> str:
    """Bring the `size`-byte file at `url` (GET with `params`) to `target`. Returns what
    happened: "kept" (already here, unchanged on the server), "resumed" or "downloaded".
    Raises DownloadError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if size > 0 and target.is_file() and target.stat().st_size == size and _unchanged(client, url, params, target, size):
        on_bytes(size)
        return "kept"
    part = part_of(target)
    resumed, stalled = False, 0
    while True:
        before = part.stat().st_size if part.is_file() else 0
        try:
            resumed |= _fetch_into(client, url, params, part, size, on_bytes)
            break
        except httpx.TransportError as exc:
            now = part.stat().st_size if part.is_file() else 0
            stalled = 0 if now > before else stalled + 1
            if stalled >= STALLED_TRIES:
                raise DownloadError(f"the connection to the server broke while fetching {target.name} ({exc}); {now} of "
                                    f"{size} bytes are kept in {part}: run the command again to continue from there") from None
            time.sleep(RETRY_PAUSE_S)
    got = part.stat().st_size
    if got != size:
        _discard(part)
        raise DownloadError(f"{target.name}: the server sent {got} bytes where its listing said {size}; the file changed on "
                            "the server during the download: run the command again")
    os.replace(part, target)
    _etag_of(part).unlink(missing_ok=True)
    return "resumed" if resumed else "downloaded"


def _fetch_into(client: httpx.Client, url: str, params: dict[str, Any], part: Path, size: int,
                on_bytes: Callable[[int], None]) -> bool:
    """Fill `part` up to the end of the file, continuing what it holds when it can; True
    when it continued. A broken connection raises httpx.TransportError, bytes kept."""
    have = part.stat().st_size if part.is_file() else 0
    etag = _etag_of(part).read_text() if _etag_of(part).is_file() else ""
    headers = {}
    if 0 < have < size and etag:
        headers = {"Range": f"bytes={have}-", "If-Range": etag}
    with client.stream("GET", url, params=params, headers=headers) as response:
        if response.status_code == 206 and headers:
            expected = f"bytes {have}-{size - 1}/{size}"
            if response.headers.get("content-range") != expected:
                raise DownloadError(f"the server answered the range {response.headers.get('content-range')!r} where "
                                    f"{expected!r} was asked for {part.name}")
            mode, resumed = "ab", True
            on_bytes(have)
        elif response.status_code == 200:
            # A fresh start: the validator first, so a part always has the one its bytes came with.
            _discard(part)
            _etag_of(part).write_text(response.headers.get("etag", ""))
            mode, resumed = "wb", False
        else:
            response.read()
            raise DownloadError(_refusal(response), status=response.status_code)
        last_modified = response.headers.get("last-modified")
        with open(part, mode) as sink:
            for chunk in response.iter_bytes():  # as the bytes arrive, so a cut loses none held
                sink.write(chunk)
                on_bytes(len(chunk))
    if last_modified:
        _keep_server_time(part, last_modified)
    return resumed


def _unchanged(client: httpx.Client, url: str, params: dict[str, Any], target: Path, size: int) -> bool:
    """Whether the server's file is still the one `target` holds (same size, same
    Last-Modified): asked as its last byte, sent only if it is."""
    since = formatdate(target.stat().st_mtime, usegmt=True)
    headers = {"Range": f"bytes={size - 1}-", "If-Range": since}
    try:
        with client.stream("GET", url, params=params, headers=headers) as response:
            same = response.status_code == 206 and response.headers.get("content-range") == f"bytes {size - 1}-{size - 1}/{size}"
            if not same and response.status_code not in (200, 206):
                response.read()
                raise DownloadError(_refusal(response), status=response.status_code)
            return same  # a 200 is left unread: the download proper asks again
    except httpx.TransportError:
        return False


def _keep_server_time(path: Path, last_modified: str) -> None:
    try:
        stamp = parsedate_to_datetime(last_modified).timestamp()
    except (TypeError, ValueError):
        return
    os.utime(path, (stamp, stamp))


def _discard(part: Path) -> None:
    part.unlink(missing_ok=True)
    _etag_of(part).unlink(missing_ok=True)


def _refusal(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    return error.get("message") or f"the server answered HTTP {response.status_code}"
