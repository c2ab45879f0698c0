"""Letting a fast tokenizer spread one batch call over every core, and only that call.

The worker sets TOKENIZERS_PARALLELISM=false for its whole life (entry.QUIET_ENVIRONMENT):
a process forked after the tokenizers' thread pool ran (a DataLoader worker) would
otherwise print a warning and could deadlock. Tokenizing a dataset is the one place the
pool pays (10,000 chat rows: 2.9x faster on 2 cores), so `all_cores()` turns it on for
that call and back off after; the library reads the variable at every call. A user who
set the variable themselves keeps their choice (`remember_user_choice` runs before the
worker sets its own).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

VARIABLE = "TOKENIZERS_PARALLELISM"
_user_choice: str | None = None


def remember_user_choice() -> None:
    """Note the variable as the user's environment had it, before the worker's default."""
    global _user_choice
    _user_choice = os.environ.get(VARIABLE)


@contextmanager
def all_cores() -> Iterator[None]:
    if _user_choice is not None:
        yield
        return
    before = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = before
