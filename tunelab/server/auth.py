"""The API token and keys: where the token comes from, and the gate every API request passes.

The token is created once, at random, in the tunelab home (`token`, mode 0600) and
reused by every later start; `TUNELAB_TOKEN` overrides it. Every path under `/api/` and
`/v1/` except `GET /api/health` needs `Authorization: Bearer <token>`. No route reads a
token from the URL: a browser's EventSource, which cannot set headers, opens a progress
stream with a short-lived single-use `?ticket=` instead (stream_tickets.py), asked for
with the header. Tokens are compared in constant time so response timing reveals nothing
about them.

Named API keys (tunelab.keys, `tunelab keys create`) are accepted the same way, beside
the token: a `tlk_` credential is looked up by its SHA-256 among the store's active keys
on every request, so a key created or revoked by the CLI counts at once, with no restart.
The gate records who called (`Caller`) in the request scope; tunelab.server.roles decides
what that caller may do. The token acts as admin, with no owner name (`local`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from tunelab import paths
from tunelab.keys import LOCAL_OWNER, hashes_match, looks_like_key, secret_hash
from tunelab.server.errors import error_response
from tunelab.server.stream_tickets import TicketBook
from tunelab.store import StoreError

log = logging.getLogger("tunelab.server")

TOKEN_ENV = "TUNELAB_TOKEN"
PUBLIC_PATHS = frozenset({"/api/health"})
# tunelab's API and the OpenAI-compatible one (whose clients send their API key as the bearer token).
TOKEN_ROOTS = ("/api", "/v1")
CALLER_SCOPE_KEY = "tunelab.caller"


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a key's name and role, or the home's token (`key_name` None, admin)."""

    role: str
    key_name: str | None = None
    # The key's SHA-256 (what the store keeps), so a stream ticket can name the key it stands for.
    key_hash: str | None = field(default=None, repr=False, compare=False)

    @property
    def shown(self) -> str:
        return self.key_name or LOCAL_OWNER


TOKEN_CALLER = Caller("admin")


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


def credentials(scope: Scope) -> list[str]:
    """What the request offers as token or key: the bearer header (never the URL)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    given = bearer_token(headers)
    return [given] if given else []


def is_authorized(scope: Scope, expected: str) -> bool:
    """True when the request carries the token in its header."""
    return any(token_matches(given, expected) for given in credentials(scope))


def identify(scope: Scope, token: str, store: Any | None) -> Caller | None:
    """The caller a request's credentials name: the token, an active key, or None (refused)."""
    for given in credentials(scope):
        if token_matches(given, token):
            return TOKEN_CALLER
        if store is not None and looks_like_key(given):
            digest = secret_hash(given)
            found = store.find_api_key(digest)
            if found is not None and hashes_match(digest, found["secret_sha256"]):
                return Caller(found["role"], found["name"], key_hash=digest)
    return None


def redeem_ticket(scope: Scope, tickets: TicketBook, store: Any | None) -> Caller | None:
    """The caller a `?ticket=` on a GET stands for, when the request has no credential of its
    own: the ticket must open this very path, now, once; a key it names must still be active
    (looked up again, so a revoked key's ticket opens nothing)."""
    given = _query(scope).get("ticket", [])
    if scope.get("method") != "GET" or len(given) != 1 or credentials(scope):
        return None
    issued = tickets.redeem(given[0], scope.get("path", ""))
    if issued is None:
        return None
    if issued.key_hash is None:  # the token's ticket (a key's always names its hash)
        return TOKEN_CALLER if issued.key_name is None else None
    found = store.find_api_key(issued.key_hash) if store is not None else None
    if found is None or found["name"] != issued.key_name:
        return None
    return Caller(found["role"], found["name"], key_hash=issued.key_hash)


def _query(scope: Scope) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def unauthorized_response():
    return error_response(
        401,
        "unauthorized",
        "missing, wrong or revoked API token or key: send 'Authorization: Bearer <token or key>' "
        "(`tunelab token` prints the token; `tunelab keys list` shows the keys)",
        headers={"WWW-Authenticate": "Bearer"},
    )


class TokenGate:
    """ASGI middleware: refuse any /api/ request without the token or an active key before
    routing, so an unauthenticated caller learns nothing (not even whether a body would
    validate). Records the caller in the scope for the role rules."""

    def __init__(self, app: ASGIApp, token: str, store: Any | None = None, tickets: TicketBook | None = None):
        self.app = app
        self.token = token
        self.store = store
        self.tickets = tickets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._needs_token(scope):
            try:
                # A key is looked up in the database: off the event loop, which streams progress.
                caller = TOKEN_CALLER if is_authorized(scope, self.token) else \
                    await asyncio.to_thread(identify, scope, self.token, self.store)
                if caller is None and self.tickets is not None:
                    caller = await asyncio.to_thread(redeem_ticket, scope, self.tickets, self.store)
            except StoreError as exc:
                log.warning("an API key could not be checked: %s", exc)
                await error_response(503, "database_busy", "the API key could not be checked because the run "
                                     "database is busy; try again in a moment")(scope, receive, send)
                return
            if caller is None:
                await unauthorized_response()(scope, receive, send)
                return
            scope[CALLER_SCOPE_KEY] = caller
        await self.app(scope, receive, send)

    @staticmethod
    def _needs_token(scope: Scope) -> bool:
        path = scope.get("path", "")
        if not any(path == root or path.startswith(root + "/") for root in TOKEN_ROOTS):
            return False
        # Health without details is public so monitors and the CLI can probe the server.
        return path not in PUBLIC_PATHS or "detail" in _query(scope)
