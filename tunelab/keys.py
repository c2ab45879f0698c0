"""Named API keys: what a key is, how its secret is made and kept, and who may do what.

A key has a name (the owner recorded on the runs it starts), a role and a secret. The
secret is `tlk_` + 32 random bytes (256 bits, URL-safe base64), shown once at creation;
the run store keeps only its SHA-256. A slow password hash (bcrypt, argon2) exists to
make guessing a low-entropy human password expensive; a 256-bit random secret cannot be
guessed at any speed, so a fast hash loses nothing and keeps checking a key on every
request cheap. A leaked database therefore holds no usable key. Found hashes are still
compared in constant time, so nothing about a stored hash shows in response timing.

Roles, from most to least: `admin` may do everything, including the opt-in settings the
server was started to allow (trust_remote_code, ...); `member` starts runs and manages
its own, and reads everything; `viewer` only reads. The home's token (tunelab.server.auth)
stays valid beside keys and acts as admin, owner `local`: it is the machine's own user.
Which route needs what is tunelab.server.roles.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

ROLES = ("admin", "member", "viewer")
SECRET_PREFIX = "tlk_"
SECRET_BYTES = 32
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The owner shown for runs started with the home's token (or by the CLI without a server).
LOCAL_OWNER = "local"


class KeyRefused(ValueError):
    """A key name, role or secret tunelab refuses; `field` names the argument at fault."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_name(name: object) -> str:
    """A key name: 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or
    digit (it appears in run listings and error messages), and not `local`."""
    text = name.strip() if isinstance(name, str) else ""
    if not NAME_PATTERN.fullmatch(text):
        raise KeyRefused("name", f"{name!r} is not a key name: use 1 to 64 letters, digits, '.', '_' or '-', "
                                "starting with a letter or digit (e.g. alice or ci-bot)")
    if text.lower() == LOCAL_OWNER:
        raise KeyRefused("name", f"{LOCAL_OWNER!r} names the server's own token; choose another name")
    return text


def check_role(role: object) -> str:
    if role not in ROLES:
        raise KeyRefused("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    return str(role)


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def secret_hash(secret: str) -> str:
    """The form the store keeps: SHA-256 of the secret, hex (see the module doc for why)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def hashes_match(given_hash: str, stored_hash: str) -> bool:
    return hmac.compare_digest(given_hash.encode(), stored_hash.encode())


def looks_like_key(value: str) -> bool:
    """Only `tlk_` strings are looked up in the store; anything else is no key."""
    return value.startswith(SECRET_PREFIX) and len(value) > len(SECRET_PREFIX)
