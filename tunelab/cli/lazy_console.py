"""`LazyConsole`: a rich Console made on first use.

rich takes a noticeable part of a command's start-up to import, and `tunelab serve` (whose
first answer is timed) prints nothing through it; the command modules hold one of these
at module level instead of a Console, so only the commands that print pay for rich.
"""

from __future__ import annotations

from typing import Any


class LazyConsole:
    """Stands for `rich.console.Console(**options)`, created when first touched."""

    def __init__(self, **options: Any):
        self._options = options
        self._console: Any = None

    def real(self) -> Any:
        """The Console itself (for code that needs the object, not its attributes)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the proxy lacks: everything a Console has.
        return getattr(self.real(), name)
