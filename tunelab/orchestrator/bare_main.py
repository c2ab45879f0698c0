"""Starting a spawn child without running the parent's main script again in it.

A `spawn` child first runs the parent's `__main__` script again (as `__mp_main__`), so
that objects defined there can be unpickled. A worker needs none of it: its target
travels as a module name (child.py) and its arguments are plain data. And the script is
heavy: the `tunelab` console script imports the whole CLI (typer, rich, the settings
models, the orchestrator), 0.6-1.8 s that `tunelab train --local`'s worker spent before
its own first line. multiprocessing leaves the main module alone where the parent's is a
package's `__main__` (as under `python -m package`); `main_not_rerun` makes the parent's
main read as such while a child starts, unless the target itself lives in the script.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from typing import Iterator

_MISSING = object()
# Two threads starting children at once (a run and the prewarm's refill) must not restore
# each other's swapped spec: one swap at a time.
_SWAP = threading.Lock()


@contextmanager
def main_not_rerun(target: str) -> Iterator[None]:
    """While a child with this "module:function" target starts, its parent's main script
    is not run in it."""
    main = sys.modules.get("__main__")
    if main is None or target.partition(":")[0] in ("__main__", "__mp_main__"):
        yield
        return
    with _SWAP:
        before = main.__dict__.get("__spec__", _MISSING)
        # multiprocessing.spawn skips a main whose spec is named "__main__" (or "pkg.__main__").
        main.__spec__ = ModuleSpec("__main__", None)
        try:
            yield
        finally:
            if before is _MISSING:
                del main.__spec__
            else:
                main.__spec__ = before
