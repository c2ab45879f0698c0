"""`tunelab keys create|list|revoke`: the named API keys of this tunelab home.

Keys are managed here, on the machine, and never over HTTP: whoever can run this can read
the run database anyway. A running server sees a new or revoked key on its next request.
"""

from __future__ import annotations

import sys
import time

import typer

from tunelab.cli.lazy_console import LazyConsole
from tunelab.keys import ROLES, KeyRefused, check_name, check_role, new_secret, secret_hash

keys_app = typer.Typer(no_args_is_help=True, help="Named API keys with roles (admin, member, viewer) for a shared server.")
console = LazyConsole()


def _store():
    from tunelab.store import Store

    return Store()


def _refused(message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(2)


@keys_app.command("create")
def create(name: str = typer.Argument(..., help="Who holds the key; recorded as the owner of the runs it starts."),
           role: str = typer.Option("member", help=f"One of {', '.join(ROLES)}: admin may do everything, member starts "
                                                    "runs and manages its own, viewer only reads.")) -> None:
    """Create a key and print its secret, once: only its SHA-256 is kept."""
    from tunelab.store import KeyNameTaken

    try:
        name, role = check_name(name), check_role(role)
    except KeyRefused as exc:
        raise _refused(f"{exc} (`tunelab keys create NAME --role member`)") from None
    secret = new_secret()
    try:
        with _store() as store:
            store.add_api_key(name, role, secret_hash(secret))
    except KeyNameTaken as exc:
        raise _refused(str(exc)) from None
    print(secret)
    print(f"created {role} key {name!r}: the line above is its secret, shown this once; send it as "
          "'Authorization: Bearer <secret>'", file=sys.stderr)


@keys_app.command("list")
def list_keys() -> None:
    """Every key with its role, when it was created and whether it was revoked (never a secret)."""
    with _store() as store:
        rows = store.list_api_keys()
    if not rows:
        print("no keys: the server accepts only its token (`tunelab token`); `tunelab keys create NAME --role member` adds one")
        return
    from rich.table import Table

    table = Table("name", "role", "created", "revoked")
    for row in rows:
        revoked = row["revoked_at"]
        table.add_row(row["name"], row["role"], _when(row["created_at"]), _when(revoked) if revoked else "")
    console.print(table)


@keys_app.command("revoke")
def revoke(name: str = typer.Argument(..., help="The key to revoke; its runs keep its name as their owner.")) -> None:
    """Revoke a key: the server refuses it from its next request on."""
    from tunelab.store import KeyNotFound

    try:
        with _store() as store:
            store.revoke_api_key(name)
    except KeyNotFound as exc:
        raise _refused(str(exc)) from None
    print(f"revoked key {name!r}")


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))
