"""How many queued runs one key may have waiting at once: the server's cap per key.

Without a cap one key can fill the queue for the whole team (200 runs queued in 10 s was
seen). A start or resume by a key (for a resume: the run's owner, whose run the
continuation stays) that already has `cap` runs waiting is a 429 naming the cap and how to
raise it. Set by whoever starts the server: `tunelab serve --max-queued-per-key N`, or
TUNELAB_MAX_QUEUED_PER_KEY; the routes count under the server's start lock, so two starts
racing cannot both take the last place.
"""

from __future__ import annotations

import os
from typing import Any

from tunelab.server.errors import ApiError

CAP_ENV = "TUNELAB_MAX_QUEUED_PER_KEY"
DEFAULT_CAP = 20
MAX_CAP = 100_000
HOW_TO_RAISE = f"`tunelab serve --max-queued-per-key N` or {CAP_ENV}=N"


def checked_cap(value: Any, source: str) -> int:
    """`value` as a cap; ValueError naming `source` and the range when it is not one."""
    try:
        cap = int(str(value).strip())
    except ValueError:
        cap = 0
    if not 1 <= cap <= MAX_CAP:
        raise ValueError(f"{source} must be a whole number from 1 to {MAX_CAP} (queued runs one key may have "
                         f"waiting), got {value!r}")
    return cap


def configured_cap(value: int | None = None) -> int:
    """The cap given (the --max-queued-per-key flag), else TUNELAB_MAX_QUEUED_PER_KEY, else 20."""
    if value is not None:
        return checked_cap(value, "--max-queued-per-key")
    from_env = os.environ.get(CAP_ENV, "").strip()
    return checked_cap(from_env, CAP_ENV) if from_env else DEFAULT_CAP


def require_queue_room(state: Any, owner: str | None) -> None:
    """429 when the key `owner` (None: the server's own token) has the cap's number of runs
    waiting. Call with the server's start lock held."""
    cap = state.max_queued_per_key
    waiting = sum(1 for run in state.store.queued_runs() if run.get("owner") == owner)
    if waiting >= cap:
        whose = f"the key {owner!r}" if owner else "the server's own token (owner 'local')"
        raise ApiError(429, "queue_cap_reached",
                       f"{whose} already has {waiting} runs waiting in the queue, this server's cap per key "
                       f"({cap}); wait for one to start, cancel one (POST /api/runs/{{id}}/stop with save: false), "
                       f"or have the server's admin raise the cap ({HOW_TO_RAISE})")
