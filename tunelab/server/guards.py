"""`RequestGuard`: the checks every request passes before anything else looks at it.

- Host: a server on loopback answers only to loopback names (localhost, 127.0.0.1,
  [::1], any port). A web page on another site can point its own DNS name at
  127.0.0.1 ("DNS rebinding") and so reach a local server from the browser; its
  requests still carry that name in `Host`, which is how they are told apart. More
  names can be allowed (`--allowed-host`, TUNELAB_ALLOWED_HOSTS).
- Body size: a run config is a few KB, so a body over `max_body_bytes` (1 MiB) is
  refused with 413 before it is read into memory — by its Content-Length when it
  declares one, else while it streams in. A chat completion may carry images or audio
  clips (base64, a third larger than their bytes): its body may hold the media limit
  (`media_input.max_media_bytes`) on top.
- Body time: the whole body must arrive within `body_timeout_s` (slow_clients.py), else
  408 and the connection is closed: a client trickling bytes holds nothing for long.
- Body text: a JSON body with a lone UTF-16 surrogate in any string is a 400 naming the
  field (body_text.py), in OpenAI's error shape under /v1.
- A dataset upload (UPLOAD_PATH) is the exception: its body is a file, streamed to disk
  by its route under TUNELAB_UPLOAD_MAX_MB, so only its declared size is checked here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from typing import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunelab.inference.media_input import MAX_MEDIA_ENV, max_media_bytes
from tunelab.server import slow_clients
from tunelab.server.body_text import lone_surrogate
from tunelab.server.dataset_files import too_large_message, upload_max_bytes
from tunelab.server.errors import error_response
from tunelab.server.openai_schemas import OpenAIError

ALLOWED_HOSTS_ENV = "TUNELAB_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MAX_BODY_BYTES = 1 << 20
# The route whose body may carry images and audio clips.
MEDIA_PATHS = ("/v1/chat/completions",)
UPLOAD_PATH = "/api/datasets/upload"  # routes_dataset_files.UPLOAD_PATH


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """`Host` without its port, lower case: `[::1]:8765` -> `::1`, `Example:80` -> `example`."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts_for(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The host names a server bound to `bind_host` answers to: loopback names plus
    `extra` and TUNELAB_ALLOWED_HOSTS (comma-separated). None means any name, which is
    the rule for a non-loopback bind that was given no names."""
    names = {host_name(n) for n in [*extra, *os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")] if n.strip()}
    if "*" in names:
        return None
    if not names and not is_loopback(bind_host):
        return None
    if bind_host not in ("", "0.0.0.0", "::"):
        names.add(host_name(bind_host))  # the address it was told to listen on
    return frozenset(names | set(LOOPBACK_NAMES))


class RequestGuard:
    """ASGI middleware applying the Host rule and the body-size limit (see module doc)."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str] | None, max_body_bytes: int = MAX_BODY_BYTES,
                 body_timeout_s: float | None = None):
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s if body_timeout_s is not None else slow_clients.body_timeout_s()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = host_name(headers.get("host", ""))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            names = ", ".join(sorted(self.allowed_hosts))
            await error_response(400, "host_not_allowed",
                                 f"this server does not answer to the host name {host or '(none)'!r}; it answers to {names}. "
                                 f"Open it by one of those, or allow the name with `tunelab serve --allowed-host NAME` "
                                 f"({ALLOWED_HOSTS_ENV})", field="Host")(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") == UPLOAD_PATH:
            # A dataset upload streams to disk under its own bound (routes_dataset_files.py):
            # a larger declared size is refused here, before a byte is read.
            limit = upload_max_bytes()
            if self._declared_too_large(headers, limit):
                await error_response(413, "too_large", too_large_message(limit), field="file")(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        media = scope.get("path") in MEDIA_PATHS
        limit = self.max_body_bytes + (max_media_bytes() * 4 // 3 + 4 if media else 0)
        if self._declared_too_large(headers, limit):
            await self._too_large(scope, receive, send, limit, media)
            return
        try:
            body = await asyncio.wait_for(self._read_body(receive, limit), self.body_timeout_s)
        except asyncio.TimeoutError:
            await self._too_slow(scope, receive, send)
            return
        if body is None:
            await self._too_large(scope, receive, send, limit, media)
            return
        bad_text = lone_surrogate(body)
        if bad_text is not None:
            await _not_text(scope, *bad_text)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, receive: Receive, limit: int) -> bytes | None:
        """The whole body, or None once it grows past the limit. Read here, up front, so
        a body sent without Content-Length is held to the same limit (an API body is small)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client went away; the app sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _declared_too_large(self, headers: dict[str, str], limit: int) -> bool:
        try:
            return int(headers.get("content-length", "0")) > limit
        except ValueError:
            return False

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int, media: bool) -> None:
        shown = f"{limit // 1024} KiB"
        hint = (f"images and audio clips in one request may total {max_media_bytes() // 1024} KiB ({MAX_MEDIA_ENV}); send smaller ones"
                if media else "a run config is a few KB — send only the settings")
        await error_response(413, "too_large", f"the request body is larger than {shown}, the most this server reads; {hint}",
                             field="body")(scope, receive, send)


    async def _too_slow(self, scope: Scope, receive: Receive, send: Send) -> None:
        # `Connection: close`: the rest of a body that never came must not be read as the next request.
        await error_response(408, "request_timeout", f"the request body did not arrive within {self.body_timeout_s:g} s, "
                                                     f"the most this server waits ({slow_clients.BODY_TIMEOUT_ENV}); send it at once",
                             field="body", headers={"Connection": "close"})(scope, receive, send)


def _not_text(scope: Scope, field: str, position: int) -> JSONResponse:
    message = (f"{field} holds a lone UTF-16 surrogate (half of a pair, e.g. \\ud800 alone) at character {position}, "
               "which is not text; send valid Unicode")
    if scope.get("path", "").startswith("/v1/"):
        return JSONResponse(OpenAIError(400, message, param=field, code="invalid_text").body(), status_code=400)
    return error_response(400, "invalid_text", message, field=field)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body read up front, then the client's own
    messages (a disconnect, which the progress stream listens for)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
