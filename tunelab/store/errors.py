"""What the run store refuses or cannot do: StoreError and its family.

Each error says what was wrong and what to do instead; `InvalidValue.field` names the
value, so the server and the CLI can point at it.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class for everything the store refuses or cannot do."""


class StoreBusy(StoreError):
    """The database stayed locked by someone else for the whole retry window."""


class RunNotFound(StoreError, LookupError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} does not exist")


class RunIsRunning(StoreError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} is still running; stop it before deleting it")


class AlreadyResumed(StoreError):
    def __init__(self, run_id: int, by_run_id: int):
        self.run_id, self.by_run_id = run_id, by_run_id
        super().__init__(f"run {run_id} was already resumed by run {by_run_id}; resume run {by_run_id} instead")


class RunNotQueued(StoreError):
    def __init__(self, run_id: int, status: str):
        self.run_id, self.status = run_id, status
        super().__init__(f"run {run_id} is {status}, not queued; only a queued run can be moved or given a priority")


class QueueJump(StoreError):
    """A member's move would put its run ahead of another owner's queued run."""

    def __init__(self, run_id: int, passed_id: int, passed_owner: str | None, highest: int):
        self.run_id, self.passed_id, self.passed_owner, self.highest = run_id, passed_id, passed_owner, highest
        whose = f"the key {passed_owner!r}" if passed_owner else "the server's own token (owner 'local')"
        super().__init__(f"run {run_id} would move ahead of run {passed_id} of {whose}; a member moves its queued "
                         f"runs only among its own (the highest place run {run_id} can take is {highest}): "
                         "only an admin places a run ahead of others' runs")


class DuplicateStartRequest(StoreError):
    def __init__(self, request_id: str, run_id: int | None):
        self.request_id, self.run_id = request_id, run_id
        super().__init__(f"start request {request_id!r} already created run {run_id}")


class KeyNameTaken(StoreError):
    def __init__(self, name: str, revoked: bool):
        self.name = name
        why = "a revoked key had it, and its runs keep that name" if revoked else "a key with that name exists"
        super().__init__(f"name: {name!r} is taken ({why}); choose another name")


class KeyNotFound(StoreError, LookupError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"name: there is no active key named {name!r}; `tunelab keys list` shows them")


class InvalidValue(StoreError, ValueError):
    """A value the store will not write; `field` names it."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")
