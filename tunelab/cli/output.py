"""What every `tunelab` command prints through: the terminal consoles and the one way a
command fails (a red `error:` line naming the field, then its exit code).

Kept apart from tunelab/cli/main.py so that the command modules (export_cli, model_use_cli)
share it without importing each other.
"""

from __future__ import annotations

import typer

from tunelab.cli.lazy_console import LazyConsole
from tunelab.text import printable

# Handed to other modules as console.real(): rich's own code needs the Console itself.
console = LazyConsole()
err_console = LazyConsole(stderr=True)


def escaped(text: object) -> str:
    """`text` printable and safe inside rich markup."""
    from rich.markup import escape

    return escape(printable(text))


def fail(code: int, message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/] {escaped(message)}")
    return typer.Exit(code)
