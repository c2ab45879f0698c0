"""The parent side of a run: spawn, event pump, progress state, stop watchdog,
finalize-once and cancel clean-up. `Orchestrator` is the public entry point."""

from tunelab.config.run_config import ConfigError
from tunelab.orchestrator.core import Orchestrator
from tunelab.orchestrator.errors import NoActiveRun, NotResumable, OrchestratorError, PersistError, RunActive, RunMismatch
from tunelab.paths import PathNotAllowed

__all__ = ["Orchestrator", "ConfigError", "PathNotAllowed", "OrchestratorError", "RunActive", "NoActiveRun",
           "RunMismatch", "NotResumable", "PersistError"]
