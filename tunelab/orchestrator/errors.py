"""The errors the orchestrator raises, each with the HTTP status a server should answer.

`ConfigError` (tunelab.config.run_config) and `PathNotAllowed` (tunelab.paths) are raised too, for
bad settings and paths; they are re-exported by the package for convenience.
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base class; `http_status` is what a REST surface should answer with."""

    http_status = 500


class RunActive(OrchestratorError):
    """A run is active (or its event pump is still finishing); the request must wait."""

    http_status = 409


class NoActiveRun(OrchestratorError):
    """A stop was asked for, but no run is active."""

    http_status = 409


class RunMismatch(OrchestratorError):
    """A stop named a run that is not the active one (the client's view is stale)."""

    http_status = 409

    def __init__(self, expected_run_id: int, active_run_id: int | None):
        self.expected_run_id = expected_run_id
        self.active_run_id = active_run_id
        super().__init__(f"run {expected_run_id} is not the active run (active: {active_run_id}); refresh and try again")


class NotResumable(OrchestratorError):
    """A run that cannot be resumed; `reason` says why in plain words."""

    http_status = 409

    def __init__(self, run_id: int, reason: str, http_status: int = 409):
        self.run_id = run_id
        self.reason = reason
        self.http_status = http_status
        super().__init__(f"run {run_id} cannot be resumed: {reason}")


class PersistError(OrchestratorError):
    """The database could not record something the request depends on; nothing was done."""

    http_status = 503
