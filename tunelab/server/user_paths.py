"""Confining the file paths an HTTP client puts in a run config.

A client of the server may only make it read inside the folders tunelab manages (the
data roots of `tunelab.paths`). Every local path in a config — data files, eval files,
a model folder — is checked there, and the config handed on carries the checked,
absolute, symlink-free paths, so the worker reads exactly what was checked (a relative
path or a symlink cannot be re-interpreted later). Hub ids pass through unchanged.
"""

from __future__ import annotations

from tunelab import paths
from tunelab.config import RunConfig

PATH_LIST_FIELDS = ("local_datasets", "local_eval_datasets")


def confine_user_paths(config: RunConfig) -> RunConfig:
    """The config with every local path checked by `tunelab.paths` (PathNotAllowed naming
    the field) and replaced by its resolved form."""
    updates: dict[str, object] = {}
    for field in PATH_LIST_FIELDS:
        updates[field] = [str(paths.check_readable(item, field)) for item in getattr(config, field)]
    updates["model_name"] = paths.check_model_source(config.model_name)
    return config.model_copy(update=updates)
