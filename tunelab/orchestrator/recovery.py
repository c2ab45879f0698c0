"""Taking over a queued run from a server gone silent: can this machine run it, and where
does it write here.

A queued run names its model, data and checkpoint as the accepting server's machine saw
them. Another server may start it only when its own machine can read all of them (the
same checks a start makes, within the folders this server may read); otherwise the run
stays queued for a server that can. Its output folder is kept when this server may write
there, else the run gets a fresh folder under this server's outputs root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tunelab import paths
from tunelab.config.run_config import ConfigError, RunConfig
from tunelab.orchestrator.prechecks import check_before_start

READ_FIELDS = ("local_datasets", "local_eval_datasets")


def cannot_run_here(cfg: RunConfig, resume_from: Any) -> str | None:
    """Why this machine cannot read what the run trains on; None when it can."""
    try:
        if paths.reads_confined():  # a server answers HTTP clients: only its data roots
            for field in READ_FIELDS:
                for name in getattr(cfg, field):
                    paths.check_readable(name, field)
            if paths.names_local_path(cfg.model_name):
                paths.check_readable(cfg.model_name, "model_name")
        if resume_from:
            checkpoint = paths.check_readable(str(resume_from), "resume_from")
            if not checkpoint.is_dir():
                return f"resume_from: {checkpoint} is not a folder on this machine"
        check_before_start(cfg)
    except paths.PathNotAllowed as exc:
        return str(exc)
    except ConfigError as exc:
        return "; ".join(f"{e.field}: {e.message}" for e in exc.errors)
    return None


def output_dir_here(stored: str | None, cfg: RunConfig, taken: Callable[[Path], bool]) -> Path:
    """The run's stored folder when this server may write there, else a new one under its outputs root."""
    if stored:
        try:
            return paths.resolve_write_dir(stored, "output_dir", cfg.allow_output_outside_root)
        except paths.PathNotAllowed:
            pass
    label = cfg.display_name or Path(cfg.model_name).name or cfg.model_name
    return paths.new_output_dir(label, taken)
