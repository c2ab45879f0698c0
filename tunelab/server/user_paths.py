"""Confining the file paths an HTTP client puts in a run config.

A client of the server may only make it read inside the folders tunelab manages (the
data roots of `tunelab.paths`). Every local path in a config — data files, eval files,
a model folder — is checked there, and the config handed on carries the checked,
absolute, symlink-free paths, so the worker reads exactly what was checked (a relative
path or a symlink cannot be re-interpreted later). Hub ids pass through unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tunelab import paths
from tunelab.config import RunConfig

PATH_LIST_FIELDS = ("local_datasets", "local_eval_datasets")


def is_local_model(name: str) -> bool:
    """A hub id is `org/name`; a name that is absolute, starts like a path or exists on
    disk (relative to the working folder, as the worker would see it) is a folder."""
    return name.startswith(("/", "~", ".")) or Path(name).expanduser().exists()


def confine_user_paths(config: RunConfig) -> RunConfig:
    """The config with every local path checked (PathNotAllowed naming the field) and
    replaced by its resolved form."""
    updates: dict[str, object] = {}
    for field in PATH_LIST_FIELDS:
        updates[field] = [str(paths.check_readable(item, field)) for item in getattr(config, field)]
    if is_local_model(config.model_name):
        absolute = Path(config.model_name).expanduser().absolute()
        updates["model_name"] = str(paths.check_readable(str(absolute), "model_name"))
    return config.model_copy(update=updates)
