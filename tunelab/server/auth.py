"""The API token: where it comes from, and the gate every API request passes.

The token is created once, at random, in the tunelab home (`token`, mode 0600) and
reused by every later start; `TUNELAB_TOKEN` overrides it. Every path under `/api/` and
`/v1/` except `GET /api/health` needs `Authorization: Bearer <token>`. The progress stream
may carry it as `?token=` instead, because a browser's EventSource cannot set headers.
Tokens are compared in constant time so response timing reveals nothing about them.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from tunelab import paths
from tunelab.server.errors import error_response

log = logging.getLogger("tunelab.server")

TOKEN_ENV = "TUNELAB_TOKEN"
PUBLIC_PATHS = frozenset({"/api/health"})
# tunelab's API and the OpenAI-compatible one (whose clients send their API key as the bearer token).
TOKEN_ROOTS = ("/api", "/v1")
# EventSource cannot send an Authorization header; only this route reads ?token=.
QUERY_TOKEN_PATHS = frozenset({"/api/train/progress"})


def load_or_create_token() -> str:
    """The token in force: TUNELAB_TOKEN, else the home's token file (created if absent)."""
    token, _ = token_and_origin()
    return token


def token_and_origin() -> tuple[str, str]:
    """The token and where it came from: "env", "file", or "created" (new this call)."""
    override = os.environ.get(TOKEN_ENV, "").strip()
    if override:
        return override, "env"
    path = paths.token_path()
    existing = _read_token(path)
    if existing:
        return existing, "file"
    return _create_token_file(path)


def _create_token_file(path: Path) -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    # Written in full, mode 0600, under a private name first; then linked into place,
    # which never replaces a token another server starting at the same time just wrote.
    draft = path.with_name(f".token-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            existing = _read_token(path)
            if existing:
                return existing, "file"
            os.replace(draft, path)  # an empty leftover file: take its place
        return token, "created"
    finally:
        draft.unlink(missing_ok=True)


def _read_token(path: Path) -> str:
    try:
        if path.stat().st_mode & 0o077:
            log.warning("the token file %s was readable by others; making it private (0600)", path)
            os.chmod(path, 0o600)
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def bearer_token(headers: dict[str, str]) -> str:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def token_matches(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def is_authorized(scope: Scope, expected: str) -> bool:
    """True when the request carries the token (header, or query on the SSE route)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    if token_matches(bearer_token(headers), expected):
        return True
    if scope.get("path") in QUERY_TOKEN_PATHS:
        return any(token_matches(v, expected) for v in _query(scope).get("token", []))
    return False


def _query(scope: Scope) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def unauthorized_response():
    return error_response(
        401,
        "unauthorized",
        "missing or wrong API token: send 'Authorization: Bearer <token>' (`tunelab token` prints it)",
        headers={"WWW-Authenticate": "Bearer"},
    )


class TokenGate:
    """ASGI middleware: refuse any /api/ request without the token before routing, so
    an unauthenticated caller learns nothing (not even whether a body would validate)."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._needs_token(scope) and not is_authorized(scope, self.token):
            await unauthorized_response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _needs_token(scope: Scope) -> bool:
        path = scope.get("path", "")
        if not any(path == root or path.startswith(root + "/") for root in TOKEN_ROOTS):
            return False
        # Health without details is public so monitors and the CLI can probe the server.
        return path not in PUBLIC_PATHS or "detail" in _query(scope)
